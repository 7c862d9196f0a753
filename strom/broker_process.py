"""Run a real strom broker as a subprocess on loopback (the demo, the README check, tests and benchmarks)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = ["BrokerProcess", "free_port"]


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


_RESERVED_FOR_S = 600.0


def claim_path(port: int) -> Path:
    return Path(tempfile.gettempdir()) / f"strom-ports-{os.getuid()}" / str(port)


def _reserve(port: int) -> bool:
    """Claim ``port`` for this caller among every process of this user that calls :func:`free_port` (e.g. the
    parallel test workers): a port picked but not yet bound is invisible to a bind probe, so two workers could
    otherwise pick the same one and the second server fails with EADDRINUSE. A claim lapses after 10 minutes."""
    claim = claim_path(port)
    claim.parent.mkdir(exist_ok=True)
    for _ in range(2):
        try:
            os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            return True
        except FileExistsError:
            try:
                if time.time() - claim.stat().st_mtime < _RESERVED_FOR_S:
                    return False
                claim.unlink()  # lapsed: take it over (one O_EXCL create wins)
            except FileNotFoundError:
                pass
    return False


def free_port() -> int:
    """A loopback port free now, for a server started a moment later, and claimed so that no other caller of this
    function (in any process of this user) gets it in the next 10 minutes. Picked below the kernel's ephemeral
    range: a port from that range (what binding port 0 gives) can meanwhile become the local end of some outgoing
    connection, and the server's bind then fails with EADDRINUSE (seen on a busy machine)."""
    low, _high = _ephemeral_range()
    rng = random.SystemRandom()
    for _ in range(100):
        port = rng.randrange(10_000, low) if low > 11_000 else rng.randrange(low, 65_536)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        if _reserve(port):
            return port
    with socket.socket() as s:  # crowded: let the kernel choose
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    """``strom broker`` in a child process. Use as a context manager or call start()/stop()."""

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, port: int | None = None,
                 overrides: Mapping[str, str] | None = None, log_file: str | os.PathLike[str] | None = None) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="strom-broker-")
            data_dir = self._tmp.name
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.overrides = dict(overrides or {})
        self.log_file = Path(log_file) if log_file else self.data_dir.parent / f"{self.data_dir.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._ready = threading.Event()
        self._log_lines: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "strom.cli.main", "broker",
               "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
               "--override", f"log.dirs={self.data_dir}"]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        """Start the broker and wait (up to ``timeout`` seconds) until it serves."""
        return self.launch().wait_ready(timeout)

    def launch(self) -> BrokerProcess:
        """Start the broker process without waiting for it (:meth:`wait_ready` waits): several brokers then
        start side by side."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        out = open(self.log_file, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=out, stdin=subprocess.DEVNULL)
        out.close()
        assert self.proc.stdout is not None
        ready = self._ready = threading.Event()
        stdout = self.proc.stdout

        def pump() -> None:
            for raw in stdout:
                line = raw.decode(errors="replace").rstrip()
                self._log_lines.append(line)
                if "ready on" in line:
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        return self

    def wait_ready(self, timeout: float = 30.0) -> BrokerProcess:
        """Wait until the launched broker serves; raises RuntimeError (with its log's tail) if it exits first or
        is not ready within ``timeout`` seconds (then it is killed)."""
        assert self.proc is not None, "launch() first"
        ready = self._ready
        deadline = time.monotonic() + timeout
        while not ready.is_set():
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}: {self.read_log()[-2000:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"broker did not start within {timeout}s: {self.read_log()[-2000:]}")
            ready.wait(0.05)
        return self

    def read_log(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait: the broker's clean shutdown path. Returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL: a crash, no clean shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def cleanup(self) -> None:
        self.kill()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.cleanup()
