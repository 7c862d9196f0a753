"""The compaction offset map: key -> the last offset holding it in the dirty section of a log.

Kafka counterpart: ``SkimpyOffsetMap``. Keys are stored as their 16-byte MD5 digest (as Kafka does), so memory
per entry does not grow with key size; two keys colliding on MD5 would let the older one be removed, which Kafka
accepts too. A key shorter than 16 bytes is stored as itself: no larger than its digest, cheaper than hashing it,
and it cannot equal a digest of another key (digests are 16 bytes long). The capacity follows Kafka's sizing: ``memory / (16 + 8)`` slots of which ``load_factor`` are used,
so ``log.cleaner.dedupe.buffer.size`` bounds how many distinct keys one cleaning round can map (a Python dict
spends more than 24 bytes per entry; the setting keeps Kafka's meaning, not its exact footprint).

Not thread-safe: each cleaner thread owns its map.
"""

from __future__ import annotations

import hashlib

__all__ = ["OffsetMap", "BYTES_PER_ENTRY"]

BYTES_PER_ENTRY = 16 + 8  # MD5 digest + offset, as Kafka's SkimpyOffsetMap
_DIGEST_SIZE = 16
_md5 = hashlib.md5


class OffsetMap:
    """Digest of each key -> the largest offset seen for it."""

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        if memory < BYTES_PER_ENTRY:
            raise ValueError(f"offset map memory {memory} is smaller than one entry ({BYTES_PER_ENTRY} bytes)")
        if not 0 < load_factor <= 1:
            raise ValueError(f"load factor {load_factor} must be in (0, 1]")
        self.slots = memory // BYTES_PER_ENTRY
        self.max_entries = max(1, int(self.slots * load_factor))
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._map)

    @property
    def is_full(self) -> bool:
        return len(self._map) >= self.max_entries

    @property
    def utilization(self) -> float:
        return len(self._map) / self.slots

    def put(self, key: bytes, offset: int) -> None:
        """Record ``offset`` for ``key`` (offsets are put in increasing order)."""
        self._map[key if len(key) < _DIGEST_SIZE else _md5(key, usedforsecurity=False).digest()] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The offset recorded for ``key``, or -1."""
        return self._map.get(key if len(key) < _DIGEST_SIZE else _md5(key, usedforsecurity=False).digest(), -1)

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1
