"""The columnar decoder (``KafkaConsumer.poll_arrow``) yields the records the record-by-record decoder yields,
for every batch shape: uniform runs (one- to three-byte offset deltas, two-byte timestamp deltas), keys,
varying sizes, null keys and values, headers, LogAppendTime, compaction gaps; every shape (headers up to 63 per record) through
the vectorized path (the record decoder is refused there); and rejects corrupt blocks as the record decoder
does (a byte changed anywhere gives the same records or the same error)."""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.common.error_codes import CorruptMessageError
from strom.consumer.internals import arrow_decoder
from strom.consumer.internals.arrow_decoder import decode_batch_columns, records_to_columns
from strom.record.batch import RecordBatch, decode_records
from strom.record.builder import MemoryRecordsBuilder
from strom.record.header import HEADER_SIZE
from strom.storage.cleaner_records import build_retained_batch

pytestmark = pytest.mark.unit

TS = 1_700_000_000_000


@pytest.fixture(autouse=True, scope="module", params=["C", "numpy"])
def decoder_path(request: pytest.FixtureRequest) -> object:
    """Every test of this module runs twice: through the C accelerator (``strom/record/_fastdecode.c``, which
    ``pip install`` builds where a C compiler is found, as ``make test`` ensures), and through the numpy path
    alone (what an install without a compiler runs)."""
    if request.param == "C":
        assert arrow_decoder._fastdecode is not None, "strom.record._fastdecode is not built (pip install -e .)"
        yield request.param
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(arrow_decoder, "_fastdecode", None)
        yield request.param


