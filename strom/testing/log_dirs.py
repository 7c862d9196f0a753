"""Failing a log dir in tests the way Kafka's own tests do (``TestUtils.causeLogDirFailure``): the directory is
renamed away and a file takes its name, so the next file the broker creates or rewrites there (a checkpoint, a
new segment) fails with an I/O error, while files already open keep working as on a disk that just went away."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fail_log_dir", "repair_log_dir", "mount_tmpfs", "unmount"]


def fail_log_dir(d: Path) -> None:
    os.rename(d, f"{d}.gone")
    d.write_bytes(b"")


def repair_log_dir(d: Path) -> None:
    """Undo :func:`fail_log_dir`: the directory comes back with what it held."""
    os.unlink(d)
    os.rename(f"{d}.gone", d)


def mount_tmpfs(path: Path, size: str) -> bool:
    """Mount a tmpfs of ``size`` (``"16m"``) at ``path``: a small real disk that fills up (needs root, as in CI);
    False where this machine does not allow it."""
    import subprocess

    path.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def unmount(path: Path) -> None:
    import subprocess

    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)
