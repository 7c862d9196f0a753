"""The C accelerator of the columnar decode (``strom/record/_fastdecode.c``): it reads every well-formed batch
(whatever its shape: headers of any count, null keys, values and header values, compaction gaps, several
batches at once, LogAppendTime) into exactly the columns the record decoder's records make, and refuses (``None``:
the caller falls back) whatever the record decoder rejects. ``tests/unit/consumer/test_arrow_decoder.py`` runs the
decoder's own tests through it as well."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.common.error_codes import CorruptMessageError
from strom.consumer.internals import arrow_decoder
from strom.consumer.internals.arrow_decoder import records_to_columns
from strom.record import _fastdecode
from strom.record.batch import RecordBatch, decode_records
from strom.record.builder import MemoryRecordsBuilder
from strom.record.header import HEADER_SIZE

pytestmark = pytest.mark.unit

TS = 1_700_000_000_000

_header = st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=40))
_record = st.tuples(st.integers(-2**40, 2**40), st.none() | st.binary(max_size=70),
                    st.none() | st.binary(max_size=300), st.lists(_header, max_size=4))


def _build(records: list) -> bytes:
    b = MemoryRecordsBuilder()
    for delta, key, value, headers in records:
        b.append(TS + delta, key, value, headers)
    return bytes(b.build())


def _blocks(batches: list[bytes], log_append: bool = False) -> tuple[bytes, list]:
    """The batches one after another, and their record blocks (base offsets 1000 apart)."""
    data, blocks = b"", []
    for i, one in enumerate(batches):
        h = RecordBatch(one).header
        blocks.append((len(data) + HEADER_SIZE, len(data) + len(one), h.records_count, 1000 * i, h.base_timestamp,
                       h.max_timestamp if log_append else None))
        data += one
    return data, blocks


def _want(data: bytes, blocks: list) -> pa.Table:
    """What the record decoder's records make, batch by batch."""
    return pa.Table.from_batches([records_to_columns(decode_records(data, *block), 0) for block in blocks])


def _native(data: bytes | bytearray | memoryview, blocks: list) -> pa.Table | None:
    got = arrow_decoder._decode_native(data, blocks, 0)
    if got is not None:
        got.validate(full=True)
    return None if got is None else pa.Table.from_batches([got])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(_record, min_size=1, max_size=80), min_size=1, max_size=4), st.booleans(),
       st.sampled_from([bytes, bytearray, memoryview]))
def test_any_well_formed_batches_are_read_as_the_record_decoder_reads_them(batches: list, log_append: bool,
                                                                          wrap: type) -> None:
    data, blocks = _blocks([_build(records) for records in batches], log_append)
    got = _native(wrap(data), blocks)
    assert got is not None
    assert got.equals(_want(data, blocks))


def test_a_hundred_headers_per_record_and_empty_and_null_fields() -> None:
    """Shapes the numpy path hands to the record decoder (over 63 headers) or that have no bytes at all."""
    many = [(f"h{i}", None if i % 7 == 0 else b"v" * (i % 5)) for i in range(100)]
    records = [(0, b"", b"", many), (1, None, None, []), (2, b"k", None, [("", b"")]), (3, None, b"", many[:64])]
    data, blocks = _blocks([_build(records)])
    got = _native(data, blocks)
    assert got is not None and got.equals(_want(data, blocks))
    assert got.column("key").to_pylist() == [b"", None, b"k", None]
    assert got.column("value").null_count == 2 and got.column("key").null_count == 2
    assert len(got.column("headers")[0].as_py()) == 100


def test_nine_thousand_records_and_big_values() -> None:
    records = [(i // 100, b"k%d" % (i % 1000), os.urandom(100), []) for i in range(9000)]
    big = [(i, b"key", os.urandom(20_000 + i), [("trace-id", os.urandom(16))]) for i in range(40)]
    data, blocks = _blocks([_build(records), _build(big)])
    got = _native(data, blocks)
    assert got is not None and got.equals(_want(data, blocks))
    assert got.column("offset").to_pylist()[8999:9001] == [8999, 1000]  # each batch from its own base offset


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_record, min_size=1, max_size=40), st.data())
def test_a_changed_byte_is_refused_or_read_as_the_record_decoder_reads_it(records: list, draw: st.DataObject) -> None:
    data = bytearray(_build(records))
    at = draw.draw(st.integers(HEADER_SIZE, len(data) - 1))
    data[at] = draw.draw(st.integers(0, 255))
    data = bytes(data)
    h = RecordBatch(data).header
    blocks = [(HEADER_SIZE, len(data), h.records_count, 0, h.base_timestamp, None)]
    try:
        want = _want(data, blocks)
    except CorruptMessageError:
        assert _native(data, blocks) is None
        return
    got = _native(data, blocks)
    assert got is None or got.equals(want)


