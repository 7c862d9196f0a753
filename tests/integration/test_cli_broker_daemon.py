"""`strom broker -daemon` and `strom broker-stop` (kafka-server-start.sh -daemon / kafka-server-stop.sh)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from strom.cli.broker_daemon import PID_FILE_NAME
from strom.testing.broker_process import free_port
from strom.testing.raw_client import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _strom(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", *args], capture_output=True, text=True,
                          timeout=150, stdin=subprocess.DEVNULL, cwd=cwd, env={**os.environ, **(env or {})})


def _props(tmp_path: Path, port: int, data: str = "data") -> Path:
    path = tmp_path / "server.properties"
    path.write_text(f"broker.id=4\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={tmp_path / data}\n")
    return path


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_daemon_start_serves_and_broker_stop_ends_it(tmp_path: Path) -> None:
    port = free_port()
    props = _props(tmp_path, port)
    started = _strom("broker", "-daemon", str(props), cwd=tmp_path)
    pid_file = tmp_path / "data" / PID_FILE_NAME
    pid = int(pid_file.read_text()) if pid_file.exists() else None
    try:
        assert started.returncode == 0, started.stderr
        assert pid is not None
        assert started.stdout.startswith(f"strom broker 4 ready on 127.0.0.1:{port} (pid {pid})")
        from strom.protocol.messages.metadata import MetadataRequest

        with RawClient(f"127.0.0.1:{port}") as c:  # the caller returned: the broker serves on its own
            md = c.request(3, 9, MetadataRequest(topics=[]))
            assert [b.node_id for b in md.brokers] == [4]
        again = _strom("broker", "-daemon", str(props), cwd=tmp_path)
        assert again.returncode == 1
        assert again.stderr.strip() == (f"Error: A strom broker (pid {pid}) is already running with log dir "
                                        f"{tmp_path / 'data'}")
        stopped = _strom("broker-stop", str(props), cwd=tmp_path)
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.strip() == f"Stopped strom broker (pid {pid})"
        assert _gone(pid) and not pid_file.exists()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        out = (tmp_path / "data" / "stromServer.out").read_text()
        assert "ready on" in out and "stopped" in out  # SIGTERM took the clean shutdown path
        nothing = _strom("broker-stop", str(props), cwd=tmp_path)
        assert (nothing.returncode, nothing.stderr.strip()) == (1, "No kafka server to stop")
    finally:
        if pid is not None and not _gone(pid):
            os.kill(pid, 9)


def test_daemon_that_cannot_start_reports_the_brokers_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _strom("broker", "-daemon", str(_props(tmp_path, port)), cwd=tmp_path,
                        env={"LOG_DIR": str(tmp_path / "logs")})
    assert result.returncode == 1
    line = result.stderr.strip()
    assert line.startswith("Error: Cannot start the broker: ") and "address already in use" in line.lower()
    assert line.endswith(f"(strom broker 4 exited with code 1; see {tmp_path / 'logs' / 'stromServer.out'})")
    assert not (tmp_path / "data" / PID_FILE_NAME).exists()


def test_daemon_bad_config_fails_before_forking(tmp_path: Path) -> None:
    props = _props(tmp_path, free_port())
    result = _strom("broker", "-daemon", str(props), "--override", "log.segmnt.bytes=1", cwd=tmp_path)
    assert (result.returncode, result.stderr.strip()) == (2, "Error: Unknown configuration log.segmnt.bytes")
    assert not (tmp_path / "data").exists()
