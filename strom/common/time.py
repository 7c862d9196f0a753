"""Injectable clocks (Kafka's ``org.apache.kafka.common.utils.Time``).

Every component that measures time takes a :class:`Time`; production code uses
:data:`SYSTEM_TIME`, tests use :class:`strom.testing.mock_time.MockTime` and step it.
"""

from __future__ import annotations

import threading
import time as _time
from typing import Protocol

__all__ = ["Time", "SystemTime", "SYSTEM_TIME"]


class Time(Protocol):
    """A clock: wall-clock milliseconds plus a monotonic nanosecond counter."""

    def milliseconds(self) -> int:
        """Wall-clock time in ms since the epoch (record timestamps)."""

    def nanoseconds(self) -> int:
        """Monotonic time in ns (timeouts, latencies)."""

    def hi_res_milliseconds(self) -> int:
        """Monotonic time in ms."""

    def sleep(self, ms: int) -> None:
        """Sleep for ``ms`` milliseconds (a mock clock advances instead)."""

    def wait_on(self, cond: threading.Condition, timeout_ms: int) -> None:
        """Wait on a held condition for at most ``timeout_ms`` (a mock clock advances)."""


class SystemTime:
    """The real clock. Thread-safe."""

    __slots__ = ()

    def milliseconds(self) -> int:
        return _time.time_ns() // 1_000_000

    def nanoseconds(self) -> int:
        return _time.monotonic_ns()

    def hi_res_milliseconds(self) -> int:
        return _time.monotonic_ns() // 1_000_000

    def sleep(self, ms: int) -> None:
        if ms > 0:
            _time.sleep(ms / 1000.0)

    def wait_on(self, cond: threading.Condition, timeout_ms: int) -> None:
        cond.wait(max(0, timeout_ms) / 1000.0)


SYSTEM_TIME = SystemTime()
