"""A real ZooKeeper server for tests: ``strom zookeeper-server-start`` in a child process on loopback.

``tickTime`` defaults to 500 ms, so ZooKeeper accepts session timeouts from 1 s (2 ticks) to 10 s (20 ticks) and
a killed client's ephemeral znodes vanish about a second after its death. The JVM runs with a small heap and a
quick-start JIT so a dozen servers fit the test machine.

    with ZooKeeperServer() as zk:
        client = KafkaZkClient.connect(zk.connect_string + "/kafka")

``stop()`` is SIGTERM, ``kill()`` is SIGKILL (a crash), ``pause()`` / ``resume()`` SIGSTOP / SIGCONT, ``restart()`` comes back on the same port with the same
``dataDir`` (the znodes survive). The server is killed if the process that started it dies (start it from a
thread that lives as long as the server, e.g. the test's main thread). Never imported by production code.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError

from strom.testing.broker_process import free_port

__all__ = ["ZooKeeperServer", "expire_session"]

# Small heap, serial GC, C1 only: ZooKeeper starts in well under a second and takes little memory.
TEST_JVM_ENV = {
    "KAFKA_HEAP_OPTS": "-Xmx192M -Xms32M",
    "KAFKA_JVM_PERFORMANCE_OPTS": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:CICompilerCount=1",
}


class _PortTaken(Exception):
    pass


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the process (thread) that started it dies, so a test run that
    is killed never leaves a JVM behind on the shared machine (the setting survives the exec into java)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class ZooKeeperServer:
    """One standalone ZooKeeper process (``strom zookeeper-server-start <file>``), foreground mode."""

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, port: int | None = None,
                 tick_time_ms: int = 500, extra_config: Mapping[str, str] | None = None) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="strom-zk-")
        self.base_dir = Path(self._tmp.name)
        self.data_dir = Path(data_dir) if data_dir is not None else self.base_dir / "data"
        self.port = port or free_port()
        # A port picked here may be taken by another process before ZooKeeper binds it (the machine is shared):
        # the first start then moves to another free port. A port given by the caller is kept.
        self._may_move_port = port is None
        self.tick_time_ms = tick_time_ms
        self.config_file = self.base_dir / "zookeeper.properties"
        self.log_file = self.base_dir / "zookeeper.log"
        self._extra = dict(extra_config or {})
        self._write_config()
        self.proc: subprocess.Popen[bytes] | None = None

    def _write_config(self) -> None:
        props = {"dataDir": str(self.data_dir), "clientPort": str(self.port), "clientPortAddress": "127.0.0.1",
                 "tickTime": str(self.tick_time_ms), "maxClientCnxns": "0", "admin.enableServer": "false",
                 **self._extra}
        self.config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "strom.cli.main", "zookeeper-server-start", str(self.config_file)]

    def start(self, timeout_s: float = 60.0) -> ZooKeeperServer:
        """Start and wait until a ZooKeeper client session can be opened (or raise with the log's tail)."""
        for _ in range(5):
            try:
                return self._start_once(timeout_s)
            except _PortTaken:
                self.port = free_port()
                self._write_config()
        return self._start_once(timeout_s)

    def _start_once(self, timeout_s: float) -> ZooKeeperServer:
        env = {**os.environ, **TEST_JVM_ENV}
        log_offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        with open(self.log_file, "ab") as out:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                if self._may_move_port and "already in use" in self.read_log()[log_offset:]:
                    raise _PortTaken()
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}: {self.read_log()[-3000:]}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise RuntimeError(f"ZooKeeper did not accept a session within {timeout_s} s: "
                                   f"{self.read_log()[-3000:]}")
            if self._session_opens(min(2.0, remaining)):
                self._may_move_port = False  # clients know this port now: restarts keep it
                return self

    def _session_opens(self, timeout_s: float) -> bool:
        client = KazooClient(hosts=self.connect_string, timeout=4.0)
        try:
            client.start(timeout=timeout_s)
            return True
        except KazooTimeoutError:
            return False
        finally:
            client.stop()
            client.close()

    def read_log(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM and wait; the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGCONT)  # a paused JVM would not act on SIGTERM
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL: ZooKeeper dies without a word; clients see a connection loss."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP: ZooKeeper hangs (no answers, connections stay open), as on a long GC pause or a frozen VM."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def restart(self, timeout_s: float = 60.0) -> ZooKeeperServer:
        """Stop (if running) and start again on the same port and dataDir."""
        self.stop()
        return self.start(timeout_s)

    def cleanup(self) -> None:
        self.kill()
        self._tmp.cleanup()

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.cleanup()


def expire_session(client: KazooClient, timeout_s: float = 30.0) -> None:
    """Make ZooKeeper really expire ``client``'s session now: a second client joins the same session (id and
    password) and closes it, so the server ends the session and deletes its ephemeral znodes; ``client`` then
    sees LOST and opens a new session. Returns once ``client`` has seen LOST."""
    lost = threading.Event()

    def listener(state: str) -> None:
        if state == KazooState.LOST:
            lost.set()

    client.add_listener(listener)
    try:
        session_id, password = client.client_id
        hosts = ",".join(f"{h}:{p}" for h, p in client.hosts)
        intruder = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=client._session_timeout / 1000)
        intruder.start(timeout=timeout_s)
        intruder.stop()
        intruder.close()
        if not lost.wait(timeout_s):
            raise TimeoutError(f"session 0x{session_id:x} was not reported lost within {timeout_s} s")
    finally:
        client.remove_listener(listener)
