"""``strom cluster up`` / ``strom cluster down``: a local ZooKeeper + 3 brokers in one command, as a user runs it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]


def strom(*args: str, timeout: float = 200) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_up_writes_readable_configs_serves_a_replicated_topic_and_down_stops_everything(tmp_path: Path) -> None:
    base = tmp_path / "cluster"
    up = strom("cluster", "up", "--brokers", "3", "--dir", str(base), "--zookeeper-port", "0", "--broker-port", "0")
    pids = [int(p) for p in re.findall(r"\(pid (\d+)\)", up.stdout)]
    try:
        assert up.returncode == 0, up.stderr
        assert len(pids) == 4  # ZooKeeper + 3 brokers
        assert sorted(p.name for p in base.glob("*.properties")) == [
            "server-0.properties", "server-1.properties", "server-2.properties", "zookeeper.properties"]
        server1 = (base / "server-1.properties").read_text()
        assert "broker.id=1\n" in server1 and "/kafka\n" in server1 and f"log.dirs={base / 'broker-1'}" in server1
        (bootstrap,) = re.findall(r"^bootstrap.servers=(\S+)$", up.stdout, re.M)
        assert len(bootstrap.split(",")) == 3
        created = strom("topics", "--bootstrap-server", bootstrap, "--create", "--topic", "sanguo", "--partitions",
                        "1", "--replication-factor", "3")
        assert created.returncode == 0, created.stderr
        described = strom("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", "sanguo").stdout
        assert re.search(r"\tPartition: 0\tLeader: [012]\tReplicas: [012],[012],[012]\tIsr: ", described), described

        # the ports are taken now: a second cluster on them is refused before anything starts
        zk_port = re.search(r"clientPort=(\d+)", (base / "zookeeper.properties").read_text()).group(1)  # type: ignore[union-attr]
        clash = strom("cluster", "up", "--dir", str(tmp_path / "other"), "--zookeeper-port", zk_port)
        assert clash.returncode == 1
        assert clash.stderr.strip() == (f"Error: Port {zk_port} for ZooKeeper is already in use on 127.0.0.1 "
                                        "(choose another with --zookeeper-port, or 0 for a free one)")
    finally:
        down = strom("cluster", "down", "--dir", str(base))
    assert down.returncode == 0, down.stderr
    assert down.stdout.count("Stopped strom broker") == 3 and "Stopped ZooKeeper" in down.stdout
    assert not [p for p in pids if alive(p)]
    again = strom("cluster", "down", "--dir", str(base))
    assert (again.returncode, again.stderr.strip()) == (
        1, f"Error: Nothing to stop: the cluster of {base} is not running")
    nothing = strom("cluster", "down", "--dir", str(tmp_path / "empty"))
    assert nothing.returncode == 1 and "No strom cluster in" in nothing.stderr


def test_up_refuses_bad_counts_and_ports(tmp_path: Path) -> None:
    out = strom("cluster", "up", "--brokers", "0", "--dir", str(tmp_path / "c"))
    assert (out.returncode, out.stderr.strip()) == (2, "Error: --brokers must be at least 1")
    out = strom("cluster", "up", "--broker-port", "70000", "--dir", str(tmp_path / "c"))
    assert out.returncode == 2 and "Invalid --broker-port 70000" in out.stderr
    assert not (tmp_path / "c").exists() or not list((tmp_path / "c").iterdir())
