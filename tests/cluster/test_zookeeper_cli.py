"""`strom zookeeper-server-start` / `zookeeper-server-stop` as a user runs them, against real ZooKeeper."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from strom.testing.broker_process import free_port
from strom.testing.zookeeper import TEST_JVM_ENV

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]


def _strom(*args: str, cwd: Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, cwd=cwd, env={**os.environ, **TEST_JVM_ENV})


def _config(tmp_path: Path, port: int, **extra: str) -> Path:
    props = {"dataDir": str(tmp_path / "zk-data"), "clientPort": str(port), "clientPortAddress": "127.0.0.1",
             "tickTime": "500", "maxClientCnxns": "0", "admin.enableServer": "false", **extra}
    path = tmp_path / "zookeeper.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def _znode_round_trip(port: int) -> bytes:
    client = KazooClient(hosts=f"127.0.0.1:{port}", timeout=4.0)
    client.start(timeout=20)
    try:
        client.ensure_path("/strom-cli-test")
        client.set("/strom-cli-test", b"hello")
        data, _ = client.get("/strom-cli-test")
        return bytes(data)
    finally:
        client.stop()
        client.close()


def test_daemon_start_serves_clients_and_stop_ends_it(tmp_path: Path) -> None:
    port = free_port()
    cfg = _config(tmp_path, port)
    started = _strom("zookeeper-server-start", "-daemon", str(cfg), cwd=tmp_path)
    pid = _pid_on_port(port)  # found independently of the pid file, so cleanup works even if that is broken
    try:
        assert started.returncode == 0, started.stderr
        assert f"127.0.0.1:{port}" in started.stdout
        assert int((tmp_path / "zk-data" / "zookeeper_server.pid").read_text()) == pid
        assert _znode_round_trip(port) == b"hello"
        assert "binding to port" in (tmp_path / "logs" / "zookeeper.out").read_text()  # Kafka's $LOG_DIR layout
        again = _strom("zookeeper-server-start", "-daemon", str(cfg), cwd=tmp_path)
        assert again.returncode == 1
        assert again.stderr.strip() == f"Error: Cannot start ZooKeeper: port {port} is already in use (clientPort in the config)"
        stopped = _strom("zookeeper-server-stop", str(cfg), cwd=tmp_path)
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.strip() == f"Stopped ZooKeeper (pid {pid})"
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        nothing = _strom("zookeeper-server-stop", str(cfg), cwd=tmp_path)
        assert nothing.returncode == 1
        assert nothing.stderr.strip() == "No zookeeper server to stop"
    finally:
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _pid_on_port(port: int) -> int | None:
    """The pid of the strom-started ZooKeeper whose command line serves ``port``'s config (via /proc)."""
    from strom.cli.zookeeper_server import find_server_pids, load_zookeeper_config

    for pid in find_server_pids():
        cfg = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[-2].decode()
        try:
            if load_zookeeper_config(cfg).client_port == port:
                return pid
        except Exception:
            continue
    return None


def test_foreground_start_is_the_java_process_and_sigterm_stops_it(tmp_path: Path) -> None:
    port = free_port()
    cfg = _config(tmp_path, port)
    proc = subprocess.Popen([sys.executable, "-m", "strom.cli.main", "zookeeper-server-start", str(cfg)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, **TEST_JVM_ENV})
    try:
        assert _znode_round_trip(port) == b"hello"
        # exec: the pid the caller holds is ZooKeeper's JVM, and the pid file names it too.
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert b"org.apache.zookeeper.server.quorum.QuorumPeerMain" in cmdline
        assert int((tmp_path / "zk-data" / "zookeeper_server.pid").read_text()) == proc.pid
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        assert proc.stderr is not None
        proc.stderr.close()


def test_data_survives_a_restart_on_the_same_data_dir(tmp_path: Path) -> None:
    port = free_port()
    cfg = _config(tmp_path, port)
    try:
        assert _strom("zookeeper-server-start", "-daemon", str(cfg), cwd=tmp_path).returncode == 0
        assert _znode_round_trip(port) == b"hello"
        assert _strom("zookeeper-server-stop", str(cfg), cwd=tmp_path).returncode == 0
        assert _strom("zookeeper-server-start", "-daemon", str(cfg), cwd=tmp_path).returncode == 0
        client = KazooClient(hosts=f"127.0.0.1:{port}", timeout=4.0)
        client.start(timeout=20)
        try:
            assert client.get("/strom-cli-test")[0] == b"hello"
        finally:
            client.stop()
            client.close()
    finally:
        _strom("zookeeper-server-stop", str(cfg), cwd=tmp_path)


