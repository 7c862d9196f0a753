"""Processes the CLI starts as daemons (brokers, ZooKeeper): find them by command line, stop them, wait.

Linux ``/proc`` based, as Kafka's ``kafka-server-stop.sh`` / ``zookeeper-server-stop.sh`` use ``ps``. Thread-safe.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

__all__ = ["cmdline", "alive", "terminate_and_wait"]


def cmdline(pid: int) -> list[str]:
    """The arguments of process ``pid`` ([] when it is gone or unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (an exited child not yet reaped) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def terminate_and_wait(pids: list[int], timeout_s: float) -> list[int]:
    """SIGTERM each pid and wait for it to exit; returns the pids still alive at the deadline."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    remaining = list(pids)
    while remaining and time.monotonic() < deadline:
        remaining = [p for p in remaining if alive(p)]
        if remaining:
            time.sleep(0.05)
    return remaining
