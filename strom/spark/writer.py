"""The batch and streaming sinks of ``format("strom")``.

Input columns as in Spark's Kafka sink: ``value`` (string or binary, required), ``key`` (string or binary),
``topic`` (string; the ``topic`` option overrides it), ``partition`` (int) and ``headers``
(``array<struct<key:string,value:binary>>``); other columns are ignored.

Each Spark task writes its rows with its own strom ``KafkaProducer`` (idempotent, ``acks=all``: Kafka's
defaults) — an Arrow batch of one topic without ``headers`` or ``partition`` values goes through the
producer's bulk path, ``send_many`` — and flushes it before returning its commit message: a task succeeds only when every one of its
records is acknowledged. Streaming tasks also use :mod:`strom.spark.commit_markers` so that a replayed batch
does not rewrite the output of tasks that had completed. The guarantee is spelled out in ``docs/spark.md``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from strom.producer.kafka_producer import KafkaProducer
from strom.spark.commit_markers import CommitMarkers, TaskIdentity
from strom.spark.options import OptionError, SinkOptions, parse_sink_options
from strom.spark.reader import HEADERS_TYPE, freeze_worker_heap

__all__ = ["validate_sink_schema", "producer_config", "SinkCommitMessage", "write_task", "StromBatchWriter",
           "StromStreamWriter"]

log = logging.getLogger(__name__)



def _same_type(a: DataType, b: DataType) -> bool:
    """Type equality ignoring nullability (Spark compares the sink's column types that way)."""
    if isinstance(a, ArrayType) and isinstance(b, ArrayType):
        return _same_type(a.elementType, b.elementType)
    if isinstance(a, StructType) and isinstance(b, StructType):
        return len(a.fields) == len(b.fields) and all(
            x.name == y.name and _same_type(x.dataType, y.dataType) for x, y in zip(a.fields, b.fields, strict=True))
    return type(a) is type(b)


def validate_sink_schema(schema: StructType, topic_option: str | None) -> None:
    """Spark's ``KafkaWriter.validateQuery`` checks, with its messages."""
    cols = {f.name.lower(): f.dataType for f in schema.fields}
    if topic_option is None:
        if "topic" not in cols:
            raise OptionError("topic option required when no 'topic' attribute is present. Use the topic option "
                              "for setting a topic.")
        if not isinstance(cols["topic"], StringType):
            raise OptionError("topic attribute type must be a string")
    if "value" not in cols:
        raise OptionError("Required attribute 'value' not found")
    for name in ("key", "value"):
        if name in cols and not isinstance(cols[name], (StringType, BinaryType)):
            raise OptionError(f"{name} attribute type must be a string or binary")
    if "headers" in cols and not _same_type(cols["headers"], HEADERS_TYPE):
        raise OptionError("headers attribute type must be a array<struct<key:string,value:binary>>")
    if "partition" in cols and not isinstance(cols["partition"], IntegerType):
        raise OptionError("partition attribute type must be an int")


def producer_config(opts: SinkOptions, client_id: str) -> dict[str, str]:
    conf = {"linger.ms": "5", "batch.size": "262144", "client.id": client_id}
    conf.update(opts.producer_config)
    conf.update({"key.serializer": "bytes", "value.serializer": "bytes"})
    return conf


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one task wrote."""

    partition_id: int
    records: int
    topics: list[str] = field(default_factory=list)
    skipped: bool = False


def _column(batch: pa.RecordBatch, names: Mapping[str, str], name: str) -> pa.Array | None:
    real = names.get(name)
    return batch.column(real) if real is not None else None


def _as_bytes(col: pa.Array | None, n: int) -> list[Any]:
    if col is None:
        return [None] * n
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = pc.cast(col, pa.binary())
    return col.to_pylist()


class _Failure:
    """Keeps the first error a send callback reports (callbacks run on the producer's I/O thread)."""

    def __init__(self) -> None:
        self.error: BaseException | None = None

    def __call__(self, _metadata: Any, exception: BaseException | None) -> None:
        if exception is not None and self.error is None:
            self.error = exception


def _task_identity(streaming: bool) -> TaskIdentity | None:
    ctx = TaskContext.get()
    if not streaming or ctx is None:
        return None
    batch, query = ctx.getLocalProperty("streaming.sql.batchId"), ctx.getLocalProperty("sql.streaming.queryId")
    if batch is None or query is None:
        return None
    return TaskIdentity(query, int(batch), ctx.partitionId(), ctx.attemptNumber())


def write_task(opts: SinkOptions, batches: Iterator[pa.RecordBatch], task: TaskIdentity | None,
               partition_id: int = 0) -> SinkCommitMessage:
    """Write one task's rows; return only once all are acknowledged (raise otherwise).

    With ``transactional=true`` the rows go in one Kafka transaction, committed when the task finishes, together
    with the task's commit marker (``send_offsets_to_transaction``, Kafka Streams' exactly-once design). The
    transactional id ``<commitMarkerGroupPrefix>-<queryId>-<partition>`` is the same for every attempt and run of
    the task, so a new attempt fences a zombie one and aborts whatever it left open before checking the marker.
    """
    freeze_worker_heap()  # (before any client exists: see the reader)
    markers = CommitMarkers(opts.producer_config, opts.marker_group_prefix, task) if (
        task is not None and opts.skip_committed_tasks) else None
    pid = task.partition_id if task is not None else partition_id
    producer: KafkaProducer | None = None
    failure = _Failure()
    count, topics_written = 0, set()
    ok = False
    in_txn = False
    try:
        for batch in batches:
            n = batch.num_rows
            if n == 0:
                continue
            names = {name.lower(): name for name in batch.schema.names}
            values = _as_bytes(_column(batch, names, "value"), n)
            keys = _as_bytes(_column(batch, names, "key"), n)
            topic_col = _column(batch, names, "topic")
            topics = [opts.topic] * n if opts.topic is not None else (
                topic_col.to_pylist() if topic_col is not None else [None] * n)
            part_col = _column(batch, names, "partition")
            parts = part_col.to_pylist() if part_col is not None else None
            head_col = _column(batch, names, "headers")
            headers = head_col.to_pylist() if head_col is not None else None
            if producer is None:
                if opts.transactional:
                    # Fence older attempts first: their open transaction (rows and marker) is aborted.
                    producer = _transactional_producer(opts, task, pid)
                if markers is not None and topics[0] is not None and markers.already_written(topics[0]):
                    for _ in batches:
                        pass
                    ok = True
                    return SinkCommitMessage(pid, 0, [], skipped=True)
                if producer is None:
                    producer = KafkaProducer(producer_config(opts, f"strom-spark-sink-{pid}"))
                if opts.transactional:
                    producer.begin_transaction()
                    in_txn = True
            if (parts is None and (headers is None or not any(headers)) and topics[0] is not None
                    and (opts.topic is not None or topics.count(topics[0]) == n)):
                # one topic, no headers, the partitioner's choice: the producer's bulk path
                producer.send_many(topics[0], values, keys, callback=failure)
                topics_written.add(topics[0])
                count += n
                if failure.error is not None:
                    raise failure.error
                continue
            send = producer.send
            for i in range(n):
                topic = topics[i]
                if topic is None:
                    raise OptionError("Null topic present in the data. Use the topic option for setting a topic.")
                h = headers[i] if headers is not None else None
                send(topic, failure, value=values[i], key=keys[i],
                     partition=parts[i] if parts is not None else None,
                     headers=[(x["key"], x["value"]) for x in h] if h else None)
                topics_written.add(topic)
            count += n
            if failure.error is not None:
                raise failure.error
        if producer is not None:
            producer.flush()
        if failure.error is not None:
            raise failure.error
        if in_txn and producer is not None:
            if markers is not None and count:
                offsets, group = markers.marker_offsets(topics_written, count)
                producer.send_offsets_to_transaction(offsets, group)
            producer.commit_transaction()
            in_txn = False
        elif markers is not None and count:
            markers.mark_written(topics_written, count)
        ok = True
        return SinkCommitMessage(pid, count, sorted(topics_written))
    finally:
        if producer is not None:
            if in_txn:
                try:
                    producer.abort_transaction()
                except Exception as e:  # fenced or broken: closing is all that is left
                    log.warning("sink task %d: abort_transaction failed: %s", pid, e)
            producer.close(timeout=None if ok else 0)
        if markers is not None:
            markers.close()


def _transactional_producer(opts: SinkOptions, task: TaskIdentity | None, pid: int) -> KafkaProducer:
    conf = producer_config(opts, f"strom-spark-sink-{pid}")
    stable = f"{task.query_id}-{task.partition_id}" if task is not None else f"batch-{uuid.uuid4()}-{pid}"
    conf["transactional.id"] = f"{opts.marker_group_prefix}-{stable}"
    producer = KafkaProducer(conf)
    try:
        producer.init_transactions()
    except BaseException:
        producer.close(timeout=0)
        raise
    return producer


class StromBatchWriter(DataSourceArrowWriter):
    """``df.write.format("strom")`` (append / errorifexists)."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise OptionError("Save mode Overwrite not allowed for Kafka. Allowed save modes are Append and "
                              "ErrorIfExists (default).")
        self.opts = parse_sink_options(options)
        validate_sink_schema(schema, self.opts.topic)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        ctx = TaskContext.get()
        return write_task(self.opts, iterator, None, ctx.partitionId() if ctx is not None else 0)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.records for m in messages if isinstance(m, SinkCommitMessage))
        log.info("strom sink: %d records written by %d task(s)", total, len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        written = sum(m.records for m in messages if isinstance(m, SinkCommitMessage))
        log.warning("strom sink: write aborted; %d records of completed tasks stay written", written)


class StromStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("strom")``: per-task producers plus task commit markers."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_sink_options(options)
        validate_sink_schema(schema, self.opts.topic)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        ctx = TaskContext.get()
        return write_task(self.opts, iterator, _task_identity(True), ctx.partitionId() if ctx is not None else 0)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        done = [m for m in messages if isinstance(m, SinkCommitMessage)]
        log.info("strom sink: batch %d committed: %d records from %d task(s), %d task(s) already written",
                 batchId, sum(m.records for m in done), len(messages), sum(m.skipped for m in done))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        done = [m for m in messages if isinstance(m, SinkCommitMessage)]
        log.warning("strom sink: batch %d aborted; %d records of %d completed task(s) stay written (a retry of "
                    "the batch skips those tasks)", batchId, sum(m.records for m in done), len(done))