@pytest.mark.parametrize("content, message", [
    (None, "Error: ZooKeeper config file {cfg} does not exist"),
    ("dataDir=/tmp/x\nclientport=2181\n", "Error: Unknown ZooKeeper config key 'clientport' in {cfg} (did you mean 'clientPort'?)"),
    ("dataDir=/tmp/x\nclientPort=zk\n", "Error: Invalid value 'zk' for ZooKeeper config 'clientPort': expected an integer"),
    ("dataDir=/tmp/x\nclientPort=70000\n", "Error: Invalid value 70000 for ZooKeeper config 'clientPort': must be in [1, 65535]"),
    ("dataDir=/tmp/x\nclientPort=2181\ntickTime=0\n", "Error: Invalid value 0 for ZooKeeper config 'tickTime': must be in [1, 2147483647]"),
    ("dataDir=/tmp/x\nclientPort=2181\nadmin.enableServer=maybe\n", "Error: Invalid value 'maybe' for ZooKeeper config 'admin.enableServer': expected true or false"),
    ("clientPort=2181\n", "Error: Missing required ZooKeeper config 'dataDir' in {cfg}"),
    ("dataDir=/tmp/x\n", "Error: Missing required ZooKeeper config 'clientPort' in {cfg}"),
])
def test_bad_config_is_one_line_and_exit_1(tmp_path: Path, content: str | None, message: str) -> None:
    cfg = tmp_path / "zookeeper.properties"
    if content is not None:
        cfg.write_text(content)
    for args in (("zookeeper-server-start", str(cfg)), ("zookeeper-server-start", "-daemon", str(cfg))):
        result = _strom(*args, cwd=tmp_path, timeout=30)
        assert result.returncode == 1
        assert result.stderr.strip() == message.format(cfg=cfg)
        assert not (tmp_path / "logs").exists()  # nothing was started


def test_port_in_use_is_refused_before_java_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _strom("zookeeper-server-start", str(_config(tmp_path, port)), cwd=tmp_path, timeout=30)
    assert result.returncode == 1
    assert result.stderr.strip() == f"Error: Cannot start ZooKeeper: port {port} is already in use (clientPort in the config)"


def test_missing_java_and_missing_zookeeper_are_named(tmp_path: Path) -> None:
    cfg = _config(tmp_path, free_port())
    no_java = subprocess.run([sys.executable, "-m", "strom.cli.main", "zookeeper-server-start", str(cfg)],
                             capture_output=True, text=True, timeout=30, cwd=tmp_path,
                             env={**os.environ, "PATH": str(tmp_path / "empty"), "JAVA_HOME": ""})
    assert no_java.returncode == 1
    assert no_java.stderr.startswith("Error: java is not installed")
    no_zk = subprocess.run([sys.executable, "-m", "strom.cli.main", "zookeeper-server-start", str(cfg)],
                           capture_output=True, text=True, timeout=30, cwd=tmp_path,
                           env={**os.environ, "ZOOKEEPER_HOME": str(tmp_path / "no-zookeeper-here")})
    assert no_zk.returncode == 1
    assert no_zk.stderr.startswith("Error: ZooKeeper is not installed")


def test_shipped_sample_configs_are_valid() -> None:
    from strom.cli.zookeeper_server import load_zookeeper_config
    from strom.server.broker_config import BrokerConfig, load_properties_file

    root = Path(__file__).resolve().parents[2]
    zk = load_zookeeper_config(root / "config" / "zookeeper.properties")
    assert (zk.client_port, str(zk.data_dir)) == (2181, "/tmp/zookeeper")
    assert zk.properties["admin.enableServer"] == "false"
    props = load_properties_file(root / "config" / "server.properties")
    assert props["broker.id"] == "0"
    BrokerConfig(props)


