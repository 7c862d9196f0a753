"""Producer ids for idempotent producers, handed out from durably reserved blocks.

Kafka counterpart: ``ProducerIdManager`` (ZooKeeper mode: blocks reserved in ``/latest_producer_id_block`` with a
compare-and-set, so ids are unique across the cluster; standalone: blocks recorded in the topic registry). A block's
end is stored before any id from it is given out, so ids are never reused after a restart. Event loop only; the
block source may block (ZooKeeper) and is called in a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["ProducerIdManager", "BLOCK_SIZE"]

BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, allocate_block: Callable[[int], int], *, blocking: bool = False) -> None:
        """``allocate_block(size)`` reserves ``size`` ids durably and returns the first."""
        self._allocate = allocate_block
        self._blocking = blocking
        self._next = 0
        self._end = 0
        self._lock = asyncio.Lock()

    async def generate_producer_id(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                if self._blocking:
                    start = await asyncio.get_running_loop().run_in_executor(None, self._allocate, BLOCK_SIZE)
                else:
                    start = self._allocate(BLOCK_SIZE)
                self._next, self._end = start, start + BLOCK_SIZE
            pid = self._next
            self._next += 1
            return pid
