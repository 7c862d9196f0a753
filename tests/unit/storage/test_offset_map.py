"""The cleaner's offset map: latest offset per key, keys shorter than a digest stored as themselves."""

from __future__ import annotations

import hashlib

import pytest

from strom.storage.offset_map import BYTES_PER_ENTRY, OffsetMap


def test_latest_offset_per_key_short_and_long() -> None:
    m = OffsetMap(1 << 20)
    long_key = b"k" * 40
    m.put(b"a", 1)
    m.put(long_key, 2)
    m.put(b"a", 3)
    assert (m.get(b"a"), m.get(long_key), m.get(b"b"), m.get(b"k" * 41)) == (3, 2, -1, -1)
    assert len(m) == 2 and m.latest_offset == 3


def test_a_key_equal_to_another_keys_digest_is_a_different_key() -> None:
    """Only keys shorter than 16 bytes skip hashing, so a producer cannot make its key collide with another key by
    writing that key's MD5 digest as its own key."""
    m = OffsetMap(1 << 20)
    victim = b"customer-000000000042"
    forged = hashlib.md5(victim).digest()
    m.put(victim, 7)
    m.put(forged, 9)
    assert m.get(victim) == 7 and m.get(forged) == 9
    fifteen = b"x" * 15
    m.put(fifteen, 11)
    assert m.get(fifteen) == 11 and m.get(hashlib.md5(fifteen).digest()) == -1


def test_capacity_follows_kafkas_sizing() -> None:
    m = OffsetMap(BYTES_PER_ENTRY * 100, load_factor=0.5)
    assert (m.slots, m.max_entries) == (100, 50)
    with pytest.raises(ValueError, match="smaller than one entry"):
        OffsetMap(BYTES_PER_ENTRY - 1)