def _batch(kind: str, n: int, rng: random.Random) -> bytes:
    b = MemoryRecordsBuilder()
    for i in range(n):
        if kind == "uniform":
            b.append(TS + rng.choice([0, 0, 1, 100, 70]), None, b"v" * 50)
        elif kind == "keyed":
            b.append(TS + i // 100, b"k%05d" % (i % 7), b"v" * 30)
        elif kind == "vary":
            b.append(TS, None, os.urandom(rng.randint(0, 200)))
        elif kind == "nulls":
            b.append(TS, None if i % 3 else b"k", None if i % 5 == 0 else b"x")
        elif kind == "headers":
            b.append(TS, b"k", b"x", [("h", b"1")] if i % 2 else [])
        else:
            b.append(TS + rng.randint(0, 10**7), b"kk", b"v" * 3000)
    return bytes(b.build())


@pytest.mark.parametrize("kind", ["uniform", "keyed", "vary", "nulls", "headers", "big"])
@pytest.mark.parametrize("n", [1, 63, 64, 65, 700, 9000])
def test_columns_equal_records(kind: str, n: int) -> None:
    rng = random.Random(n)
    data = _batch(kind, n if kind != "big" else min(n, 700), rng)
    h = RecordBatch(data).header
    count = h.records_count
    want = decode_records(data, HEADER_SIZE, len(data), count, 1000, h.base_timestamp)
    got = decode_batch_columns(data, HEADER_SIZE, len(data), count, 1000, h.base_timestamp, None, 1)
    assert got.column("offset").to_pylist() == [r.offset for r in want]
    assert got.column("timestamp").to_pylist() == [r.timestamp for r in want]
    assert got.column("timestamp_type").to_pylist() == [1] * count
    assert got.column("key").to_pylist() == [r.key for r in want]
    assert got.column("value").to_pylist() == [r.value for r in want]
    assert [[(x["key"], x["value"]) for x in hs] for hs in got.column("headers").to_pylist()] == \
        [list(r.headers) for r in want]


def test_log_append_time_replaces_timestamps() -> None:
    data = _batch("uniform", 100, random.Random(1))
    h = RecordBatch(data).header
    got = decode_batch_columns(data, HEADER_SIZE, len(data), 100, 0, h.base_timestamp, 42)
    assert got.column("timestamp").to_pylist() == [42] * 100


@pytest.mark.parametrize("kind", ["uniform", "vary", "headers"])
def test_truncated_or_overlong_block_is_corrupt(kind: str) -> None:
    data = _batch(kind, 200, random.Random(3))
    h = RecordBatch(data).header
    with pytest.raises(CorruptMessageError):
        decode_batch_columns(data + b"\x00\x00", HEADER_SIZE, len(data) + 2, 200, 0, h.base_timestamp)
    with pytest.raises(CorruptMessageError):
        decode_batch_columns(data[:-3], HEADER_SIZE, len(data) - 3, 200, 0, h.base_timestamp)


def _shaped(kind: str, n: int) -> bytes:
    """Headerless batches of every shape the vectorized path reads."""
    rng = random.Random(n)
    b = MemoryRecordsBuilder()
    for i in range(n):
        if kind == "few-sizes":  # three value sizes, keys of 2-4 bytes changing every few records
            b.append(TS, b"k%d" % (i % 1000), b"v" * (10, 100, 1000)[i // 7 % 3])
        elif kind == "big-values":  # three-byte length prefixes
            b.append(TS + i, b"key", os.urandom(20_000 + i % 3))
        elif kind == "long-deltas":  # varlong timestamp deltas of up to nine bytes, negative too
            b.append(rng.choice([TS - 10**6, TS + 10**9, TS + 2**40, TS]), b"k", b"v")
        elif kind == "empty":  # empty (not null) keys and values
            b.append(TS, b"", b"" if i % 2 else None)
        elif kind == "null-values":
            b.append(TS + i // 10, b"k%d" % i, None)
        elif kind == "a-header":  # what tracing sets on every record
            b.append(TS + i, b"k%d" % (i % 1000), b"v" * 20, [("trace-id", os.urandom(16))])
        elif kind == "mixed-headers":  # 0 to 3 headers per record
            b.append(TS, b"k", b"v", [("a", b"1"), ("bb", None), ("", b"xyz" * (i % 5))][:i % 4])
        elif kind == "two-headers":  # values of varying sizes, null, empty; keys that change
            b.append(TS, None, b"v", [(("ct", "content-type", "\u043a", "")[i % 4], b"json" * (i % 3)),
                                      ("n", None if i % 5 == 0 else b"" if i % 5 == 1 else b"x" * (i % 40))])
        else:
            return _batch(kind, n, rng)
    return bytes(b.build())


def _with_gaps(data: bytes) -> bytes:
    """The batch with every third record from the second on removed, as the log cleaner writes it (offset deltas
    with gaps)."""
    h = RecordBatch(data).header
    kept = [r for r in decode_records(data, HEADER_SIZE, len(data), h.records_count, h.base_offset,
                                      h.base_timestamp) if r.offset % 3 != 1]
    return build_retained_batch(h, kept, None)


def _expected(data: bytes, log_append_time: int | None = None) -> pa.RecordBatch:
    h = RecordBatch(data).header
    return records_to_columns(decode_records(data, HEADER_SIZE, len(data), h.records_count, 1000,
                                             h.base_timestamp, log_append_time), 0)


@pytest.mark.parametrize("kind", ["uniform", "keyed", "vary", "nulls", "big", "few-sizes", "big-values",
                                  "long-deltas", "empty", "null-values", "gaps", "a-header", "two-headers",
                                  "mixed-headers", "headers"])
@pytest.mark.parametrize("n", [1, 2, 65, 700, 9000])
@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_batches_take_the_vectorized_path(kind: str, n: int, wrap: type,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    if kind == "big-values":
        n = min(n, 65)
    data = _with_gaps(_shaped("keyed", n)) if kind == "gaps" else _shaped(kind, n)
    h = RecordBatch(data).header
    want = _expected(data)

    def refuse(*args: object) -> None:
        raise AssertionError("the record decoder was used")

    monkeypatch.setattr(arrow_decoder, "decode_records", refuse)
    got = decode_batch_columns(wrap(data), HEADER_SIZE, len(data), h.records_count, 1000, h.base_timestamp)
    assert got.equals(want)
    got.validate(full=True)


_record = st.tuples(st.integers(-2**40, 2**40), st.none() | st.binary(max_size=70),
                    st.none() | st.binary(max_size=300))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_record, min_size=1, max_size=300), st.booleans(), st.data())
def test_columns_equal_records_for_any_batch(records: list, log_append: bool, draw: st.DataObject) -> None:
    b = MemoryRecordsBuilder()
    for delta, key, value in records:
        b.append(TS + delta, key, value)
    data = bytes(b.build())
    if draw.draw(st.booleans()):
        data = _with_gaps(data)
    h = RecordBatch(data).header
    log_append_time = TS if log_append else None
    got = decode_batch_columns(data, HEADER_SIZE, len(data), h.records_count, 1000, h.base_timestamp,
                               log_append_time)
    assert got.equals(_expected(data, log_append_time))


_header = st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=20))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_record, st.lists(_header, max_size=3)), min_size=1, max_size=200), st.integers(0, 3),
       st.booleans())
