"""``encode_headers``: the producer's one encoding of a record's headers (count, then each key and value in
Kafka's varint-length form), read back with the record layer's ``read_headers``; by the C encoder of plain pairs
(``strom/record/_fastencode.c``) and by the Python encoder, which must agree byte for byte. (The C encoder must be
built: these tests fail, not skip, without it.)"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.producer.record import Header, checked_header
from strom.record import _fastencode, sizes
from strom.record.batch import read_headers
from strom.record.sizes import EncodedHeaders, encode_headers
from strom.record.varint import decode_varint

encode_plain_headers = _fastencode.encode_headers


@pytest.fixture(params=["c", "python"])
def both_encoders(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The test runs with ``encode_headers`` trying the C encoder first (as installed), then without it."""
    assert sizes.encode_plain_headers is encode_plain_headers  # built and wired in
    if request.param == "python":
        monkeypatch.setattr(sizes, "encode_plain_headers", None)
    yield request.param


def python_encoded(headers: Any) -> bytes:
    """The Python encoder's bytes, the C encoder switched off."""
    saved = sizes.encode_plain_headers
    sizes.encode_plain_headers = None
    try:
        return encode_headers(headers, checked_header)
    finally:
        sizes.encode_plain_headers = saved


def decoded(encoded: bytes) -> tuple[tuple[str, bytes | None], ...]:
    count, p = decode_varint(encoded, 0)
    headers, end = read_headers(encoded, p, count)
    assert end == len(encoded)
    return headers


@pytest.mark.usefixtures("both_encoders")
@given(st.lists(st.tuples(st.text(max_size=80), st.one_of(st.none(), st.binary(max_size=200))), max_size=70))
def test_any_headers_read_back(headers: list[tuple[str, bytes | None]]) -> None:
    encoded = encode_headers(headers, checked_header)
    assert type(encoded) is EncodedHeaders
    assert decoded(encoded) == tuple(headers)
    assert encode_headers(tuple(headers)) == encoded  # again (keys now cached), and without a check


@pytest.mark.usefixtures("both_encoders")
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


@pytest.mark.usefixtures("both_encoders")
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


@pytest.mark.usefixtures("both_encoders")
def test_key_cache_stays_bounded_and_correct(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sizes, "_MAX_KEY_FIELDS", 8)
    monkeypatch.setattr(sizes, "_KEY_FIELDS", {})
    for i in range(50):
        key = f"key-{i}-" + "x" * (i * 3)
        assert decoded(encode_headers([(key, b"v%d" % i), ("other", None)])) == ((key, b"v%d" % i), ("other", None))
        assert len(sizes._KEY_FIELDS) <= 8


class Pair(NamedTuple):
    key: str
    value: bytes | None


_text = st.text(max_size=80) | st.sampled_from(["", "k" * 64, "ключ-é" * 20, "\U0001f600"])
_value = st.none() | st.binary(max_size=200) | st.sampled_from([b"", b"v" * 63, b"v" * 64, b"v" * 9000])


@given(st.lists(st.tuples(_text, _value), max_size=70), st.sampled_from(["list", "tuple", "Header", "NamedTuple"]))
def test_the_c_encoder_writes_what_the_python_encoder_writes(pairs: list[tuple[str, bytes | None]],
                                                               form: str) -> None:
    headers: Any = {"list": pairs, "tuple": tuple(pairs), "Header": [Header(*p) for p in pairs],
                    "NamedTuple": tuple(Pair(*p) for p in pairs)}[form]
    encoded = encode_plain_headers(headers)
    assert type(encoded) is EncodedHeaders
    assert encoded == python_encoded(pairs)
    assert decoded(encoded) == tuple(pairs)
    # A bytes object made in C as bytes.__new__ makes one: no hash cached yet, a NUL after the last byte.
    assert hash(encoded) == hash(bytes(encoded))
    assert encoded.decode("latin-1").encode("latin-1") == encoded


class StrKey(str):
    pass


@pytest.mark.parametrize("headers", [
    [["k", b"v"]],  # a list pair
    [("k", b"v", b"extra")],
    [("k",)],
    [(StrKey("k"), b"v")],
    [(b"k", b"v")],
    [(1, b"v")],
    [("k", "text")],
    [("k", bytearray(b"v"))],
    [("k", memoryview(b"v"))],
    [("a", b"1"), ("\ud800", b"v")],  # a key that is not valid UTF-8
    [("a", b"1"), "ab"],
    iter([("k", b"v")]),
    {"k": b"v"},
    "kv",
])
def test_any_other_shape_is_left_to_the_python_encoder(headers: Any) -> None:
    assert encode_plain_headers(headers) is None


@pytest.mark.parametrize("change", ["longer", "shorter", "fewer", "not a pair"])
def test_headers_changed_by_a_finalizer_during_the_allocation_are_left_to_the_python_encoder(change: str) -> None:
    """``EncodedHeaders`` is a GC type: allocating it may run a collection, whose finalizers run Python code that
    may change the list being encoded. The C encoder then gives ``None`` rather than bytes sized for the old items
    (or reading freed ones); ``encode_headers`` encodes the list as it is now."""
    headers: list[Any] = [("k1", b"v" * 10), ("k2", None)]
    before = list(headers)
    encoding = False
    ran: list[bool] = []  # for each run of the finalizer: was it inside the encoder's call?

    class Mutator:
        def __del__(self) -> None:
            if change == "longer":
                headers[0] = ("k1", b"w" * 500)
            elif change == "shorter":
                headers[0] = ("k1", b"w")
            elif change == "fewer":
                del headers[1]
            else:
                headers[1] = ["k2", None]
            ran.append(encoding)

    def make_garbage() -> None:
        m = Mutator()
        m.self = m

    threshold = gc.get_threshold()
    gc.set_threshold(1)  # the next allocation of a GC object collects the youngest generation...
    try:
        gc.disable()
        make_garbage()  # ... where this garbage is: made while no collection could move it on
        gc.enable()
        encoding = True
        result = encode_plain_headers(headers)
        encoding = False
    finally:
        gc.enable()
        gc.set_threshold(*threshold)
    assert ran == [True]
    if result is None:  # the finalizer ran inside the encoder's allocation (always before 3.12)
        assert decoded(encode_headers(headers, checked_header)) == tuple(tuple(p) for p in headers)
    else:  # 3.12 and later collect at the eval loop's next check: after the call returned, before `encoding = False`
        assert sys.version_info >= (3, 12)
        assert result == python_encoded(before)  # (the list as it was while the encoder ran)


def test_the_result_type_must_be_set_to_a_bytes_subclass() -> None:
    with pytest.raises(TypeError, match="subclass of bytes"):
        _fastencode.set_encoded_headers_type(str)
    with pytest.raises(TypeError, match="subclass of bytes"):
        _fastencode.set_encoded_headers_type(b"x")
    _fastencode.set_encoded_headers_type(EncodedHeaders)  # (again: what sizes.py set at import)
    assert type(encode_plain_headers([("k", b"v")])) is EncodedHeaders
