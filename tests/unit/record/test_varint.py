"""Zig-zag varint/varlong and unsigned varint encoding (Kafka's ByteUtils)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.record.varint import (
    decode_unsigned_varint,
    decode_varint,
    decode_varlong,
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
    size_of_unsigned_varint,
    size_of_varint,
    size_of_varlong,
    unzigzag,
    varint_bytes,
    varlong_bytes,
    zigzag,
)

pytestmark = pytest.mark.unit

# Values and encodings as Kafka's ByteUtilsTest expects them (zig-zag, little-endian base 128).
KNOWN_VARINTS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (-64, "7f"),
    (63, "7e"),
    (64, "8001"),
    (-65, "8101"),
    (8191, "fe7f"),
    (-8193, "818001"),
    (2**31 - 1, "feffffff0f"),
    (-(2**31), "ffffffff0f"),
]
KNOWN_VARLONGS = KNOWN_VARINTS + [
    (2**63 - 1, "feffffffffffffffff01"),
    (-(2**63), "ffffffffffffffffff01"),
    (1_700_000_000_000, "80a0abfef962"),
]


@pytest.mark.parametrize(("value", "hexstr"), KNOWN_VARINTS)
def test_known_varints(value: int, hexstr: str) -> None:
    out = bytearray()
    encode_varint(value, out)
    assert out.hex() == hexstr
    assert varint_bytes(value).hex() == hexstr
    assert decode_varint(bytes.fromhex(hexstr) + b"\xaa", 0) == (value, len(hexstr) // 2)
    assert size_of_varint(value) == len(hexstr) // 2


@pytest.mark.parametrize(("value", "hexstr"), KNOWN_VARLONGS)
def test_known_varlongs(value: int, hexstr: str) -> None:
    out = bytearray(b"x")
    encode_varlong(value, out)
    assert out[1:].hex() == hexstr
    assert varlong_bytes(value).hex() == hexstr
    assert decode_varlong(memoryview(b"x" + bytes.fromhex(hexstr)), 1) == (value, 1 + len(hexstr) // 2)
    assert size_of_varlong(value) == len(hexstr) // 2


def test_unsigned_varint() -> None:
    for value, hexstr in [(0, "00"), (127, "7f"), (128, "8001"), (300, "ac02"), (2**32 - 1, "ffffffff0f")]:
        out = bytearray()
        encode_unsigned_varint(value, out)
        assert out.hex() == hexstr
        assert decode_unsigned_varint(bytes(out)) == (value, len(out))
        assert size_of_unsigned_varint(value) == len(out)


def test_range_errors() -> None:
    with pytest.raises(ValueError):
        varint_bytes(2**31)
    with pytest.raises(ValueError):
        varint_bytes(-(2**31) - 1)
    with pytest.raises(ValueError):
        varlong_bytes(2**63)
    with pytest.raises(ValueError):
        encode_unsigned_varint(-1, bytearray())


def test_decode_errors() -> None:
    with pytest.raises(ValueError):
        decode_varint(b"\xff\xff\xff\xff\xff\x01")  # 6 bytes: too long for a varint
    assert decode_varlong(b"\xff\xff\xff\xff\xff\x01")[1] == 6
    with pytest.raises(ValueError):
        decode_varlong(b"\xff" * 10 + b"\x01")
    with pytest.raises(IndexError):
        decode_varint(b"\x80\x80")  # truncated


@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_varint_roundtrip(value: int) -> None:
    enc = varint_bytes(value)
    assert decode_varint(enc) == (value, len(enc))
    assert len(enc) == size_of_varint(value) <= 5
    assert unzigzag(zigzag(value)) == value


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varlong_roundtrip(value: int) -> None:
    enc = varlong_bytes(value)
    assert decode_varlong(enc) == (value, len(enc))
    assert len(enc) == size_of_varlong(value) <= 10
