"""A manually stepped clock for deterministic tests (Kafka's ``MockTime``). Thread-safe."""

from __future__ import annotations

import threading

__all__ = ["MockTime"]


class MockTime:
    """Time that moves only when told to (``sleep`` and ``wait_on`` advance it)."""

    def __init__(self, auto_tick_ms: int = 0, start_ms: int = 1_700_000_000_000, start_ns: int = 0) -> None:
        self._lock = threading.Lock()
        self._ms = start_ms
        self._ns = start_ns
        self.auto_tick_ms = auto_tick_ms

    def _maybe_tick(self) -> None:
        if self.auto_tick_ms:
            self.sleep(self.auto_tick_ms)

    def milliseconds(self) -> int:
        self._maybe_tick()
        with self._lock:
            return self._ms

    def nanoseconds(self) -> int:
        self._maybe_tick()
        with self._lock:
            return self._ns

    def hi_res_milliseconds(self) -> int:
        return self.nanoseconds() // 1_000_000

    def sleep(self, ms: int) -> None:
        with self._lock:
            self._ms += ms
            self._ns += ms * 1_000_000

    def wait_on(self, cond: threading.Condition, timeout_ms: int) -> None:
        # A mock wait returns at once after advancing the clock, so callers re-check their condition.
        self.sleep(max(0, timeout_ms))
