"""The fused consumer record decoder agrees with the generic record-layer decoder on any batch, and turns
malformed input into CorruptMessageError (never another exception). Every test runs twice: with the C decoder of
the per-record path (``strom/record/_fastdecode.c``, ``decode_records``; it must be built: these tests fail, not
skip, without it) and with the Python decoders an install without a compiler uses (the C decoder's own contract:
``test_record_decoder_c.py``)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.common.error_codes import CorruptMessageError
from strom.consumer.internals import record_decoder
from strom.consumer.internals.record_decoder import decode_consumer_records
from strom.record import CompressionType, MemoryRecordsBuilder, RecordBatch, _fastdecode
from strom.record.compression import decompress
from strom.record.header import HEADER_SIZE

from .helpers import compact

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

# STROM_HYPOTHESIS_EXAMPLES=2000 for a longer local run
SETTINGS = settings(max_examples=int(os.environ.get("STROM_HYPOTHESIS_EXAMPLES", "200")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

decode_records_c = _fastdecode.decode_records


@pytest.fixture(autouse=True, params=["c", "python"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    assert record_decoder._decode_records_c is decode_records_c  # built and wired in
    if request.param == "python":
        monkeypatch.setattr(record_decoder, "_decode_records_c", None)
    return request.param


maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
headers_st = st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=10))), max_size=3)
record_st = st.tuples(st.integers(-100_000, 100_000), maybe_bytes, maybe_bytes, headers_st)


def decode(data: bytes, codec: int = 0):
    rb = RecordBatch(data)
    h = rb.header
    block, start, end = data, HEADER_SIZE, len(data)
    if codec:
        block = decompress(CompressionType(codec), memoryview(data)[HEADER_SIZE:])
        start, end = 0, len(block)
    log_append = h.max_timestamp if rb.timestamp_type == 1 else None
    return decode_consumer_records(block, start, end, h.records_count, h.base_offset, h.base_timestamp,
                                   h.records_count == h.last_offset_delta + 1, "t", 3, int(rb.timestamp_type),
                                   7, log_append)


@SETTINGS
@given(st.lists(record_st, min_size=1, max_size=40), st.integers(0, 2**40), st.sampled_from([0, 1, 3, 4]),
       st.sets(st.integers(0, 39)), st.integers(0, 1))
def test_matches_generic_decoder(records, base_offset, codec, gaps, ts_type) -> None:
    b = MemoryRecordsBuilder(CompressionType(codec), base_offset=base_offset, timestamp_type=ts_type)
    for ts, key, value, headers in records:
        b.append(1_700_000_000_000 + ts, key, value, tuple(headers))
    data = b.build()
    skip = {base_offset + g for g in gaps if g < len(records) - 1}  # keep the last one: compaction keeps it
    if codec == 0 and ts_type == 0 and skip:  # the test's compaction helper writes CreateTime batches
        data = compact(data, skip)
    expected = RecordBatch(data).records()
    got = decode(data, codec)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == \
        [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in expected]
    assert all(r.topic == "t" and r.partition == 3 and r.leader_epoch == 7 and r.timestamp_type == ts_type
               for r in got)
    assert [(r.serialized_key_size, r.serialized_value_size) for r in got] == [
        (-1 if r.key is None else len(r.key), -1 if r.value is None else len(r.value)) for r in expected]


@SETTINGS
@given(st.lists(record_st, min_size=1, max_size=10), st.data())
def test_malformed_records_raise_corrupt_message(records, data) -> None:
    b = MemoryRecordsBuilder()
    for ts, key, value, headers in records:
        b.append(1_700_000_000_000 + ts, key, value, tuple(headers))
    raw = bytearray(b.build())
    body = len(raw) - HEADER_SIZE
    pos = HEADER_SIZE + data.draw(st.integers(0, body - 1))
    raw[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(HEADER_SIZE, len(raw)))
    rb = RecordBatch(bytes(raw))
    h = rb.header
    try:
        out = decode_consumer_records(bytes(raw[:cut]), HEADER_SIZE, cut, h.records_count, h.base_offset,
                                      h.base_timestamp, True, "t", 0, 0, None)
    except CorruptMessageError:
        return
    assert len(out) == h.records_count  # a byte change that keeps the structure valid decodes fully


@SETTINGS
@given(st.integers(1, 400), st.sampled_from([None, 0, 3, 200]), st.lists(st.sampled_from([0, 1, 50, 130]), min_size=1,
                                                                          max_size=3),
       st.integers(0, 3), st.data())
def test_runs_of_same_layout_records(n, key_size, value_sizes, ts_shape, data) -> None:
    """Long runs with few layouts: the strided fast path (run boundaries at timestamp and offset varint
    size changes, bisection to the end of a run) must agree with the generic decoder."""
    b = MemoryRecordsBuilder(base_offset=10)
    for i in range(n):
        ts = [0, i, -i, (i * 7919) % 200 - 100][ts_shape]
        size = value_sizes[data.draw(st.integers(0, len(value_sizes) - 1)) if len(value_sizes) > 1 else 0]
        key = None if key_size is None else bytes([i % 251]) * key_size
        b.append(1_700_000_000_000 + ts, key, bytes([i % 256]) * size)
    raw = b.build()
    expected = RecordBatch(raw).records()
    got = decode(raw)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in got] == \
        [(r.offset, r.timestamp, r.key, r.value) for r in expected]


HEADER_SETS = [(), (("trace-id", b"0123456789abcdef"),), (("a", b""), ("b", b"xy")), (("\u043a", b"\x00"),),
               (("", b""),), (("trace-id", b"fedcba9876543210"), ("content-type", b"json")),
               (("trace-ix", b"0123456789abcdef"),)]


@SETTINGS
@given(st.integers(1, 300), st.sampled_from([None, 3]), st.lists(st.integers(0, len(HEADER_SETS) - 1), min_size=1,
                                                                 max_size=3),
       st.sampled_from([1, 7, 100]), st.data())
def test_runs_of_records_with_headers(n, key_size, header_sets, switch_every, data) -> None:
    """Records with headers read through the fast path: runs of one header layout (the same keys, values of the
    same sizes), layouts changing every ``switch_every`` records (short runs: the per-record loop), agreeing
    with the generic decoder; none of these batches goes to the general decoder."""
    from strom.consumer.internals import record_decoder

    b = MemoryRecordsBuilder(base_offset=5)
    for i in range(n):
        headers = HEADER_SETS[header_sets[(i // switch_every) % len(header_sets)]]
        key = None if key_size is None else b"k%02d" % (i % 100)
        b.append(1_700_000_000_000 + i, key, b"v%d" % (i % 10), headers)
    raw = b.build()
    expected = RecordBatch(raw).records()
    general, record_decoder._decode_general = record_decoder._decode_general, None  # would raise TypeError
    try:
        got = decode(raw)
    finally:
        record_decoder._decode_general = general
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == \
        [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in expected]


def test_slices_of_records_with_headers() -> None:
    """Header tuples are made per slice from the runs' columns: any slice equals the same slice of the whole,
    across runs with and without headers and a per-record part (layouts switching every record)."""
    b = MemoryRecordsBuilder()
    for i in range(600):
        if i < 300:  # runs of 50: no headers, one header, two headers
            headers = HEADER_SETS[[0, 1, 2][(i // 50) % 3]]
        else:  # a new layout every record: the per-record loop
            headers = HEADER_SETS[[1, 0, 3, 5][i % 4]]
        b.append(1_700_000_000_000 + i, b"k", b"v%d" % i, headers)
    raw = b.build()
    got = decode(raw)
    whole = list(got)
    assert [r.headers for r in whole] == [r.headers for r in RecordBatch(raw).records()]
    for a, z in [(0, 600), (49, 51), (50, 100), (99, 301), (120, 130), (299, 300), (300, 301), (301, 599),
                 (450, 700), (599, 600)]:
        assert got[a:z] == whole[a:z]
    assert list(got.starting_at(275)) == whole[275:]


def test_a_header_key_that_is_not_utf8_is_decoded_as_kafkas_consumer_does() -> None:
    """U+FFFD for what does not decode (Java's ``new String(bytes, UTF_8)``), not an error that no later poll gets
    past; the C decoder does the same (not a fallback)."""
    b = MemoryRecordsBuilder()
    for _ in range(20):
        b.append(1_700_000_000_000, None, b"v", (("key", b"x"),))
    raw = bytearray(b.build())
    at = bytes(raw).rindex(b"key")
    raw[at] = 0xFF
    got = list(decode(bytes(raw)))
    assert [r.headers for r in got] == [(("key", b"x"),)] * 19 + [(("\ufffdey", b"x"),)]


def test_more_than_8192_records_in_one_batch() -> None:
    b = MemoryRecordsBuilder()
    for i in range(9000):
        b.append(1_700_000_000_000 + i // 10, None, b"v%d" % (i % 10))
    raw = b.build()
    got = decode(raw)
    assert [(r.offset, r.timestamp, r.value) for r in got] == [
        (r.offset, r.timestamp, r.value) for r in RecordBatch(raw).records()]


def test_null_value_in_a_run_is_kept_null() -> None:
    b = MemoryRecordsBuilder()
    for i in range(100):
        b.append(1_700_000_000_000, None, None if i == 70 else b"x")
    got = decode(b.build())
    assert got[70].value is None and got[70].serialized_value_size == -1 and got[69].value == b"x"


def _keyed_batch(n: int, base_offset: int = 100, log_append: bool = False) -> bytes:
    b = MemoryRecordsBuilder(base_offset=base_offset, timestamp_type=1 if log_append else 0)
    for i in range(n):
        b.append(1_700_000_000_000 + i, b"k%d" % (i % 7), b"v%d" % i)
    return bytes(b.build())


@pytest.mark.parametrize("log_append", [False, True])
def test_batch_records_behave_as_the_list_of_records(log_append: bool) -> None:
    data = _keyed_batch(300, log_append=log_append)
    got = decode(data)
    want = [(r.offset, r.timestamp, r.key, r.value) for r in RecordBatch(data).records()]
    as_list = list(got)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in as_list] == want
    assert len(got) == 300 and bool(got)
    for a, b in [(0, 500), (10, 20), (-5, None), (None, -290), (299, 300), (300, 400), (20, 10)]:
        assert got[a:b] == as_list[a:b]
    assert got[::7] == as_list[::7]
    assert got[0] == as_list[0] and got[-1] == as_list[-1] and got[123] == as_list[123]
    with pytest.raises(IndexError):
        got[300]
    later = got.starting_at(250)
    assert list(later) == as_list[150:] and later[0].offset == 250
    assert list(got.starting_at(0)) == as_list and list(got.starting_at(10_000)) == []


def test_records_of_a_batch_are_made_per_slice() -> None:
    """A decoded batch holds fields, not ConsumerRecord objects: they are made when a slice is taken (a poll),
    so they die with the poll's list instead of living as long as the batch (and aging in the collector)."""
    import gc

    from strom.consumer.consumer_records import ConsumerRecord

    def alive() -> int:
        return sum(type(o) is ConsumerRecord for o in gc.get_objects())

    data = _keyed_batch(5000)
    gc.collect()  # no garbage records of other tests left to vanish mid-count
    gc.disable()
    try:
        before = alive()
        got = decode(data)
        decoded = alive()
        polled = got[0:500]
        taken = alive()
        del polled
        released = alive()
    finally:
        gc.enable()
    assert (decoded, taken, released) == (before, before + 500, before)

