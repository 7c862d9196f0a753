"""`strom get-offsets` (kafka-get-offsets.sh) against a real broker: latest, earliest, by timestamp, max-timestamp,
topic regexes, Kafka's --topic-partitions syntax, and one-line errors."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from strom.admin import AdminClient, NewTopic
from strom.cli.errors import CliError
from strom.cli.get_offsets import parse_topic_partitions
from strom.producer import KafkaProducer
from strom.testing.broker_process import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("get-offsets") / "data")
    b.start()
    with AdminClient({"bootstrap.servers": b.bootstrap}) as admin:
        admin.create_topics([NewTopic("orders", 3, 1), NewTopic("audit", 1, 1)]).all().result(30)
    with KafkaProducer({"bootstrap.servers": b.bootstrap}, key_serializer="bytes", value_serializer="bytes") as p:
        for i in range(30):  # partition i % 3, timestamps 1000..1029
            p.send("orders", value=b"x", partition=i % 3, timestamp=1_000 + i)
        p.send("audit", value=b"y", timestamp=5_000)
        p.flush(30)
    yield b.bootstrap
    b.stop()
    b.cleanup()


def get_offsets(bootstrap: str, *args: str) -> tuple[int, list[str], str]:
    out = subprocess.run([sys.executable, "-m", "strom.cli.main", "get-offsets", "--bootstrap-server", bootstrap,
                          *args], capture_output=True, text=True, timeout=60)
    return out.returncode, out.stdout.splitlines(), out.stderr.strip()


def test_offsets_by_time(bootstrap: str) -> None:
    assert get_offsets(bootstrap) == (0, ["audit:0:1", "orders:0:10", "orders:1:10", "orders:2:10"], "")
    assert get_offsets(bootstrap, "--topic", "ord.*", "--time", "earliest")[1] == [
        "orders:0:0", "orders:1:0", "orders:2:0"]
    # the first offset with a timestamp at or after 1015: partition 1 holds 1001, 1004, ..., partition 2 1002, ...
    assert get_offsets(bootstrap, "--topic-partitions", "orders:1-,audit", "--time", "1015")[1] == [
        "audit:0:0", "orders:1:5", "orders:2:5"]
    assert get_offsets(bootstrap, "--topic", "orders", "--partitions", "0", "--time", "max-timestamp")[1] == [
        "orders:0:9"]
    assert get_offsets(bootstrap, "--topic", "orders", "--time", "99999")[1] == [
        "orders:0:", "orders:1:", "orders:2:"]  # nothing that late: empty, as Kafka prints it


def test_bad_input_is_one_line(bootstrap: str) -> None:
    code, out, err = get_offsets(bootstrap, "--topic", "nope")
    assert (code, out, err) == (1, [], "Error: Could not match any topic-partitions with the specified filters")
    code, _, err = get_offsets(bootstrap, "--time", "soon")
    assert code == 2 and err.startswith("Error: Malformed time argument soon.")
    code, _, err = get_offsets(bootstrap, "--topic", "orders", "--topic-partitions", "orders:0")
    assert code == 2 and err == "Error: --topic-partitions cannot be used with --topic or --partitions"


def test_topic_partitions_syntax() -> None:
    parsed = parse_topic_partitions("t1:1,t2:0-3,t3,t4:5-,t5:-3")
    assert [(p.pattern, f) for p, f in parsed] == [
        ("t1", range(1, 2)), ("t2", range(0, 3)), ("t3", None), ("t4", range(5, 2**31)), ("t5", range(0, 3))]
    for bad in ("t:x", ":1", "t:1:2"):
        with pytest.raises(CliError, match="Invalid --topic-partitions entry"):
            parse_topic_partitions(bad)
