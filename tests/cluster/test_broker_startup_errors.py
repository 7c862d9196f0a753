"""``strom broker`` in cluster mode refuses to start, with one clear line and a non-zero exit, when ZooKeeper is
unreachable, its broker.id is taken, or its log dir belongs to another cluster (real ZooKeeper, real processes)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from strom.testing.broker_process import BrokerProcess, free_port
from strom.testing.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]


def start_broker(log_dir: Path, *overrides: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "strom.cli.main", "broker",
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}", "--override", f"log.dirs={log_dir}"]
    for o in overrides:
        cmd += ["--override", o]
    return subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout)


def error_line(out: subprocess.CompletedProcess[str]) -> str:
    """The broker's own error: the last line on stderr (log lines may precede it), starting with 'Error: '."""
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("Error: "), out.stderr[-2000:]
    return lines[-1]


def test_unreachable_zookeeper_is_one_line_after_the_connection_timeout(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    began = time.monotonic()
    out = start_broker(tmp_path / "data", f"zookeeper.connect=127.0.0.1:{port}/kafka",
                       "zookeeper.connection.timeout.ms=1500")
    elapsed = time.monotonic() - began
    assert out.returncode != 0
    line = error_line(out)
    assert f"127.0.0.1:{port}" in line and "1500 ms" in line, line
    assert elapsed >= 1.5  # it waited for zookeeper.connection.timeout.ms before giving up
    assert "ready on" not in out.stdout


def test_taken_broker_id_and_foreign_log_dir_are_refused(zookeeper: ZooKeeperServer, zk_connect: str,
                                                         tmp_path: Path) -> None:
    first = BrokerProcess(data_dir=tmp_path / "b1", overrides={"broker.id": "1", "zookeeper.connect": zk_connect})
    first.start(timeout=60)
    try:
        out = start_broker(tmp_path / "b1-again", "broker.id=1", f"zookeeper.connect={zk_connect}",
                           "zookeeper.session.timeout.ms=2000")
        assert out.returncode != 0
        line = error_line(out)
        assert "Broker id 1 is already registered" in line and "broker.id=1" in line, line
        assert first.proc is not None and first.proc.poll() is None  # the first broker is unharmed

        # A log dir written by another cluster (its meta.properties names another cluster.id)
        foreign = tmp_path / "foreign"
        foreign.mkdir()
        (foreign / "meta.properties").write_text("version=0\nbroker.id=2\ncluster.id=SomeOtherClusterIdAAA\n")
        out = start_broker(foreign, "broker.id=2", f"zookeeper.connect={zk_connect}")
        assert out.returncode != 0
        line = error_line(out)
        assert "SomeOtherClusterIdAAA" in line and "wrong cluster" in line and str(foreign) in line, line
        assert (foreign / "meta.properties").read_text().count("SomeOtherClusterIdAAA") == 1  # left untouched
        assert not [p for p in foreign.iterdir() if p.name != "meta.properties"]  # no data written
    finally:
        first.stop()
        first.cleanup()
