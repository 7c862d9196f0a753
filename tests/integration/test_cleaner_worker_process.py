"""The broker's log cleaner does its record work in a worker process: a compacted topic gets cleaned (the worker
runs as a child of the broker), a clean shutdown stops the worker, and a broker killed with SIGKILL leaves none
behind (the worker exits when the broker's end of its socket closes)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psutil
import pytest

from strom.admin import AdminClient, NewTopic
from strom.broker_process import BrokerProcess
from strom.producer import KafkaProducer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

OVERRIDES = {"log.cleaner.backoff.ms": "100"}
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "16384", "min.cleanable.dirty.ratio": "0.01"}


def _wait_for(what: str, condition, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _cleaned_broker(tmp_path: Path) -> tuple[BrokerProcess, list[psutil.Process]]:
    b = BrokerProcess(data_dir=tmp_path / "data", overrides=OVERRIDES).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    try:
        admin.create_topics([NewTopic("changelog", 1, 1, configs=TOPIC_CONFIG)]).all().result(30)
    finally:
        admin.close()
    p = KafkaProducer({"bootstrap.servers": b.bootstrap, "key.serializer": "bytes", "value.serializer": "bytes",
                       "linger.ms": 5})
    try:
        for i in range(3000):
            p.send("changelog", b"v" * 50, key=b"key-%d" % (i % 20))
        p.flush(30)
    finally:
        p.close()
    _wait_for("a cleaning of changelog-0", lambda: "cleaned changelog-0" in b.read_log())
    assert b.proc is not None
    workers = [c for c in psutil.Process(b.proc.pid).children() if "cleaner_records" in " ".join(c.cmdline())]
    return b, workers


def test_cleaning_runs_in_a_worker_that_a_clean_shutdown_stops(tmp_path: Path) -> None:
    b, workers = _cleaned_broker(tmp_path)
    try:
        assert len(workers) == 1 and workers[0].is_running()
        # The first cleaning may have run while the records were still arriving (it cleans the segments rolled by
        # then); later cleanings take the rest: 20 keys are left of 3,000 records, and the active segment.
        log_dir = b.data_dir / "changelog-0"
        _wait_for("changelog-0 to be compacted below 150,000 bytes",
                  lambda: sum(f.stat().st_size for f in log_dir.glob("*.log")) < 3000 * 50)
        assert workers[0].is_running()
    finally:
        assert b.stop(timeout=60) == 0
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive


def test_a_broker_killed_with_sigkill_leaves_no_worker_behind(tmp_path: Path) -> None:
    b, workers = _cleaned_broker(tmp_path)
    assert len(workers) == 1
    assert b.proc is not None
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait(30)
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, f"worker(s) still running after the broker was killed: {alive}"
    b.cleanup()
