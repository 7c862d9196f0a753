"""The C decoder of the consumer's per-record path (``strom/record/_fastdecode.c``, ``decode_records``): which
batches it takes (and then decodes as the generic record decoder does), how it groups headers into runs, and
that it declines (returns None, so the Python decoders run and report corruption) whatever does not add up. It
must be built: these tests fail, not skip, without it."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.common.error_codes import CorruptMessageError
from strom.consumer.internals.record_decoder import decode_consumer_records
from strom.consumer.internals.record_runs import HeaderColumns
from strom.record import MemoryRecordsBuilder, RecordBatch, _fastdecode
from strom.record.header import HEADER_SIZE

from .helpers import compact

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

SETTINGS = settings(max_examples=int(os.environ.get("STROM_HYPOTHESIS_EXAMPLES", "200")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

decode_records_c = _fastdecode.decode_records
maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))

c_headers_st = st.lists(st.tuples(st.sampled_from(["", "trace-id", "\u043a\u043b\u044e\u0447", "k" * 70]),
                                  st.one_of(st.none(), st.binary(max_size=140))), max_size=3)
c_record_st = st.tuples(st.integers(-2**40, 2**40), maybe_bytes, maybe_bytes,
                        st.one_of(c_headers_st, st.sampled_from([(("trace-id", b"0123456789abcdef"),)])))


@SETTINGS
@given(st.lists(c_record_st, min_size=1, max_size=60), st.sampled_from(["some", "all", "none"]),
       st.sampled_from(["some", "all"]))
def test_the_c_decoder_takes_the_shapes_it_promises_and_declines_the_rest(records, keys, values) -> None:
    """Keys in all records or in none, every value non-null: decoded, as the generic decoder decodes them
    (headers of any count, null header values, multi-byte varints, header runs); any other shape: None."""
    b = MemoryRecordsBuilder(base_offset=1000)
    for i, (ts, key, value, headers) in enumerate(records):
        key = key if keys == "some" else None if keys == "none" else (key or b"k%d" % i)
        value = value if values == "some" else (value or b"")
        b.append(1_700_000_000_000 + ts, key, value, tuple(headers))
    data = bytes(b.build())
    expected = RecordBatch(data).records()
    got = decode_records_c(data, HEADER_SIZE, len(data), len(records), RecordBatch(data).header.base_timestamp)
    uniform_keys = len({r.key is None for r in expected}) == 1
    if not uniform_keys or any(r.value is None for r in expected):
        assert got is None
        return
    assert got is not None
    tss, got_keys, got_values, runs, end = got
    assert end == len(data)
    assert tss == [r.timestamp for r in expected]
    assert got_keys == (None if expected[0].key is None else [r.key for r in expected])
    assert got_values == [r.value for r in expected]
    n = len(expected)
    headers = [()] * n if runs is None else HeaderColumns.of_runs(runs).slice(0, n)
    assert headers == [r.headers for r in expected]
    if runs is not None:  # runs are in order, disjoint, each of records that have headers, and maximal
        assert all(a < z for a, z, _, _ in runs)
        assert all(z <= a2 for (_, z, _, _), (a2, _, _, _) in zip(runs, runs[1:], strict=False))
        assert all(expected[i].headers for a, z, _, _ in runs for i in range(a, z))
        for (_, z, k1, _), (a2, _, k2, _) in zip(runs, runs[1:], strict=False):
            assert z < a2 or k1 != k2


def test_the_c_decoder_opens_a_header_run_where_the_keys_change() -> None:
    b = MemoryRecordsBuilder()
    shapes = [(("a", b"1"),), (("a", b"22"),), (), (("b", b"3"), ("a", None)), (("b", b""), ("a", b"4")),
              (("a", b"5"),), (("a", b"6"), ("a", b"7"))]
    for i, headers in enumerate(shapes):
        b.append(1_700_000_000_000, None, b"v%d" % i, headers)
    data = bytes(b.build())
    *_, runs, end = decode_records_c(data, HEADER_SIZE, len(data), len(shapes), 1_700_000_000_000)
    assert runs == [(0, 2, ("a",), [[b"1", b"22"]]), (3, 5, ("b", "a"), [[b"3", b""], [None, b"4"]]),
                    (5, 6, ("a",), [[b"5"]]), (6, 7, ("a", "a"), [[b"6"], [b"7"]])]


def test_the_c_decoder_declines_what_does_not_add_up() -> None:
    b = MemoryRecordsBuilder()
    for i in range(20):
        b.append(1_700_000_000_000 + i, b"k", b"v%d" % i, (("key", b"x"),))
    data = bytes(b.build())
    ts0 = RecordBatch(data).header.base_timestamp
    assert decode_records_c(data, HEADER_SIZE, len(data), 20, ts0) is not None
    gapped = compact(data, {3})  # offset delta 4 at index 3
    assert decode_records_c(gapped, HEADER_SIZE, len(gapped), 19, ts0) is None
    not_utf8 = bytearray(data)  # (taken: the key decoded as Kafka's Java consumer decodes it)
    not_utf8[data.rindex(b"key")] = 0xFF
    assert decode_records_c(bytes(not_utf8), HEADER_SIZE, len(data), 20, ts0)[3][-1][2] == ("\ufffdey",)
    for cut in (HEADER_SIZE + 1, len(data) // 2, len(data) - 1):  # a record past the end
        assert decode_records_c(data[:cut], HEADER_SIZE, cut, 20, ts0) is None
    longer = bytearray(data)
    longer[HEADER_SIZE] += 2  # the first record's length prefix one byte longer than its fields
    assert decode_records_c(bytes(longer), HEADER_SIZE, len(data), 20, ts0) is None
    for start, end, count in ((-1, len(data), 20), (HEADER_SIZE, len(data) + 1, 20), (HEADER_SIZE, len(data), 0),
                              (len(data), HEADER_SIZE, 20)):
        assert decode_records_c(data, start, end, count, ts0) is None
    # a timestamp beyond int64 (base timestamp + delta): the Python decoders' ints take it
    late = MemoryRecordsBuilder()
    late.append(1, None, b"v")
    late.append(1 << 62, None, b"w")
    raw = bytes(late.build())
    base = (1 << 63) - 2
    assert decode_records_c(raw, HEADER_SIZE, len(raw), 2, base) is None
    got = decode_consumer_records(raw, HEADER_SIZE, len(raw), 2, 0, base, True, "t", 0, 0, None)
    assert [r.timestamp for r in got] == [base, base + (1 << 62) - 1]
    # fewer records than the block holds: the position tells the caller what is left
    *_, end = decode_records_c(data, HEADER_SIZE, len(data), 19, ts0)
    assert HEADER_SIZE < end < len(data)
    with pytest.raises(CorruptMessageError, match="unaccounted"):
        decode_consumer_records(data + b"\x00", HEADER_SIZE, len(data) + 1, 20, 0, ts0, True, "t", 0, 0, None)
    with pytest.raises(TypeError):
        decode_records_c("text", 0, 4, 1, 0)
    with pytest.raises(TypeError):
        decode_records_c(data, HEADER_SIZE, len(data), 20)
