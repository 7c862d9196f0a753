"""Where storage reports a log dir that failed an I/O operation (JBOD, KIP-112).

Kafka counterpart: ``LogDirFailureChannel``. Any thread that sees an I/O error on a file of a log dir (an append,
a roll, a flush, a checkpoint, a read) reports the dir here; the first report of a dir marks it offline and
tells the listeners (the broker, which takes the dir's partitions offline and tells the controller). Later
reports of the same dir are ignored. Thread-safe; listeners run on the reporting thread.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable

__all__ = ["LogDirFailureChannel", "is_io_failure", "is_out_of_space"]

_OUT_OF_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})

log = logging.getLogger(__name__)


def _os_error(exc: BaseException | None) -> OSError | None:
    """``exc`` itself or the first error it was raised from that is an ``OSError`` (a few causes deep)."""
    for _ in range(8):
        if exc is None or isinstance(exc, OSError):
            return exc
        exc = exc.__cause__
    return None


def is_io_failure(exc: BaseException | None) -> bool:
    """Whether ``exc`` comes from the file system (an ``OSError`` itself, or an error raised from one): what takes
    a log dir offline, as Kafka's ``IOException``. A closed log, an unexpected offset or a refused batch does not."""
    return _os_error(exc) is not None


def is_out_of_space(exc: BaseException | None) -> bool:
    """Whether ``exc`` is (or comes from) a write refused for want of space: a full disk, a quota, a file size
    limit."""
    error = _os_error(exc)
    return error is not None and error.errno in _OUT_OF_SPACE


class LogDirFailureChannel:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offline: dict[str, str] = {}  # dir -> why it went offline
        self._listeners: list[Callable[[str], None]] = []

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """``listener(dir)`` is called once per dir that goes offline, on the reporting thread."""
        with self._lock:
            self._listeners.append(listener)

    def maybe_add_offline_log_dir(self, log_dir: str, message: str, exc: BaseException | None = None) -> bool:
        """Mark ``log_dir`` offline (first report only); returns whether this call did it."""
        log_dir = os.path.abspath(log_dir)
        with self._lock:
            if log_dir in self._offline:
                return False
            self._offline[log_dir] = f"{message}: {exc}" if exc is not None else message
            listeners = list(self._listeners)
        log.error("log dir %s failed and goes offline: %s%s", log_dir, message, f": {exc}" if exc else "")
        for listener in listeners:
            try:
                listener(log_dir)
            except Exception:  # noqa: BLE001 - one listener's failure must not hide the dir's from the others
                log.exception("a log dir failure listener failed for %s", log_dir)
        return True

    def has_offline_log_dir(self, log_dir: str) -> bool:
        with self._lock:
            return os.path.abspath(log_dir) in self._offline

    @property
    def offline_log_dirs(self) -> list[str]:
        with self._lock:
            return sorted(self._offline)

    def reason(self, log_dir: str) -> str | None:
        with self._lock:
            return self._offline.get(os.path.abspath(log_dir))
