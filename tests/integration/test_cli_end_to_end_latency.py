"""`strom end-to-end-latency` against a real broker: Kafka's output lines, the HDR percentiles, the topic
created when missing, and the records really sent and read back."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from strom.admin import AdminClient, OffsetSpec
from strom.common.structs import TopicPartition
from strom.testing.broker_process import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("e2e") / "data")
    b.start()
    yield b
    b.stop()
    b.cleanup()


def test_round_trips_are_timed_and_reported(broker: BrokerProcess) -> None:
    out = subprocess.run([sys.executable, "-m", "strom.cli.main", "end-to-end-latency", broker.bootstrap,
                          "latency", "250", "all", "64"], capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == 'Topic "latency" does not exist. Will create topic with 1 partition(s) and replication ' \
                       'factor = 1'
    assert re.fullmatch(r"0\t\d+\.\d+", lines[1])
    assert re.fullmatch(r"Avg latency: \d+\.\d{4} ms", lines[2])
    p50, p99, p999 = map(int, re.fullmatch(r"Percentiles: 50th = (\d+), 99th = (\d+), 99\.9th = (\d+)",
                                           lines[3]).groups())
    assert p50 <= p99 <= p999
    hdr = re.fullmatch(r"Percentiles \(µs, HdrHistogram\): 50th = (\d+), 99th = (\d+), 99\.9th = (\d+), "
                       r"max = (\d+)", lines[4])
    assert hdr is not None
    h50, h99, h999, hmax = map(int, hdr.groups())
    assert 0 < h50 <= h99 <= h999 <= hmax
    assert h50 // 1000 in (p50 - 1, p50, p50 + 1)  # the same distribution in two units
    with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        tp = TopicPartition("latency", 0)
        assert admin.list_offsets({tp: OffsetSpec.latest()}).result(30)[tp].offset == 250


def test_an_unreachable_broker_is_one_line() -> None:
    out = subprocess.run([sys.executable, "-m", "strom.cli.main", "end-to-end-latency", "127.0.0.1:1", "t", "5",
                          "1", "10"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "Error: Cannot connect to the broker at 127.0.0.1:1 (Connection refused). Is the broker running?"]
