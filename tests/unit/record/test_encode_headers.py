"""``encode_headers``: the producer's one encoding of a record's headers (count, then each key and value in
Kafka's varint-length form), read back with the record layer's ``read_headers``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.producer.record import checked_header
from strom.record import sizes
from strom.record.batch import read_headers
from strom.record.sizes import EncodedHeaders, encode_headers
from strom.record.varint import decode_varint


def decoded(encoded: bytes) -> tuple[tuple[str, bytes | None], ...]:
    count, p = decode_varint(encoded, 0)
    headers, end = read_headers(encoded, p, count)
    assert end == len(encoded)
    return headers


@given(st.lists(st.tuples(st.text(max_size=80), st.one_of(st.none(), st.binary(max_size=200))), max_size=70))
def test_any_headers_read_back(headers: list[tuple[str, bytes | None]]) -> None:
    encoded = encode_headers(headers, checked_header)
    assert type(encoded) is EncodedHeaders
    assert decoded(encoded) == tuple(headers)
    assert encode_headers(tuple(headers)) == encoded  # again (keys now cached), and without a check


@pytest.mark.parametrize("headers", [
    [("trace-id", b"\x00" * 16)],  # one header: the single-join path
    [("trace-id", b"")],
    [("trace-id", None)],
    [("", b"v")],
    [("ключ-é", b"v" * 63)],
    [("k", b"v" * 64)],  # two-byte value length
    [("k" * 64, b"v")],  # two-byte key length
    [("a", b"1"), ("a", b"2")],
])
def test_shapes(headers: list[tuple[str, bytes | None]]) -> None:
    assert decoded(encode_headers(headers, checked_header)) == tuple(headers)


def test_converted_pairs_go_through_the_check() -> None:
    calls: list[tuple[Any, Any]] = []

    def check(key: Any, value: Any) -> tuple[str, bytes | None]:
        calls.append((key, value))
        return checked_header(key, value)

    assert decoded(encode_headers([("k", bytearray(b"v"))], check)) == (("k", b"v"),)
    assert decoded(encode_headers([("k", "text")], check)) == (("k", b"text"),)
    assert calls == [("k", bytearray(b"v")), ("k", "text")]
    with pytest.raises(Exception, match=r"(?i)header"):
        encode_headers([(1, b"v")], checked_header)


def test_key_cache_stays_bounded_and_correct(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sizes, "_MAX_KEY_FIELDS", 8)
    monkeypatch.setattr(sizes, "_KEY_FIELDS", {})
    for i in range(50):
        key = f"key-{i}-" + "x" * (i * 3)
        assert decoded(encode_headers([(key, b"v%d" % i), ("other", None)])) == ((key, b"v%d" % i), ("other", None))
        assert len(sizes._KEY_FIELDS) <= 8