def test_columns_equal_records_for_any_batch_with_headers(records: list, same_count: int, uniform: bool) -> None:
    """Any headers: the same number on every record (``uniform``) or as drawn (counts that vary)."""
    b = MemoryRecordsBuilder()
    for (delta, key, value), headers in records:
        if uniform:
            headers = (headers * 3 + [("h", b"")] * 3)[:same_count]
        b.append(TS + delta, key, value, headers)
    data = bytes(b.build())
    h = RecordBatch(data).header
    got = decode_batch_columns(data, HEADER_SIZE, len(data), h.records_count, 1000, h.base_timestamp)
    assert got.equals(_expected(data))
    got.validate(full=True)


def test_a_header_key_that_is_not_utf8_is_decoded_as_kafkas_consumer_does() -> None:
    """What does not decode becomes U+FFFD (Java's ``new String(bytes, UTF_8)``): a record that a Java consumer
    reads is never a batch strom's consumer cannot get past."""
    data = bytearray(_shaped("a-header", 50))
    at = bytes(data).rindex(b"trace-id")
    data[at] = 0xFF
    h = RecordBatch(bytes(data)).header
    got = decode_batch_columns(bytes(data), HEADER_SIZE, len(data), h.records_count, 1000, h.base_timestamp)
    keys = [[kv["key"] for kv in hs] for hs in got.column("headers").to_pylist()]
    assert keys[-1] == ["\ufffdrace-id"] and keys[-2] == ["trace-id"]
    assert got.column("value").to_pylist() == [r.value for r in RecordBatch(bytes(data)).records()]


@pytest.mark.parametrize("record", [0, 3, 5])
def test_a_header_length_pointing_past_the_batch_is_corrupt(record: int) -> None:
    """A found example: a header value length made a two-byte varint (a large length) must give the record
    decoder's error, not a numpy error from copying a range past the buffer."""
    data = bytearray(_shaped("a-header", 6))
    at = -1
    for _ in range(6 - record):
        at = bytes(data).rindex(b"trace-id", 0, at if at >= 0 else len(data))
    data[at + len(b"trace-id")] = 0xD6
    h = RecordBatch(bytes(data)).header
    with pytest.raises(CorruptMessageError):
        decode_records(bytes(data), HEADER_SIZE, len(data), h.records_count, 1000, h.base_timestamp)
    with pytest.raises(CorruptMessageError):
        decode_batch_columns(bytes(data), HEADER_SIZE, len(data), h.records_count, 1000, h.base_timestamp)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(["keyed", "vary", "nulls", "few-sizes", "long-deltas", "a-header", "two-headers",
                        "mixed-headers"]),
       st.integers(1, 80), st.data())
def test_a_changed_byte_gives_what_the_record_decoder_gives(kind: str, n: int, draw: st.DataObject) -> None:
    data = bytearray(_shaped(kind, n))
    h = RecordBatch(bytes(data)).header
    at = draw.draw(st.integers(HEADER_SIZE, len(data) - 1))
    data[at] = draw.draw(st.integers(0, 255))
    data = bytes(data)
    try:
        want = records_to_columns(decode_records(data, HEADER_SIZE, len(data), h.records_count, 1000,
                                                 h.base_timestamp), 0)
    except CorruptMessageError:
        with pytest.raises(CorruptMessageError):
            decode_batch_columns(data, HEADER_SIZE, len(data), h.records_count, 1000, h.base_timestamp)
        return
    assert decode_batch_columns(data, HEADER_SIZE, len(data), h.records_count, 1000, h.base_timestamp).equals(want)


def _overlong(data: bytes, record: int, field: str) -> bytes:
    """``data`` with one record's length prefix or offset delta written in one byte more than needed (a valid
    varint no Kafka writer produces)."""
    h = RecordBatch(data).header
    p = HEADER_SIZE
    out = bytearray(data[:HEADER_SIZE])
    for i in range(h.records_count):
        length = data[p] >> 1  # one-byte prefixes in these batches
        body = bytearray(data[p + 1:p + 1 + length])
        if i == record and field == "offset":
            delta = body[2]  # attributes, timestamp delta (one byte), offset delta (one byte)
            body[2:3] = bytes([delta | 0x80, 0])
        if i == record and field == "delta-high-byte":  # a two-byte offset delta's second byte, one higher
            body[3] += 1
        prefix = bytes([len(body) << 1])
        if i == record and field == "length":
            prefix = bytes([(len(body) << 1) & 0x7F | 0x80, (len(body) << 1) >> 7])
        out += prefix + body
        p += 1 + length
    return bytes(out)


