"""Kafka's key hash: 32-bit MurmurHash2 with Kafka's seed, identical to Java's ``Utils.murmur2``.

``partition = to_positive(murmur2(key_bytes)) % num_partitions`` is the default partitioner's choice for a
keyed record. Algorithm (see ``kafka-protocol/murmur2.txt``): seed 0x9747b28c, m 0x5bd1e995, r 24; h = seed
^ len; each little-endian 4-byte block k: k *= m; k ^= k >>> 24; k *= m; h *= m; h ^= k; the 0-3 tail bytes
are xor-ed in (<< 16, << 8, << 0) followed by one h *= m; final mix h ^= h >>> 13; h *= m; h ^= h >>> 15.
All arithmetic modulo 2**32; the result is returned as a signed 32-bit int like Java's.

Kafka counterpart: ``org.apache.kafka.common.utils.Utils.murmur2`` / ``toPositive``. Pure, thread-safe.
"""

from __future__ import annotations

import struct

__all__ = ["murmur2", "to_positive"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """MurmurHash2 of ``data`` as Java's ``Utils.murmur2`` returns it (signed 32-bit)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    nblocks = length >> 2
    m = _M
    mask = _MASK
    if nblocks:
        for k in struct.unpack_from(f"<{nblocks}I", data):
            k = (k * m) & mask
            k ^= k >> 24
            h = ((h * m) & mask) ^ ((k * m) & mask)
    tail = length & 3
    if tail:
        i = nblocks << 2
        if tail == 3:
            h ^= data[i + 2] << 16
        if tail >= 2:
            h ^= data[i + 1] << 8
        h = ((h ^ data[i]) * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Clear the sign bit (Java's ``Utils.toPositive``); not the absolute value."""
    return number & 0x7FFFFFFF
