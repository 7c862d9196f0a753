"""strom's consumer behind the data source: driver-side offset look-ups and executor-side range reads.

- :class:`ConsumerOffsetSource` (driver): the :class:`~strom.spark.resolver.OffsetSource` of a query — topic
  listing, earliest / latest offsets, offsets for timestamps — over one ``KafkaConsumer`` (the driver's group id, no subscription).
- :func:`read_range` (executors): the records ``[start, end)`` of one partition, as Arrow tables from
  ``KafkaConsumer.poll_arrow``, with a ``KafkaConsumer`` in
  assign mode with the executors' group id (never committing), ``auto.offset.reset=none``. Consumers are pooled per Python worker process (Spark
  reuses its Python workers), so a micro-batch does not pay for a new connection and metadata round trip.

Nothing here assumes the driver and the executors share a machine: both sides connect to
``kafka.bootstrap.servers``; only options and offset ranges travel between them.
"""

from __future__ import annotations

import atexit
import json
import logging
import threading
import time
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from strom.common.error_codes import OffsetOutOfRangeError
from strom.common.structs import TopicPartition
from strom.consumer.kafka_consumer import KafkaConsumer
from strom.spark.offsets import PartitionOffsets
from strom.spark.planning import DataLossReporter, OffsetRange

__all__ = ["consumer_config", "ConsumerOffsetSource", "read_range", "close_pooled_consumers"]

log = logging.getLogger(__name__)

_FIXED = {"key.deserializer": "bytes", "value.deserializer": "bytes", "enable.auto.commit": "false",
          "auto.offset.reset": "none"}
_DEFAULTS = {"max.poll.records": "20000"}


def consumer_config(kafka_params: Mapping[str, str], client_id: str | None = None,
                    group_id: str | None = None) -> dict[str, str]:
    """``kafka.*`` options -> a consumer config for assign-mode reads with ``group_id`` (chosen as Spark's Kafka
    source does, see :func:`strom.spark.options._group_ids`); it never commits: Spark tracks offsets in its
    checkpoint."""
    conf = dict(_DEFAULTS)
    conf.update(kafka_params)
    conf.update(_FIXED)
    if group_id:
        conf["group.id"] = group_id
    if client_id and "client.id" not in kafka_params:
        conf["client.id"] = client_id
    return conf


