"""Primitive wire types: varints, strings, bytes, arrays, tagged fields, Reader/Writer bounds checks."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.common.errors import ProtocolError
from strom.protocol import primitives as p
from strom.protocol.primitives import Reader, Writer

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("value, encoded", [
    (0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02"), (16384, "808001"),
    (0xFFFFFFFF, "ffffffff0f"),
])
def test_unsigned_varint_vectors(value: int, encoded: str) -> None:
    assert Writer().uvarint(value).getvalue().hex() == encoded
    assert Reader(bytes.fromhex(encoded)).uvarint() == value


@pytest.mark.parametrize("value, encoded", [(0, "00"), (-1, "01"), (1, "02"), (-2, "03"), (63, "7e"),
                                            (-64, "7f"), (64, "8001"), (-(2**31), "ffffffff0f")])
def test_zigzag_varint_vectors(value: int, encoded: str) -> None:
    assert Writer().varint(value).getvalue().hex() == encoded
    assert Reader(bytes.fromhex(encoded)).varint() == value


@settings(max_examples=100)
@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_roundtrip(n: int) -> None:
    data = Writer().varlong(n).getvalue()
    assert len(data) <= 10
    r = Reader(data)
    assert r.varlong() == n and r.remaining() == 0


def test_varint_errors() -> None:
    with pytest.raises(ProtocolError):
        Reader(b"\x80\x80").uvarint()  # truncated
    with pytest.raises(ProtocolError):
        Reader(b"\xff\xff\xff\xff\xff\x01").uvarint()  # more than 5 bytes
    with pytest.raises(ValueError):
        Writer().varint(2**31)


def test_strings_and_bytes() -> None:
    w = Writer().string("hé").nullable_string(None).compact_string("").compact_nullable_string(None)
    w.bytes_(b"ab").nullable_bytes(None).compact_bytes(b"c").compact_nullable_bytes(None)
    assert w.getvalue().hex() == "000368c3a9" "ffff" "01" "00" "000000026162" "ffffffff" "0263" "00"
    r = Reader(w.getvalue())
    assert (r.string(), r.nullable_string(), r.compact_string(), r.compact_nullable_string()) == ("hé", None, "", None)
    assert (r.bytes_(), r.nullable_bytes(), r.compact_bytes(), r.compact_nullable_bytes()) == (b"ab", None, b"c", None)
    assert r.remaining() == 0


@pytest.mark.parametrize("method, data", [
    ("string", "ffff"),  # null for non-nullable
    ("string", "0005 6162"),  # truncated
    ("string", "0002 ff fe"),  # invalid UTF-8
    ("compact_string", "00"),
    ("nullable_string", "fffe"),
    ("bytes_", "ffffffff"),
    ("nullable_bytes", "00000009 00"),
    ("records", "fffffff0"),
    ("int64", "000000"),
    ("uuid", "00" * 15),
    ("array_length", "7fffffff"),  # longer than the data
    ("compact_array_length", "ff7f"),
    ("tagged_fields", "02 01 00 01 00"),  # out of order
    ("tagged_fields", "01 00 05 00"),  # truncated value
    ("raw", ""),
])
def test_reader_bounds_checks(method: str, data: str) -> None:
    r = Reader(bytes.fromhex(data.replace(" ", "")))
    with pytest.raises(ProtocolError):
        getattr(r, method)(1) if method == "raw" else getattr(r, method)()


def test_fixed_width_and_uuid() -> None:
    u = uuid.uuid4()
    w = Writer().int8(-1).int16(-2).uint16(65535).int32(-3).uint32(2**32 - 1).int64(-4).float64(1.5)
    w.boolean(True).uuid(u).uuid(p.ZERO_UUID)
    r = Reader(w.getvalue())
    assert [r.int8(), r.int16(), r.uint16(), r.int32(), r.uint32(), r.int64(), r.float64(), r.boolean()] == [
        -1, -2, 65535, -3, 2**32 - 1, -4, 1.5, True]
    got = r.uuid()
    assert got == u and hash(got) == hash(u) and str(got) == str(u)
    assert r.uuid() is p.ZERO_UUID
    assert Reader(b"\x07").boolean() is True  # any non-zero byte is true


def test_tagged_fields_roundtrip_sorted() -> None:
    w = Writer().tagged_fields({9: b"x", 2: b""})
    assert w.getvalue().hex() == "02" "0200" "090178"
    assert Reader(w.getvalue()).tagged_fields() == {2: b"", 9: b"x"}
    assert Writer().tagged_fields({}).getvalue() == b"\x00"


def test_records_are_zero_copy() -> None:
    data = bytes.fromhex("00000003 616263".replace(" ", ""))
    view = Reader(data).records()
    assert view == b"abc" and view.obj is data
    assert Reader(b"\x04abc").compact_records() == b"abc"
    assert Reader(b"\x00").compact_records() is None
