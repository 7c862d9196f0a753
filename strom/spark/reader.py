"""The batch and streaming readers of ``format("strom")`` (PySpark Python Data Source API, PySpark >= 4.2).

Rows have the schema of Spark's Kafka source (``key``, ``value``, ``topic``, ``partition``, ``offset``,
``timestamp``, ``timestampType`` and, with ``includeHeaders``, ``headers``); executors return them to Spark as
Arrow record batches made from ``KafkaConsumer.poll_arrow``'s tables, i.e. decoded straight from the fetched
record batches into columns.

Both reader classes are pickled from the driver's planner process to the executors; only options travel
(clients are created where they are used and never pickled).
"""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from strom.consumer.consumer_records import ConsumerRecord
from strom.consumer.internals.arrow_decoder import values_of
from strom.spark.kafka_io import ConsumerOffsetSource, read_range
from strom.spark.offsets import offsets_from_dict, offsets_to_dict
from strom.spark.options import OptionError, SourceOptions, parse_source_options
from strom.spark.planning import OffsetRange
from strom.spark.resolver import Limit, StreamPlanner, plan_batch

__all__ = ["SCHEMA_DDL", "HEADERS_DDL", "source_schema", "RangePartition", "StromBatchReader",
           "StromStreamReader", "records_to_batch", "table_to_batches", "freeze_worker_heap"]

log = logging.getLogger(__name__)

SCHEMA_DDL = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
              "timestampType int")
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"


HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def source_schema(include_headers: bool) -> StructType:
    """The row schema (built without a JVM: the planner's Python worker has none)."""
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()), StructField("topic", StringType()),
              StructField("partition", IntegerType()), StructField("offset", LongType()),
              StructField("timestamp", TimestampType()), StructField("timestampType", IntegerType())]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def check_schema(schema: StructType, include_headers: bool) -> None:
    if schema != source_schema(include_headers):
        raise OptionError("Kafka source has a fixed schema and cannot be set with a custom one")


class RangePartition(InputPartition):
    """One Spark input partition: records ``[start, end)`` of one topic-partition."""

    def __init__(self, r: OffsetRange) -> None:
        super().__init__((r.topic, r.partition, r.start, r.end))
        self.range = r

    def __repr__(self) -> str:
        r = self.range
        return f"RangePartition({r.topic}-{r.partition} [{r.start}, {r.end}))"


def records_to_batch(records: list[ConsumerRecord], arrow_schema: pa.Schema, include_headers: bool) -> pa.RecordBatch:
    """Column-wise conversion of one poll's records (one topic-partition) to an Arrow batch."""
    n = len(records)
    topic, partition, offsets, timestamps, ts_types, keys, values, headers = list(zip(*records, strict=True))[:8]
    ts = pc.multiply(pa.array(timestamps, pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC"))
    columns = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(topic[0], pa.string()), n),
        pa.repeat(pa.scalar(partition[0], pa.int32()), n),
        pa.array(offsets, pa.int64()),
        ts,
        pa.array(ts_types, pa.int32()),
    ]
    if include_headers:
        columns.append(pa.array([[{"key": k, "value": v} for k, v in h] for h in headers],
                                arrow_schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema)


_ZERO_INT32S = pa.py_buffer(bytes(4 * 65536))


def _timestamp_types(column: pa.Array, n: int) -> pa.Array:
    """``timestampType`` as int32: for CreateTime on every row (the usual case) a slice of shared zeros."""
    types = values_of(column, np.int8)
    if n <= 65536 and not types.any():
        return pa.Array.from_buffers(pa.int32(), n, [None, _ZERO_INT32S.slice(0, 4 * n)])
    return pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(types.astype(np.int32))])


def table_to_batches(table: pa.Table, arrow_schema: pa.Schema, include_headers: bool) -> Iterator[pa.RecordBatch]:
    """``KafkaConsumer.poll_arrow``'s columns as the source's rows, column by column (no per-record work):
    timestamps from int64 milliseconds to ``timestamp[us, UTC]``, ``timestampType`` to int32."""
    ts_type = arrow_schema.field("timestamp").type
    for batch in table.to_batches():
        n = batch.num_rows
        micros = values_of(batch.column("timestamp")) * 1000  # (numpy: a third of pyarrow's cast call here)
        columns = [
            batch.column("key"),
            batch.column("value"),
            batch.column("topic"),
            batch.column("partition"),
            batch.column("offset"),
            pa.Array.from_buffers(ts_type, n, [None, pa.py_buffer(micros)]),
            _timestamp_types(batch.column("timestamp_type"), n),
        ]
        if include_headers:
            columns.append(batch.column("headers").cast(arrow_schema.field("headers").type))
        yield pa.RecordBatch.from_arrays(columns, schema=arrow_schema)


_modules_at_freeze = 0  # len(sys.modules) when the worker's heap was last frozen (0: never)