@pytest.mark.parametrize("field", ["length", "offset", "delta-high-byte"])
def test_unusual_varints_give_what_the_record_decoder_gives(field: str) -> None:
    b = MemoryRecordsBuilder()
    for i in range(100):
        b.append(TS, b"k%d" % (i % 10), b"value")
    record = 70 if field == "delta-high-byte" else 7  # (a two-byte offset delta; one-byte ones)
    data = _overlong(bytes(b.build()), record, field)
    h = RecordBatch(data).header
    got = decode_batch_columns(data, HEADER_SIZE, len(data), h.records_count, 1000, h.base_timestamp)
    assert got.equals(_expected(data))
    want = list(range(1000, 1100))
    if field == "delta-high-byte":
        want[70] += 64  # the second byte holds bits 7-13 of the zig-zag value: +128, i.e. +64 as a delta
    assert got.column("offset").to_pylist() == want


def test_an_overlong_prefix_that_also_parses_shifted_is_read_as_the_record_decoder_reads_it() -> None:
    """Found by the changed-byte test: a record's length 6 written as two bytes (0x8c 0x00). Read with a
    one-byte prefix (the size the record's length implies), the record's fields also parse, one byte off, to
    the same end: the prefix sizes must come from the prefixes themselves."""
    data = bytearray(_shaped("nulls", 1))
    data[HEADER_SIZE] = 0x8C
    data = bytes(data)
    h = RecordBatch(data).header
    got = decode_batch_columns(data, HEADER_SIZE, len(data), h.records_count, 1000, h.base_timestamp)
    assert got.equals(_expected(data))


@pytest.mark.parametrize("whole", [True, False])
def test_to_table_labels_every_row_with_its_topic_partition(monkeypatch: pytest.MonkeyPatch, whole: bool) -> None:
    """Each partition's topic and partition columns are made once and sliced per chunk (or, past the int32
    string-offset limit, made per chunk): every row keeps its own topic-partition and columns."""
    from strom.common.structs import TopicPartition

    if not whole:
        monkeypatch.setattr(arrow_decoder, "_MAX_STRING_BYTES", 10)
    fetched = {}
    expected = []
    for topic, partition, sizes in (("orders", 3, [5, 1, 7]), ("ü-topic", 0, [2]), ("orders", 11, [4, 3])):
        chunks = []
        for j, size in enumerate(sizes):
            records = [(i, b"v-%s-%d-%d-%d" % (topic.encode(), partition, j, i)) for i in range(size)]
            builder = MemoryRecordsBuilder()
            for i, value in records:
                builder.append(1_700_000_000_000 + i, None, value)
            data = bytes(builder.build())
            chunks.append(decode_batch_columns(data, HEADER_SIZE, len(data), size, 100 * j, 1_700_000_000_000))
            expected += [(topic, partition, 100 * j + i, value) for i, value in records]
        fetched[TopicPartition(topic, partition)] = chunks
    table = arrow_decoder.to_table(fetched)
    assert table.schema == arrow_decoder.TABLE_SCHEMA
    assert table.num_rows == len(expected)
    got = list(zip(table.column("topic").to_pylist(), table.column("partition").to_pylist(),
                   table.column("offset").to_pylist(), table.column("value").to_pylist(), strict=True))
    assert got == expected
    for batch in table.to_batches():
        batch.validate(full=True)


