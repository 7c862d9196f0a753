"""murmur2 / toPositive against every vector in kafka-protocol/murmur2.txt (Java's Utils.murmur2)."""

from __future__ import annotations

import pytest

from strom.common.murmur2 import murmur2, to_positive

pytestmark = pytest.mark.unit

# key, murmur2 (signed), unsigned hex, toPositive, toPositive % 10
TABLE = [
    (b"", 275646681, 0x106E08D9, 275646681, 1),
    (b"a", -1563381124, 0xA2D0B27C, 584102524, 4),
    (b"hello", 2132663229, 0x7F1DDBBD, 2132663229, 9),
    (b"kafka", -798503068, 0xD067CF64, 1348980580, 0),
    (b"123456789", -1822237082, 0x9362DE66, 325246566, 6),
]
# Upstream UtilsTest.testMurmur2 vectors quoted in murmur2.txt.
UPSTREAM = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("key", "signed", "unsigned", "positive", "mod10"), TABLE)
def test_table_vectors(key: bytes, signed: int, unsigned: int, positive: int, mod10: int) -> None:
    h = murmur2(key)
    assert h == signed
    assert h & 0xFFFFFFFF == unsigned
    assert to_positive(h) == positive
    assert to_positive(h) % 10 == mod10


@pytest.mark.parametrize(("key", "signed"), UPSTREAM)
def test_upstream_vectors(key: bytes, signed: int) -> None:
    assert murmur2(key) == signed


def test_buffer_types_and_range() -> None:
    for key in (b"ab", b"abcd", b"abcde", b"abcdefg"):  # every tail length
        h = murmur2(key)
        assert -(2**31) <= h < 2**31
        assert murmur2(bytearray(key)) == h == murmur2(memoryview(key))


def test_to_positive_is_not_abs() -> None:
    assert to_positive(-1563381124) == 584102524 != abs(-1563381124)
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
