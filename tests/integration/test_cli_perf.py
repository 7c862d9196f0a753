"""`strom producer-perf-test` / `strom consumer-perf-test` (Kafka's perf tools) against a broker subprocess."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from strom.broker_process import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

CLI = [sys.executable, "-m", "strom.cli.main"]
TOTAL = re.compile(r"^(\d+) records sent, (\d+\.\d{6}) records/sec \((\d+\.\d\d) MB/sec\), (\d+\.\d\d) ms avg latency, "
                   r"(\d+\.\d\d) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th\.$")
WINDOW = re.compile(r"^\d+ records sent, \d+\.\d records/sec \(\d+\.\d\d MB/sec\), \d+\.\d ms avg latency, "
                    r"\d+\.\d ms max latency\.$")
DATE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
CONSUMER = re.compile(rf"^({DATE}), ({DATE}), (\d+\.\d{{4}}), (\d+\.\d{{4}}), (\d+), (\d+\.\d{{4}}), (\d+), (-?\d+), "
                      r"(\d+\.\d{4}), (\d+\.\d{4})$")
CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                   "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("cli-perf") / "data",
                      overrides={"group.initial.rebalance.delay.ms": "0"})
    b.start()
    yield b
    b.stop()
    b.cleanup()


def strom(*args: str, timeout: float = 45) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_producer_then_consumer_perf(broker: BrokerProcess) -> None:
    out = strom("producer-perf-test", "--topic", "perf", "--num-records", "5000", "--record-size", "100",
                "--throughput", "-1", "--producer-props", f"bootstrap.servers={broker.bootstrap}", "acks=1",
                "linger.ms=2")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert all(WINDOW.match(line) for line in lines[:-1]), lines
    m = TOTAL.match(lines[-1])
    assert m is not None, lines[-1]
    assert int(m.group(1)) == 5000
    p50, p95, p99, p999 = (int(m.group(i)) for i in range(6, 10))
    assert p50 <= p95 <= p99 <= p999 <= float(m.group(5))
    assert out.stderr == ""  # no progress bar when stderr is not a terminal

    consumed = strom("consumer-perf-test", "--bootstrap-server", broker.bootstrap, "--topic", "perf",
                     "--messages", "5000", "--group", "perf-readers")
    assert consumed.returncode == 0, consumed.stderr
    header, line = consumed.stdout.splitlines()
    assert header == CONSUMER_HEADER
    m = CONSUMER.match(line)
    assert m is not None, line
    assert int(m.group(5)) == 5000
    assert abs(float(m.group(3)) - 5000 * 100 / 1024 / 1024) < 0.001  # values only: 100 bytes each


def test_throttled_payload_file(broker: BrokerProcess, tmp_path) -> None:  # type: ignore[no-untyped-def]
    payloads = tmp_path / "payloads.txt"
    payloads.write_text("alpha\nbeta\ngamma\n")
    start = time.monotonic()
    out = strom("producer-perf-test", "--bootstrap-server", broker.bootstrap, "--topic", "perf-file",
                "--num-records", "300", "--payload-file", str(payloads), "--throughput", "200")
    elapsed = time.monotonic() - start
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"Reading payloads from: {payloads.resolve()}"
    assert lines[1] == "Number of messages read: 3"
    m = TOTAL.match(lines[-1])
    assert m is not None and int(m.group(1)) == 300
    assert float(m.group(2)) <= 260  # throttled to about 200/s
    assert elapsed >= 1.2
    got = strom("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", "perf-file",
                "--from-beginning", "--max-messages", "300")
    assert set(got.stdout.split()) <= {"alpha", "beta", "gamma"} and len(got.stdout.split()) == 300


def test_consumer_perf_timeout_and_detailed_stats(broker: BrokerProcess) -> None:
    assert strom("producer-perf-test", "--bootstrap-server", broker.bootstrap, "--topic", "perf-short",
                 "--num-records", "100", "--record-size", "10", "--throughput", "-1").returncode == 0
    out = strom("consumer-perf-test", "--bootstrap-server", broker.bootstrap, "--topic", "perf-short",
                "--messages", "1000", "--timeout", "1500", "--hide-header")
    assert out.returncode == 0, out.stderr
    warning, line = out.stdout.splitlines()
    assert warning == ("WARNING: Exiting before consuming the expected number of messages: timeout (1500 ms) "
                       "exceeded. You can use the --timeout option to increase the timeout.")
    m = CONSUMER.match(line)
    assert m is not None and int(m.group(5)) == 100
    detailed = strom("consumer-perf-test", "--bootstrap-server", broker.bootstrap, "--topic", "perf-short",
                     "--messages", "100", "--show-detailed-stats", "--reporting-interval", "1")
    assert detailed.stdout.splitlines()[0].startswith("time, threadId, data.consumed.in.MB")


def test_progress_bar_on_a_terminal(broker: BrokerProcess) -> None:
    master, slave = pty.openpty()
    try:
        proc = subprocess.run([*CLI, "producer-perf-test", "--bootstrap-server", broker.bootstrap, "--topic",
                               "perf-tty", "--num-records", "400", "--record-size", "10", "--throughput", "400"],
                              stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, timeout=45, text=True)
        os.close(slave)
        slave = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        if slave != -1:
            os.close(slave)
        os.close(master)
    assert proc.returncode == 0
    assert b"/400 records" in drawn and b"%" in drawn and b"\r" in drawn
    assert TOTAL.match(proc.stdout.splitlines()[-1])


def test_perf_errors(broker: BrokerProcess) -> None:
    missing = strom("producer-perf-test", "--topic", "t", "--num-records", "1", "--record-size", "1",
                    "--throughput", "-1")
    assert missing.returncode == 2
    assert missing.stderr.startswith("Error: Either --producer-props or --producer.config must be specified")
    bad_prop = strom("producer-perf-test", "--topic", "t", "--num-records", "1", "--record-size", "1",
                     "--throughput", "-1", "--producer-props", f"bootstrap.servers={broker.bootstrap}", "acks=most")
    assert bad_prop.returncode == 2 and bad_prop.stderr.startswith("Error: Invalid producer configuration: ")
    unreachable = strom("consumer-perf-test", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--messages", "1")
    assert unreachable.returncode == 1 and "Cannot connect to the broker at 127.0.0.1:1" in unreachable.stderr


def test_transactional_producer_perf(broker: BrokerProcess) -> None:
    out = strom("producer-perf-test", "--topic", "perf-txn", "--num-records", "2000", "--record-size", "50",
                "--throughput", "-1", "--producer-props", f"bootstrap.servers={broker.bootstrap}",
                "--transactional-id", "perf-tx", "--transaction-duration-ms", "50")
    assert out.returncode == 0, out.stderr
    m = TOTAL.match(out.stdout.splitlines()[-1])
    assert m is not None and int(m.group(1)) == 2000
    import confluent_kafka as ck

    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "perf-txn-wm",
                     "isolation.level": "read_committed"})
    try:
        lso = c.get_watermark_offsets(ck.TopicPartition("perf-txn", 0), timeout=10)[1]
        hw = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "perf-txn-hw"})
        try:
            end = hw.get_watermark_offsets(ck.TopicPartition("perf-txn", 0), timeout=10)[1]
        finally:
            hw.close()
    finally:
        c.close()
    assert lso == end > 2000  # every transaction committed: records plus at least one marker, nothing open