class ConsumerOffsetSource:
    """Driver-side look-ups over one ``KafkaConsumer`` in no group membership (created on first use). Not
    thread-safe."""

    def __init__(self, kafka_params: Mapping[str, str], timeout_ms: int = 60_000, group_id: str | None = None) -> None:
        self._conf = consumer_config(kafka_params, client_id="strom-spark-driver", group_id=group_id)
        self._timeout_s = timeout_ms / 1000
        self._consumer: KafkaConsumer | None = None

    @property
    def consumer(self) -> KafkaConsumer:
        if self._consumer is None:
            self._consumer = KafkaConsumer(self._conf)
        return self._consumer

    def list_topics(self) -> dict[str, list[int]]:
        return {t: sorted(p.partition for p in infos)
                for t, infos in self.consumer.list_topics(timeout=self._timeout_s).items()}

    def partitions_for(self, topics: Collection[str]) -> dict[str, list[int]]:
        known = self.list_topics()
        return {t: known[t] for t in topics if t in known}

    def earliest(self, tps: Collection[TopicPartition]) -> PartitionOffsets:
        return dict(self.consumer.beginning_offsets(list(tps), timeout=self._timeout_s)) if tps else {}

    def latest(self, tps: Collection[TopicPartition]) -> PartitionOffsets:
        return dict(self.consumer.end_offsets(list(tps), timeout=self._timeout_s)) if tps else {}

    def offsets_for_times(self, query: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        found = self.consumer.offsets_for_times(dict(query), timeout=self._timeout_s) if query else {}
        return {tp: (found[tp].offset if found.get(tp) is not None else None) for tp in query}

    def close(self) -> None:
        if self._consumer is not None:
            c, self._consumer = self._consumer, None
            c.close(timeout=5)


# ------------------------------------------------------------------------------------ executor side

_pool: dict[str, list[KafkaConsumer]] = {}
_pool_lock = threading.Lock()


def _acquire(conf: Mapping[str, str]) -> tuple[str, KafkaConsumer]:
    key = json.dumps(sorted(conf.items()))
    with _pool_lock:
        idle = _pool.get(key)
        if idle:
            return key, idle.pop()
    return key, KafkaConsumer(dict(conf))


def _release(key: str, consumer: KafkaConsumer) -> None:
    with _pool_lock:
        _pool.setdefault(key, []).append(consumer)


@atexit.register
def close_pooled_consumers() -> None:
    """Close every idle pooled consumer (at worker exit; tests call it too)."""
    with _pool_lock:
        consumers = [c for cs in _pool.values() for c in cs]
        _pool.clear()
    for c in consumers:
        try:
            c.close(timeout=2)
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def read_range(kafka_params: Mapping[str, str], r: OffsetRange, fail_on_data_loss: bool,
               poll_timeout_ms: int = 120_000, group_id: str | None = None) -> Iterator[Any]:
    """Yield the records of ``r`` in offset order as ``pyarrow.Table`` s of ``KafkaConsumer.poll_arrow``'s
    schema (one per poll: whole fetched batches decoded straight into columns), nothing at or past ``r.end``.

    Gaps inside the available log (compaction, transaction markers) are skipped silently. Records that are no
    longer in the log (``start`` before the log start offset, or the log now ending before ``end``) are data
    loss: an error with ``failOnDataLoss=true``, else a warning and the records that are there.
    """
    if r.size <= 0:
        return
    key, consumer = _acquire(consumer_config(kafka_params, client_id="strom-spark-executor", group_id=group_id))
    ok = False
    try:
        yield from _read(consumer, r, DataLossReporter(fail_on_data_loss), poll_timeout_ms)
        ok = True
    finally:
        if ok:
            _release(key, consumer)
        else:
            consumer.close(timeout=2)


def _read(consumer: KafkaConsumer, r: OffsetRange, report: DataLossReporter, poll_timeout_ms: int) -> Iterator[Any]:
    import pyarrow.compute as pc

    tp = r.tp
    if consumer.assignment() != {tp}:
        consumer.assign([tp])
    offset = r.start
    consumer.seek(tp, offset)
    last_progress = time.monotonic()
    while offset < r.end:
        try:
            table = consumer.poll_arrow(timeout_ms=min(poll_timeout_ms, 1000))
        except OffsetOutOfRangeError:
            offset = _out_of_range(consumer, tp, offset, r, report)
            if offset >= r.end:
                return
            consumer.seek(tp, offset)
            continue
        n = table.num_rows
        if n:
            offsets = table.column("offset")
            first, last = offsets[0].as_py(), offsets[n - 1].as_py()
            if first >= r.end:
                return  # the rest of the range was compacted away or holds only control records
            if first < offset or last >= r.end:  # rows are in offset order: keep those in [offset, end)
                table = table.filter(pc.and_(pc.greater_equal(offsets, offset), pc.less(offsets, r.end)))
                n = table.num_rows
            if n:
                yield table
                offset = table.column("offset")[n - 1].as_py() + 1
                last_progress = time.monotonic()
                continue
        position = consumer.position(tp, timeout=30)
        if position >= r.end:
            return
        if position > offset:
            offset = position
            last_progress = time.monotonic()
            continue
        latest = consumer.end_offsets([tp], timeout=30)[tp]
        if latest <= offset:
            report(f"Cannot fetch records in [{offset}, {r.end}) of {tp}: the log now ends at {latest}")
            return
        if (time.monotonic() - last_progress) * 1000 > poll_timeout_ms:
            raise TimeoutError(f"Cannot fetch record for offset {offset} of {tp} in {poll_timeout_ms} milliseconds")


def _out_of_range(consumer: KafkaConsumer, tp: TopicPartition, offset: int, r: OffsetRange,
                  report: DataLossReporter) -> int:
    """Where to continue after OFFSET_OUT_OF_RANGE (or raise, per ``failOnDataLoss``)."""
    earliest = consumer.beginning_offsets([tp], timeout=30)[tp]
    latest = consumer.end_offsets([tp], timeout=30)[tp]
    if offset < earliest:
        report(f"Cannot fetch offset {offset} of {tp}: the log starts at {earliest} now; records "
               f"[{offset}, {min(earliest, r.end)}) are lost")
        return earliest
    report(f"Cannot fetch offset {offset} of {tp}: the log ends at {latest} now; records "
           f"[{max(offset, latest)}, {r.end}) are lost")
    return r.end

