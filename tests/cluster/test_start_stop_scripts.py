"""The user's start/stop script with strom's names: ZooKeeper and three brokers started with -daemon, a topic
with replication 3, then everything stopped with broker-stop / zookeeper-server-stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from strom.cli.broker_daemon import PID_FILE_NAME
from strom.testing.broker_process import free_port
from strom.testing.cluster import wait_until
from strom.testing.zookeeper import TEST_JVM_ENV

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def _strom(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", *args], capture_output=True, text=True,
                          timeout=150, stdin=subprocess.DEVNULL, cwd=cwd, env={**os.environ, **TEST_JVM_ENV})


def test_daemon_scripts_run_a_three_broker_cluster(tmp_path: Path) -> None:
    zk_port = free_port()
    zk_props = tmp_path / "zookeeper.properties"
    zk_props.write_text(f"dataDir={tmp_path / 'zookeeper'}\nclientPort={zk_port}\nclientPortAddress=127.0.0.1\n"
                        "tickTime=500\nmaxClientCnxns=0\nadmin.enableServer=false\n")
    ports = {i: free_port() for i in range(3)}
    configs = {}
    for i, port in ports.items():
        configs[i] = tmp_path / f"server-{i}.properties"
        configs[i].write_text(f"broker.id={i}\nlisteners=PLAINTEXT://127.0.0.1:{port}\n"
                              f"log.dirs={tmp_path / f'kafka-logs-{i}'}\n"
                              f"zookeeper.connect=127.0.0.1:{zk_port}/kafka\n"
                              "zookeeper.session.timeout.ms=4000\nzookeeper.connection.timeout.ms=10000\n"
                              "offsets.topic.num.partitions=3\n")
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports.values())
    pids: list[int] = []
    try:
        assert _strom("zookeeper-server-start", "-daemon", str(zk_props), cwd=tmp_path).returncode == 0
        pids.append(int((tmp_path / "zookeeper" / "zookeeper_server.pid").read_text()))
        for i, cfg in configs.items():
            started = _strom("broker", "-daemon", str(cfg), cwd=tmp_path)
            assert started.returncode == 0, started.stderr
            pids.append(int((tmp_path / f"kafka-logs-{i}" / PID_FILE_NAME).read_text()))
            assert started.stdout.startswith(f"strom broker {i} ready on 127.0.0.1:{ports[i]}")
        created = _strom("topics", "--bootstrap-server", bootstrap, "--create", "--topic", "sanguo",
                         "--partitions", "1", "--replication-factor", "3", cwd=tmp_path)
        assert created.returncode == 0, created.stderr

        def described() -> str | None:
            out = _strom("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", "sanguo", cwd=tmp_path)
            line = next((x for x in out.stdout.splitlines() if "Partition: 0" in x), "")
            return line if "Isr:" in line and len(line.split("Isr:")[1].strip().split(",")) == 3 else None

        line = wait_until(described, 60, "an ISR of 3 for sanguo-0")
        replicas = line.split("Replicas:")[1].split()[0].split(",")
        leader = line.split("Leader:")[1].split()[0]
        assert sorted(replicas) == ["0", "1", "2"] and leader in replicas

        for i, cfg in configs.items():
            stopped = _strom("broker-stop", str(cfg), cwd=tmp_path)
            assert stopped.returncode == 0, stopped.stderr
            assert not (tmp_path / f"kafka-logs-{i}" / PID_FILE_NAME).exists()
        assert _strom("zookeeper-server-stop", str(zk_props), cwd=tmp_path).returncode == 0
        for pid in pids:
            assert not Path(f"/proc/{pid}").exists() or \
                Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
