"""`strom cluster up` / `strom cluster down`: a local ZooKeeper + 3-broker cluster in one command."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from strom.testing.broker_process import free_port
from strom.testing.cluster import wait_until
from strom.testing.zookeeper import TEST_JVM_ENV

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def _strom(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", *args], capture_output=True, text=True,
                          timeout=200, stdin=subprocess.DEVNULL, cwd=cwd, env={**os.environ, **TEST_JVM_ENV})


def _consecutive_free_ports(n: int) -> int:
    for _ in range(50):
        base = free_port()
        if base + n >= 65536:
            continue
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports found")


def test_cluster_up_serves_replicated_topics_and_down_stops_everything(tmp_path: Path) -> None:
    port, zk_port = _consecutive_free_ports(3), free_port()
    args = ("--dir", str(tmp_path / "c"), "--port", str(port), "--zookeeper-port", str(zk_port))
    bootstrap = f"127.0.0.1:{port},127.0.0.1:{port + 1},127.0.0.1:{port + 2}"
    up = _strom("cluster", "up", *args, cwd=tmp_path)
    try:
        assert up.returncode == 0, up.stderr
        assert up.stdout.splitlines()[:2] == [f"ZooKeeper: 127.0.0.1:{zk_port}/kafka",
                                              f"Brokers 0,1,2: --bootstrap-server {bootstrap}"]
        again = _strom("cluster", "up", *args, cwd=tmp_path)
        assert again.returncode == 1 and again.stderr.startswith("Error: A cluster is already running in")
        created = _strom("topics", "--bootstrap-server", bootstrap, "--create", "--topic", "sanguo",
                         "--partitions", "1", "--replication-factor", "3", cwd=tmp_path)
        assert created.returncode == 0, created.stderr

        def isr_of_three() -> bool:
            out = _strom("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", "sanguo", cwd=tmp_path)
            line = next((x for x in out.stdout.splitlines() if "Partition: 0" in x), "")
            return "Isr:" in line and sorted(line.split("Isr:")[1].split()[0].split(",")) == ["0", "1", "2"]

        wait_until(isr_of_three, 60, "an ISR of 3")
    finally:
        down = _strom("cluster", "down", "--dir", str(tmp_path / "c"), cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert down.stdout.splitlines() == ["Stopped broker 0", "Stopped broker 1", "Stopped broker 2", "Stopped ZooKeeper"]
    for p in (port, port + 1, port + 2, zk_port):
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", p), timeout=2).close()
    nothing = _strom("cluster", "down", "--dir", str(tmp_path / "c"), cwd=tmp_path)
    assert (nothing.returncode, nothing.stderr.strip()) == (1, f"Error: No cluster running in {tmp_path / 'c'}")


def test_cluster_up_refuses_taken_ports_and_bad_sizes(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _strom("cluster", "up", "--dir", str(tmp_path / "c"), "--port", str(port),
                        "--zookeeper-port", str(free_port()), "--brokers", "1", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip() == (f"Error: Port(s) {port} already in use on 127.0.0.1 "
                                     "(choose others with --port / --zookeeper-port)")
    assert not (tmp_path / "c").exists()  # nothing was written or started
    bad = _strom("cluster", "up", "--dir", str(tmp_path / "c"), "--brokers", "0", cwd=tmp_path)
    assert (bad.returncode, bad.stderr.strip()) == (2, "Error: --brokers must be between 1 and 32, got 0")