def test_three_node_ensemble_started_one_member_at_a_time(tmp_path: Path) -> None:
    """The documents' zookeeper.connect=host1:2181,host2:2181,host3:2181: a replicated ensemble, each member
    started by its own -daemon call (the first cannot serve until a quorum runs, and must not wait for it)."""
    client_ports = [free_port() for _ in range(3)]
    peers = "".join(f"server.{i + 1}=127.0.0.1:{free_port()}:{free_port()}\n" for i in range(3))
    configs = []
    for i, port in enumerate(client_ports):
        member = tmp_path / f"zk{i + 1}"
        (member / "data").mkdir(parents=True)
        (member / "data" / "myid").write_text(f"{i + 1}\n")
        cfg = member / "zookeeper.properties"
        cfg.write_text(f"dataDir={member / 'data'}\nclientPort={port}\nclientPortAddress=127.0.0.1\ntickTime=500\n"
                       f"initLimit=10\nsyncLimit=5\nadmin.enableServer=false\n{peers}")
        configs.append(cfg)
    try:
        for cfg in configs:
            started = _strom("zookeeper-server-start", "-daemon", str(cfg), cwd=cfg.parent)
            assert started.returncode == 0, started.stderr
        hosts = ",".join(f"127.0.0.1:{p}" for p in client_ports)
        client = KazooClient(hosts=hosts, timeout=6.0)
        client.start(timeout=60)
        try:
            client.create("/written-to-the-quorum", b"x")
        finally:
            client.stop()
            client.close()
        # one member down: the other two are still a quorum and keep the data
        assert _strom("zookeeper-server-stop", str(configs[0]), cwd=tmp_path).returncode == 0
        client = KazooClient(hosts=hosts, timeout=6.0)
        client.start(timeout=60)
        try:
            assert client.get("/written-to-the-quorum")[0] == b"x"
        finally:
            client.stop()
            client.close()
    finally:
        for cfg in configs:
            _strom("zookeeper-server-stop", str(cfg), cwd=tmp_path)


def test_ensemble_member_without_myid_names_the_problem(tmp_path: Path) -> None:
    cfg = _config(tmp_path, free_port(), initLimit="10", syncLimit="5",
                  **{"server.1": f"127.0.0.1:{free_port()}:{free_port()}",
                     "server.2": f"127.0.0.1:{free_port()}:{free_port()}"})
    result = _strom("zookeeper-server-start", "-daemon", str(cfg), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith("Error: ZooKeeper exited with code 2: ") and "myid file is missing" in result.stderr


def test_test_server_moves_off_a_port_taken_before_it_started() -> None:
    from strom.testing.zookeeper import ZooKeeperServer

    server = ZooKeeperServer()
    first = server.port
    with socket.socket() as thief:  # another process grabs the port between the pick and the start
        thief.bind(("127.0.0.1", first))
        thief.listen()
        try:
            server.start()
            assert server.port != first
            assert _znode_round_trip(server.port) == b"hello"
            server.restart()  # a restart keeps the port clients know
            assert _znode_round_trip(server.port) == b"hello"
        finally:
            server.stop()
            server.cleanup()


def test_zookeeper_shell_shows_kafkas_znodes(zookeeper, zk_connect: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from strom.server.zk import BrokerRegistration, EndPoint, KafkaZkClient

    clients = [KafkaZkClient.connect(zk_connect, session_timeout_ms=6000) for _ in range(3)]
    try:
        for i, c in enumerate(clients):
            c.register_broker(BrokerRegistration(i, (EndPoint("127.0.0.1", 9092 + i),)))
        assert clients[1].register_controller(1) == 1
        ls = _strom("zookeeper-shell", zk_connect, "ls", "/brokers/ids", cwd=tmp_path)
        assert ls.returncode == 0, ls.stderr
        assert ls.stdout.strip().splitlines()[-1] == "[0, 1, 2]"
        get = _strom("zookeeper-shell", zk_connect, "get", "/controller", cwd=tmp_path)
        assert get.returncode == 0 and '"brokerid":1' in get.stdout.strip().splitlines()[-1]
        missing = _strom("zookeeper-shell", zk_connect, "get", "/nope", cwd=tmp_path)
        assert missing.returncode == 1 and missing.stderr.strip() == "Node does not exist: /nope"
        piped = subprocess.run([sys.executable, "-m", "strom.cli.main", "zookeeper-shell", zk_connect],
                               input="get /controller_epoch\n", capture_output=True, text=True, timeout=60,
                               env={**os.environ, **TEST_JVM_ENV})
        assert piped.returncode == 0 and piped.stdout.strip().splitlines()[-1] == "1"
    finally:
        for c in clients:
            c.close()
    bad = _strom("zookeeper-shell", "no-port-here", "ls", "/", cwd=tmp_path)
    assert (bad.returncode, bad.stderr.strip()) == (2, "Error: Invalid ZooKeeper address 'no-port-here': "
                                                       "expected host:port[/path]")
