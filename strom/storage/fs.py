"""Small filesystem helpers for crash-safe storage: fsync of directories and atomic file replacement.

Kafka counterpart: ``Utils.atomicMoveWithFallback`` / ``Utils.flushDir``. Stateless, thread-safe.
"""

from __future__ import annotations

import os

__all__ = ["fsync_dir", "atomic_write"]


def fsync_dir(path: str) -> None:
    """fsync a directory so that creates, renames and unlinks in it are durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data``: write ``path.tmp``, fsync it, rename over ``path``, fsync the directory.

    A crash leaves either the old or the new content at ``path`` (plus possibly a stale ``.tmp``).
    """
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(os.path.abspath(path)))