@pytest.mark.parametrize("cut", ["short", "long", "count+1", "count-1", "past-the-data", "count-absurd"])
def test_blocks_that_do_not_add_up_are_refused(cut: str) -> None:
    data = _build([(i, b"k", b"v" * i, [("h", b"x")]) for i in range(20)])
    block = [HEADER_SIZE, len(data), 20, 0, TS, None]
    if cut == "short":
        block[1] -= 1
    elif cut == "long":
        data += b"\x00"
        block[1] += 1
    elif cut == "count+1":
        block[2] += 1
    elif cut == "count-1":
        block[2] -= 1
    elif cut == "count-absurd":  # a corrupt header's count: refused before the buffers for it are asked for
        block[2] = 2**31 - 2
    else:
        block[1] += 10
    asked: list[int] = []

    def allocate(n: int) -> pa.Buffer:
        asked.append(n)
        return pa.allocate_buffer(n)

    assert _fastdecode.decode_blocks(data, [tuple(block)], allocate) is None
    assert max(asked, default=0) < 8 * 64  # at most the offsets and timestamps of the 20 (or 21) records


def test_a_header_key_that_is_not_utf8_is_refused() -> None:
    data = bytearray(_build([(0, b"k", b"v", [("trace-id", b"1")])]))
    data[bytes(data).index(b"trace-id")] = 0xFF
    assert _native(bytes(data), _blocks([bytes(data)])[1]) is None


def test_bad_arguments_raise() -> None:
    data = _build([(0, b"k", b"v", [])])
    block = (HEADER_SIZE, len(data), 1, 0, TS, None)
    with pytest.raises(TypeError):
        _fastdecode.decode_blocks(data, [block[:3]], pa.allocate_buffer)
    with pytest.raises(TypeError):
        _fastdecode.decode_blocks("not bytes", [block], pa.allocate_buffer)
    with pytest.raises(TypeError):
        _fastdecode.decode_blocks(data, [(*block[:5], "late")], pa.allocate_buffer)
    with pytest.raises(ValueError, match="smaller than n bytes"):
        _fastdecode.decode_blocks(data, [block], lambda n: bytearray(max(n - 1, 0)))
    with pytest.raises(BufferError):
        _fastdecode.decode_blocks(data, [block], lambda n: b"\x00" * n)  # not writable

    def fail(n: int) -> None:
        raise MemoryError("no room")

    with pytest.raises(MemoryError, match="no room"):
        _fastdecode.decode_blocks(data, [block], fail)
    parts = _fastdecode.decode_blocks(data, [block], bytearray)  # any writable buffer will do
    assert parts is not None and parts[0] == 1 and bytes(parts[4]) == b"k" and bytes(parts[7]) == b"v"


@pytest.mark.parametrize("extra", [b"\x00", b"\x00\x00\x00"])
def test_a_record_longer_than_its_fields_is_refused(extra: bytes) -> None:
    """A length prefix that covers bytes after the last header (the batch's lengths still add up)."""
    data = _build([(0, b"k", b"v" * 10, []), (1, b"k", b"v", [("h", b"x")])])
    h = RecordBatch(data).header
    first = data[HEADER_SIZE] >> 1  # one-byte prefixes here
    body = data[HEADER_SIZE + 1:HEADER_SIZE + 1 + first]
    changed = (data[:HEADER_SIZE] + bytes([(first + len(extra)) << 1]) + body + extra
               + data[HEADER_SIZE + 1 + first:])
    blocks = [(HEADER_SIZE, len(changed), h.records_count, 0, h.base_timestamp, None)]
    with pytest.raises(CorruptMessageError):
        decode_records(changed, *blocks[0])
    assert _native(changed, blocks) is None