def freeze_worker_heap() -> bool:
    """In a Spark Python worker, before a read or write creates any client: move every object alive now to the
    cyclic collector's permanent generation when modules were imported since the last time (the first time: the
    modules of PySpark, pyarrow, numpy and strom, about 75,000 objects; later: whatever a task imported, e.g. pandas
    by a pandas UDF or ``pa.array``, about 30,000). PySpark's daemon runs ``gc.collect()`` after every task of a
    reused worker, and that full collection traverses every object not frozen: 10-130 ms of the worker's CPU per
    task. Objects made later (consumers, each task's state) are collected as before. Frozen objects are never
    collected as cyclic garbage, so what is alive at a freeze besides the modules (the pooled consumers, at most
    :data:`~strom.spark.kafka_io.MAX_IDLE_CONSUMERS`) stays in memory once closed if it holds reference cycles: a bounded cost, as
    each freeze follows new imports and a worker imports a module once. Nothing is frozen outside a Spark worker (a
    process without ``pyspark.worker``, e.g. the application's driver). True when this call froze the heap."""
    global _modules_at_freeze
    modules = len(sys.modules)
    if modules <= _modules_at_freeze or "pyspark.worker" not in sys.modules:
        return False
    _modules_at_freeze = modules
    gc.freeze()
    return True


class _ReaderBase:
    opts: SourceOptions
    include_headers: bool
    _arrow_schema: pa.Schema | None = None

    def _read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return  # Spark's placeholder partition of an empty batch read
        freeze_worker_heap()
        if self._arrow_schema is None:
            self._arrow_schema = to_arrow_schema(source_schema(self.include_headers), timezone="UTC")
        for table in read_range(self.opts.consumer_config, partition.range, self.opts.fail_on_data_loss,
                                self.opts.poll_timeout_ms, group_id=self.opts.executor_group_id):
            yield from table_to_batches(table, self._arrow_schema, self.include_headers)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for k in ("_planner", "_source", "_arrow_schema"):
            state.pop(k, None)
        return state


class StromBatchReader(_ReaderBase, DataSourceReader):
    """``spark.read.format("strom")``: offsets resolved when Spark plans the read."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_source_options(options, streaming=False)
        self.include_headers = self.opts.include_headers
        check_schema(schema, self.include_headers)

    def partitions(self) -> list[InputPartition]:
        source = ConsumerOffsetSource(self.opts.consumer_config, group_id=self.opts.driver_group_id)
        try:
            ranges = plan_batch(self.opts, source)
        finally:
            source.close()
        log.info("batch read of %d range(s): %s", len(ranges), ranges)
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self._read(partition)


def _limit(limit: ReadLimit) -> Limit:
    if isinstance(limit, ReadMaxRows):
        return ("max", int(limit.max_rows))
    if isinstance(limit, ReadMinRows):
        return ("min", int(limit.min_rows))
    if not isinstance(limit, ReadAllAvailable):
        log.warning("read limit %r is not supported by the strom source; reading all available", limit)
    return ("all", 0)


class StromStreamReader(_ReaderBase, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("strom")``: offsets per topic-partition in Spark's checkpoint.

    Offsets are ``{"topic": {"partition": next offset}}``. The driver-side planner (and its consumer) live in
    Spark's long-running source process; ``commit`` does nothing because the checkpoint is the only record of
    progress (Spark calls it one batch late, and not at all for the last batch before a stop).
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_source_options(options, streaming=True)
        self.include_headers = self.opts.include_headers
        check_schema(schema, self.include_headers)
        self._planner: StreamPlanner | None = None

    @property
    def planner(self) -> StreamPlanner:
        if getattr(self, "_planner", None) is None:
            self._source = ConsumerOffsetSource(self.opts.consumer_config, group_id=self.opts.driver_group_id)
            self._planner = StreamPlanner(self.opts, self._source)
        assert self._planner is not None
        return self._planner

    def initialOffset(self) -> dict:
        return offsets_to_dict(self.planner.initial_offsets())

    def getDefaultReadLimit(self) -> ReadLimit:
        kind, n = self.planner.default_limit()
        if kind == "max":
            return ReadMaxRows(n)
        if kind == "min":
            return ReadMinRows(n)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.planner.prepare_available_now()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_dict(start)
        end = self.planner.latest_offsets(begin, _limit(limit))
        return start if end == begin else offsets_to_dict(end)

    def reportLatestOffset(self) -> dict | None:
        latest = self.planner.last_latest
        return offsets_to_dict(latest) if latest else None

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        ranges = self.planner.plan(offsets_from_dict(start), offsets_from_dict(end))
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self._read(partition)

    def commit(self, end: dict) -> None:
        log.debug("batch up to %s committed by Spark", end)

    def stop(self) -> None:
        source = getattr(self, "_source", None)
        self._planner = None
        if source is not None:
            self._source = None
            source.close()
