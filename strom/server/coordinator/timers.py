"""Named deadlines for the group coordinator, run when due.

Kafka counterpart: the coordinator's ``DelayedOperationPurgatory`` instances (``DelayedJoin``,
``InitialDelayedJoin``, ``DelayedSync``, ``DelayedHeartbeat``) over a ``SystemTimer``. Here a deadline is a key
(``("heartbeat", group, member)`` …) with a callback; scheduling a key again replaces its deadline. ``poll()``
runs what is due against the injected :class:`~strom.common.time.Time`, so tests step a ``MockTime`` and call
``poll()``; the broker runs :meth:`CoordinatorTimers.run` as a task. Event loop only.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable, Hashable

from strom.common.time import Time

__all__ = ["CoordinatorTimers"]

log = logging.getLogger("strom.coordinator")


class CoordinatorTimers:
    """A heap of ``(deadline_ms, seq, key)``; the live entry per key is in ``_entries`` (stale heap rows skip)."""

    def __init__(self, time: Time) -> None:
        self._time = time
        self._heap: list[tuple[int, int, Hashable]] = []
        self._entries: dict[Hashable, tuple[int, int, Callable[[], None]]] = {}
        self._seq = itertools.count()
        self._wakeup: asyncio.Event | None = None

    def now(self) -> int:
        return self._time.hi_res_milliseconds()

    def schedule(self, key: Hashable, delay_ms: int, fn: Callable[[], None]) -> None:
        deadline = self.now() + max(0, delay_ms)
        seq = next(self._seq)
        self._entries[key] = (deadline, seq, fn)
        heapq.heappush(self._heap, (deadline, seq, key))
        if self._wakeup is not None and self._heap[0][1] == seq:
            self._wakeup.set()

    def cancel(self, key: Hashable) -> bool:
        return self._entries.pop(key, None) is not None

    def cancel_matching(self, pred: Callable[[Hashable], bool]) -> None:
        for key in [k for k in self._entries if pred(k)]:
            del self._entries[key]

    def deadline(self, key: Hashable) -> int | None:
        entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def next_deadline(self) -> int | None:
        heap = self._heap
        while heap:
            deadline, seq, key = heap[0]
            entry = self._entries.get(key)
            if entry is not None and entry[1] == seq:
                return deadline
            heapq.heappop(heap)
        return None

    def poll(self) -> int:
        """Run every callback whose deadline has passed; returns how many ran."""
        ran = 0
        now = self.now()
        heap = self._heap
        while heap and heap[0][0] <= now:
            _deadline, seq, key = heapq.heappop(heap)
            entry = self._entries.get(key)
            if entry is None or entry[1] != seq:
                continue
            del self._entries[key]
            ran += 1
            try:
                entry[2]()
            except Exception:  # one bad timer must not stop the others
                log.exception("coordinator timer %r failed", key)
        return ran

    def clear(self) -> None:
        self._entries.clear()
        self._heap.clear()

    async def run(self, max_sleep_ms: int = 1000) -> None:
        """Run due callbacks forever, sleeping until the next deadline (or a sooner one is scheduled)."""
        self._wakeup = asyncio.Event()
        while True:
            self.poll()
            nxt = self.next_deadline()
            delay = max_sleep_ms if nxt is None else min(max_sleep_ms, max(1, nxt - self.now()))
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), delay / 1000.0)
            except TimeoutError:
                pass
