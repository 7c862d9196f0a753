"""``strom broker -daemon`` and ``strom broker-stop`` (Kafka's ``kafka-server-start.sh -daemon`` and
``kafka-server-stop.sh``), so a start/stop script written for Kafka works with strom's names.

``-daemon`` starts ``strom broker`` with the same file and overrides as a detached process (own session, stdin
closed), writes its pid to ``<first log dir>/strom-broker.pid`` and its output to ``stromServer.out`` (in
``$LOG_DIR`` when set, as Kafka's scripts do, else beside the pid file, so several local brokers never share
one file), and returns once the broker is serving, or with the broker's own error line when it could not start.

``broker-stop`` sends SIGTERM (the broker's clean shutdown: controlled shutdown in cluster mode, logs flushed)
and waits for the process to exit. With a ``server.properties`` (and overrides) it stops the broker of that log
dir; with none, every broker this user started with ``-daemon`` (Kafka's script stops every broker on the
machine; strom leaves foreground brokers and other users' alone).

Functions, no shared state; thread-safe.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from strom.cli.errors import CliError
from strom.cli.processes import alive, cmdline, terminate_and_wait

__all__ = ["PID_FILE_NAME", "OUT_FILE_NAME", "DAEMON_MARKER", "start_daemon", "find_broker_pids", "pid_file_for",
           "stop_brokers"]

PID_FILE_NAME = "strom-broker.pid"
OUT_FILE_NAME = "stromServer.out"
DAEMON_MARKER = "--daemonized"  # on the child's command line: how broker-stop recognises daemon brokers
START_TIMEOUT_S = 120.0


def pid_file_for(props: dict[str, str]) -> tuple[Path, str]:
    """The pid file of the broker these properties describe, and its ``broker.id`` (checks the config)."""
    from strom.server.broker_config import BrokerConfig

    config = BrokerConfig(props)
    return Path(config.log_dirs[0]) / PID_FILE_NAME, str(config.node_id)


def _child_command(args: argparse.Namespace) -> list[str]:
    cmd = [sys.executable, "-m", "strom.cli.main", "broker", DAEMON_MARKER]
    path = args.config_opt or args.config_file
    if path:
        cmd.append(str(Path(path).resolve()))
    for item in args.override:
        cmd += ["--override", item]
    if getattr(args, "verbose", False):
        cmd.append("--verbose")
    return cmd


def _is_daemon_broker(pid: int) -> bool:
    args = cmdline(pid)
    return "strom.cli.main" in args and "broker" in args and DAEMON_MARKER in args and alive(pid)


def _read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def start_daemon(args: argparse.Namespace, props: dict[str, str]) -> int:
    """Start the broker detached and wait until it serves; print one line and return 0, or raise
    :class:`CliError` with the broker's own error."""
    pid_file, broker_id = pid_file_for(props)
    running = _read_pid(pid_file)
    if running is not None and _is_daemon_broker(running):
        raise CliError(f"A strom broker (pid {running}) is already running with log dir {pid_file.parent}")
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    log_dir = Path(os.environ["LOG_DIR"]) if os.environ.get("LOG_DIR") else pid_file.parent
    log_dir.mkdir(parents=True, exist_ok=True)
    out_path = log_dir / OUT_FILE_NAME
    offset = out_path.stat().st_size if out_path.exists() else 0
    with open(out_path, "ab") as out:
        proc = subprocess.Popen(_child_command(args), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    tmp = pid_file.with_suffix(".tmp")
    tmp.write_text(f"{proc.pid}\n")
    os.replace(tmp, pid_file)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        lines = _new_lines(out_path, offset)
        ready = next((line for line in lines if " ready on " in line), None)
        if ready is not None:
            print(f"{ready.strip()} (pid {proc.pid}); log: {out_path}")
            return 0
        if proc.poll() is not None:
            pid_file.unlink(missing_ok=True)
            errors = [line.strip().removeprefix("Error: ") for line in lines if line.startswith("Error")]
            detail = errors[-1] if errors else (lines[-1].strip() if lines else "no output")
            raise CliError(f"{detail} (strom broker {broker_id} exited with code {proc.returncode}; see {out_path})")
        if time.monotonic() > deadline:
            raise CliError(f"strom broker {broker_id} (pid {proc.pid}) did not report ready within "
                           f"{START_TIMEOUT_S:.0f} s (see {out_path})")
        time.sleep(0.05)


def _new_lines(path: Path, offset: int) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def find_broker_pids(pid_file: Path | None) -> list[int]:
    """The daemon broker of ``pid_file``, or every daemon broker of this user."""
    if pid_file is not None:
        pid = _read_pid(pid_file)
        return [pid] if pid is not None and _is_daemon_broker(pid) else []
    uid = os.getuid()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
        except OSError:
            continue
        if _is_daemon_broker(int(entry.name)):
            pids.append(int(entry.name))
    return sorted(pids)


def stop_brokers(pids: list[int], timeout_s: float) -> list[int]:
    """SIGTERM each broker and wait for it to exit; the pids still alive at the deadline."""
    return terminate_and_wait(pids, timeout_s)
