"""A deadline for blocking consumer calls.

Kafka counterpart: ``org.apache.kafka.common.utils.Timer``: a start time, a deadline and a cached "now"
refreshed by :meth:`update`. Built from an injected :class:`~strom.common.time.Time`, so ``MockTime`` steps it.
Not thread-safe: one timer belongs to one call on one thread.
"""

from __future__ import annotations

from strom.common.time import Time

__all__ = ["Timer"]

_MAX = 2**63 - 1


class Timer:
    """``Timer(time, timeout_ms)``; ``remaining_ms`` is never negative."""

    __slots__ = ("time", "start_ms", "current_ms", "deadline_ms", "timeout_ms")

    def __init__(self, time: Time, timeout_ms: int) -> None:
        self.time = time
        self.current_ms = time.milliseconds()
        self.start_ms = self.current_ms
        self.timeout_ms = max(0, timeout_ms)
        self.deadline_ms = min(_MAX, self.current_ms + self.timeout_ms)

    def update(self, now_ms: int | None = None) -> int:
        self.current_ms = max(self.current_ms, self.time.milliseconds() if now_ms is None else now_ms)
        return self.current_ms

    def reset(self, timeout_ms: int) -> None:
        self.update()
        self.timeout_ms = max(0, timeout_ms)
        self.start_ms = self.current_ms
        self.deadline_ms = min(_MAX, self.current_ms + self.timeout_ms)

    def is_expired(self) -> bool:
        return self.current_ms >= self.deadline_ms

    def not_expired(self) -> bool:
        return not self.is_expired()

    def remaining_ms(self) -> int:
        return max(0, self.deadline_ms - self.current_ms)

    def elapsed_ms(self) -> int:
        return self.current_ms - self.start_ms

    def sleep(self, ms: int) -> None:
        """Sleep ``ms`` (at most what is left) and update."""
        ms = min(ms, self.remaining_ms())
        if ms > 0:
            self.time.sleep(ms)
        self.update()

    def __repr__(self) -> str:
        return f"Timer(remaining={self.remaining_ms()}ms)"
