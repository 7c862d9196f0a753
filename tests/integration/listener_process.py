"""Start ``socket_server_app.py`` (strom's socket servers with a stub dispatcher) as a child process."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

_APP = Path(__file__).with_name("socket_server_app.py")


class ListenerProcess:
    def __init__(self, overrides: Mapping[str, str], nofile: int = 0, data_dir: str | None = None) -> None:
        self.overrides = {"listeners": "PLAINTEXT://127.0.0.1:0", **overrides}
        self.nofile = nofile
        self._tmp = tempfile.TemporaryDirectory(prefix="strom-listeners-")
        self.data_dir = data_dir or self._tmp.name
        self.log_file = Path(self._tmp.name) / "server.log"
        self.ports: dict[str, int] = {}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> ListenerProcess:
        cmd = [sys.executable, str(_APP), "--data-dir", self.data_dir]
        if self.nofile:
            cmd += ["--nofile", str(self.nofile)]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        with open(self.log_file, "ab") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                         cwd=Path(__file__).parents[2])
        ready = threading.Event()
        stdout = self.proc.stdout
        assert stdout is not None

        def pump() -> None:
            for raw in stdout:
                line = raw.decode(errors="replace").strip()
                if line.startswith("ready on "):
                    self.ports = {n: int(p) for n, p in (kv.split("=") for kv in line[9:].split(","))}
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.read_log()[-2000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"server did not start: {self.read_log()[-2000:]}")
        return self

    def port(self, listener: str = "PLAINTEXT") -> int:
        return self.ports[listener]

    def bootstrap(self, listener: str = "PLAINTEXT") -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def read_log(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._tmp.cleanup()