def test_partition_columns_are_kept_from_poll_to_poll_within_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The topic and partition columns of a partition are built once, grown when a longer chunk comes, and the
    oldest partitions' are dropped past the cache's byte bound; every table still labels its rows right."""
    from strom.common.structs import TopicPartition

    monkeypatch.setattr(arrow_decoder, "_CONSTANT_COLUMNS", {})
    monkeypatch.setattr(arrow_decoder, "_constant_columns_bytes", 0)
    monkeypatch.setattr(arrow_decoder, "_CONSTANT_COLUMNS_MAX_BYTES", 100_000)
    built: list[tuple[bytes, int, int]] = []
    build = arrow_decoder._partition_columns

    def counting(topic: bytes, partition: int, n: int) -> tuple[pa.Array, pa.Array]:
        built.append((topic, partition, n))
        return build(topic, partition, n)

    monkeypatch.setattr(arrow_decoder, "_partition_columns", counting)

    def poll(topic: str, partition: int, n: int) -> None:
        b = MemoryRecordsBuilder()
        for i in range(n):
            b.append(TS, None, b"v%d" % i)
        data = bytes(b.build())
        table = arrow_decoder.to_table({TopicPartition(topic, partition): [
            decode_batch_columns(data, HEADER_SIZE, len(data), n, 0, TS)]})
        assert table.column("topic").to_pylist() == [topic] * n
        assert table.column("partition").to_pylist() == [partition] * n
        assert table.column("value").to_pylist() == [b"v%d" % i for i in range(n)]

    poll("t", 0, 500)
    poll("t", 0, 1000)
    poll("t", 0, 7)
    assert built == [(b"t", 0, 1024)]  # one build for all three polls
    poll("t", 0, 1500)
    assert built[-1] == (b"t", 0, 2048)  # grown: twice the rows
    poll("t", 1, 10)
    poll("u", 0, 10)
    assert len(built) == 4
    sizes = sum(len(topics) * (len(topic) + 8) for (topic, _), (topics, _p) in arrow_decoder._CONSTANT_COLUMNS.items())
    assert sizes == arrow_decoder._constant_columns_bytes <= 100_000
    for partition in range(2, 12):  # ~9 KB each: the oldest go
        poll("t", partition, 1000)
    assert (b"t", 0) not in arrow_decoder._CONSTANT_COLUMNS
    assert arrow_decoder._constant_columns_bytes <= 100_000
    poll("t", 0, 20_000)  # too large to keep (over a quarter of the bound): built per poll
    poll("t", 0, 20_000)
    assert built[-2:] == [(b"t", 0, 20_000)] * 2


def _blocks(batches: list[bytes], log_append: bool = False) -> tuple[bytes, list]:
    """The batches one after another (a 7-byte gap between them, as other bytes of a response) and their blocks."""
    data = b""
    blocks = []
    for i, one in enumerate(batches):
        at = len(data)
        h = RecordBatch(one).header
        blocks.append((at + HEADER_SIZE, at + len(one), h.records_count, 1000 * (i + 1), h.base_timestamp,
                       TS + i if log_append else None))
        data += one + b"\x00" * 7
    return data, blocks


def _expected_blocks(data: bytes, blocks: list) -> pa.Table:
    return pa.Table.from_batches([records_to_columns(decode_records(data, *b), 0) for b in blocks],
                                 schema=arrow_decoder.BATCH_SCHEMA)


@pytest.mark.parametrize("kinds", [("uniform", "keyed"), ("headers", "headers", "nulls"), ("vary", "gaps", "big"),
                                   ("a-header", "mixed-headers", "two-headers", "empty"), ("keyed",) * 20])
@pytest.mark.parametrize("n", [1, 65, 700, 9000])
def test_blocks_decoded_together_equal_each_batch(kinds: tuple, n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Several batches in one vectorized pass: the rows of each batch decoded alone, in order (offset deltas
    restart per batch, with or without gaps; timestamps from each batch's base)."""
    data, blocks = _blocks([_shaped(kind, n) for kind in kinds])

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("the record decoder was used")

    want = _expected_blocks(data, blocks)
    monkeypatch.setattr(arrow_decoder, "decode_records", refuse)
    got = arrow_decoder.decode_blocks_columns(data, blocks)
    assert got is not None and pa.Table.from_batches([got]).equals(want)
    got.validate(full=True)


def test_blocks_with_log_append_time_take_each_batch_time() -> None:
    data, blocks = _blocks([_shaped("keyed", 70), _shaped("uniform", 3)], log_append=True)
    got = arrow_decoder.decode_blocks_columns(data, blocks, 1)
    assert got.column("timestamp").to_pylist() == [TS] * 70 + [TS + 1] * 3
    assert got.column("timestamp_type").to_pylist() == [1] * 73


def test_blocks_the_vectorized_path_cannot_read_give_none() -> None:
    good = _shaped("keyed", 70)
    bad = bytearray(_shaped("keyed", 70))
    bad[HEADER_SIZE] = 0x81  # the first record's length prefix: a negative varint
    data, blocks = _blocks([good, bytes(bad)])
    assert arrow_decoder.decode_blocks_columns(data, blocks) is None
    data, blocks = _blocks([good, good])
    start, end, count, *rest = blocks[1]
    assert arrow_decoder.decode_blocks_columns(data, [blocks[0], (start, end - 1, count, *rest)]) is None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.lists(_record, min_size=1, max_size=120), st.booleans()), min_size=2, max_size=6))
def test_any_blocks_decoded_together_equal_each_batch(batches: list) -> None:
    built = []
    for records, gaps in batches:
        b = MemoryRecordsBuilder()
        for delta, key, value in records:
            b.append(TS + delta, key, value)
        one = bytes(b.build())
        built.append(_with_gaps(one) if gaps and len(records) > 1 else one)
    data, blocks = _blocks(built)
    got = arrow_decoder.decode_blocks_columns(data, blocks)
    want = _expected_blocks(data, blocks)
    if got is not None:  # (None: the caller decodes batch by batch, as for a varint the vectorized path skips)
        assert pa.Table.from_batches([got]).equals(want)
