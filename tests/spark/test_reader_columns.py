"""``table_to_batches``: ``KafkaConsumer.poll_arrow``'s tables as the source's rows, column by column: timestamps
in microseconds (Spark's ``timestamp``), ``timestampType`` as int32 for CreateTime (shared zeros) and LogAppendTime
batches alike, tables of any length."""

from __future__ import annotations

import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from strom.common.structs import TopicPartition
from strom.consumer.internals import arrow_decoder
from strom.record.builder import MemoryRecordsBuilder
from strom.record.header import HEADER_SIZE
from strom.spark.reader import source_schema, table_to_batches

pytestmark = pytest.mark.spark

TS = 1_700_000_000_000


def _chunk(n: int, base_offset: int, log_append_time: int | None) -> object:
    b = MemoryRecordsBuilder()
    for i in range(n):
        b.append(TS + i, b"k", b"v%d" % i)
    data = bytes(b.build())
    return arrow_decoder.decode_batch_columns(data, HEADER_SIZE, len(data), n, base_offset, TS, log_append_time,
                                              0 if log_append_time is None else 1)


@pytest.mark.parametrize("n", [1, 700, 65536, 70_000])
def test_timestamps_and_their_types_per_row(n: int) -> None:
    table = arrow_decoder.to_table({TopicPartition("t", 4): [_chunk(n, 0, None), _chunk(3, n, TS + 5)]})
    schema = to_arrow_schema(source_schema(False), timezone="UTC")
    batches = list(table_to_batches(table, schema, False))
    assert [b.num_rows for b in batches] == [n, 3]
    for b in batches:
        assert b.schema == schema
        b.validate(full=True)
    create, append = batches
    assert create.column("timestampType").to_pylist() == [0] * n
    assert append.column("timestampType").to_pylist() == [1] * 3
    micros = [t.value for t in create.column("timestamp")]
    assert micros[0] == TS * 1000 and micros[-1] == (TS + n - 1) * 1000
    assert [t.value for t in append.column("timestamp")] == [(TS + 5) * 1000] * 3
    assert append.column("offset").to_pylist() == [n, n + 1, n + 2]
    assert create.column("partition").to_pylist()[-1] == 4 and append.column("topic").to_pylist() == ["t"] * 3
