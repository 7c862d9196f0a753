"""The C accelerator of ``MemoryRecordsBuilder.try_append`` (``strom/record/_fastencode.c``): builders writing into a
pooled buffer produce byte for byte the batches of the Python path, take the same records (write limits, with and
without a codec's estimate) and move to a growing buffer at the same point; bad arguments raise and write
nothing."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.record import _fastencode, builder
from strom.record.batch import RecordBatch
from strom.record.builder import MemoryRecordsBuilder
from strom.record.compression import CompressionType
from strom.record.header import HEADER_SIZE
from strom.record.sizes import EncodedHeaders, encode_headers

pytestmark = pytest.mark.unit

TS = 1_700_000_000_000
encode_record = _fastencode.encode_record

_bytes = st.none() | st.binary(max_size=80) | st.binary(min_size=8190, max_size=8200)
_header = st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=30))
_record = st.tuples(st.integers(-2**40, 2**45) | st.sampled_from([0, -1, 63, 64, -64, -65]), _bytes, _bytes,
                    st.lists(_header, max_size=3), st.sampled_from(["list", "encoded", "tuple"]))


def _headers(headers: list, form: str) -> object:
    if form == "encoded":
        return encode_headers(headers) if headers else EncodedHeaders(b"\x00")
    return tuple(headers) if form == "tuple" else headers


def _fill(records: list, buffer_size: int, write_limit: int | None, codec: CompressionType,
          accelerated: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], bytes]:
    with monkeypatch.context() as m:
        if not accelerated:
            m.setattr(builder, "_encode_record", None)
        b = MemoryRecordsBuilder(codec, buffer=bytearray(buffer_size), write_limit=write_limit,
                                 estimated_compression_ratio=0.5)
        results = [b.try_append(TS + delta, key, value, _headers(headers, form))
                   for delta, key, value, headers, form in records]
        return results, bytes(b.build())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(_record, min_size=1, max_size=25),
       buffer_size=st.sampled_from([HEADER_SIZE, HEADER_SIZE + 50, 300, 4096, 65536]),
       write_limit=st.none() | st.integers(HEADER_SIZE, 20_000),
       codec=st.sampled_from([CompressionType.NONE, CompressionType.GZIP]))
def test_the_accelerated_builder_writes_what_the_python_path_writes(records: list, buffer_size: int,
                                                                    write_limit: int | None, codec: CompressionType,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _fill(records, buffer_size, write_limit, codec, True, monkeypatch)
    slow = _fill(records, buffer_size, write_limit, codec, False, monkeypatch)
    assert fast == slow
    kept = [rec for rec, result in zip(records, fast[0], strict=True) if result >= 0]
    read = RecordBatch(fast[1]).records()
    assert [(r.key, r.value, r.timestamp) for r in read] == [(k, v, TS + d) for d, k, v, _, _ in kept]
    assert [list(r.headers) for r in read] == [list(h) for _, _, _, h, _ in kept]


def _python_record(ts_delta: int, offset_delta: int, key: bytes | None, value: bytes | None,
                   headers: list) -> bytes:
    """The record as the Python path writes it: the tail of a batch that holds it after ``offset_delta`` others."""
    def batch(with_record: bool) -> bytes:
        b = MemoryRecordsBuilder()
        for _ in range(offset_delta):
            b.append(TS, None, None)
        if with_record:
            b.append(TS + ts_delta, key, value, headers)
        return bytes(b.build())

    return batch(True)[len(batch(False)):]


@pytest.mark.parametrize(("ts_delta", "offset_delta", "key", "value", "headers"), [
    (0, 1, None, None, []),
    (5, 1, b"k", b"v" * 200, [("trace", b"x" * 16)]),
    (-3, 2, bytearray(b"key"), memoryview(b"value"), [("a", None), ("b", b"")]),
    (2**40, 130, b"", b"\x00" * 20_000, []),
])
def test_a_record_is_written_in_place_with_the_python_paths_bytes(ts_delta: int, offset_delta: int, key: object,
                                                                   value: object, headers: list) -> None:
    expected = _python_record(ts_delta, offset_delta, None if key is None else bytes(key),
                              None if value is None else bytes(value), headers)
    target = bytearray(b"\xee" * (len(expected) + 20))
    assert encode_record(target, 7, 1 << 40, ts_delta, offset_delta, key, value, encode_headers(headers)) == len(
        expected)
    assert target[7:7 + len(expected)] == expected
    assert target[:7] == b"\xee" * 7 and target[7 + len(expected):] == b"\xee" * 13


def test_a_record_over_the_room_or_the_buffer_writes_nothing() -> None:
    size = len(_python_record(1, 1, b"k", b"v" * 10, []))
    target = bytearray(size + 5)
    assert encode_record(target, 0, size - 1, 1, 1, b"k", b"v" * 10, b"\x00") == -1
    assert encode_record(target, 6, size, 1, 1, b"k", b"v" * 10, b"\x00") == -2
    assert encode_record(target, 0, -5, 1, 1, b"k", b"v" * 10, b"\x00") == -1
    assert target == bytearray(size + 5)
    assert encode_record(target, 5, size, 1, 1, b"k", b"v" * 10, b"\x00") == size  # exactly fits both


@pytest.mark.parametrize(("args", "error"), [
    ((bytearray(64), 0, 100, 0, 0, "key", b"v", b"\x00"), TypeError),
    ((bytearray(64), 0, 100, 0, 0, None, 12, b"\x00"), TypeError),
    ((bytearray(64), 0, 100, 0, 0, None, b"v", None), TypeError),
    ((b"\x00" * 64, 0, 100, 0, 0, None, b"v", b"\x00"), BufferError),
    ((bytearray(64), 65, 100, 0, 0, None, b"v", b"\x00"), ValueError),
    ((bytearray(64), -1, 100, 0, 0, None, b"v", b"\x00"), ValueError),
    ((bytearray(64), 0, 100, 0, 2**31, None, b"v", b"\x00"), ValueError),
    ((bytearray(64), 0, 100, 2**63, 0, None, b"v", b"\x00"), OverflowError),
    ((bytearray(64), 0, 100, 0.5, 0, None, b"v", b"\x00"), TypeError),
    ((bytearray(64), 0, 100, 0, 0, None, b"v"), TypeError),
])
def test_bad_arguments_raise_and_write_nothing(args: tuple, error: type[Exception]) -> None:
    with pytest.raises(error):
        encode_record(*args)
    if isinstance(args[0], bytearray):
        assert args[0] == bytearray(64)


def test_a_refused_record_leaves_the_builder_as_it_was() -> None:
    b = MemoryRecordsBuilder(buffer=bytearray(4096), write_limit=4096)
    assert b.try_append(TS, b"k", b"v") == 0
    with pytest.raises(TypeError):
        b.try_append(TS + 1, b"k", "not bytes")  # type: ignore[arg-type]
    assert b.try_append(TS + 2, None, b"w") == 1
    assert [(r.offset, r.key, r.value) for r in RecordBatch(bytes(b.build())).records()] == [
        (0, b"k", b"v"), (1, None, b"w")]
