"""strom's consumer behind the data source: driver-side offset look-ups and executor-side range reads.

- :class:`ConsumerOffsetSource` (driver): the :class:`~strom.spark.resolver.OffsetSource` of a query — topic
  listing, earliest / latest offsets, offsets for timestamps — over one ``KafkaConsumer`` (the driver's group id, no subscription).
- :func:`read_range` (executors): the records ``[start, end)`` of one partition, as Arrow tables from
  ``KafkaConsumer.poll_arrow``, with a ``KafkaConsumer`` in
  assign mode with the executors' group id (never committing), ``auto.offset.reset=none``. Consumers are pooled
  per Python worker process (Spark reuses its Python workers), so a micro-batch does not pay for a new
  connection and metadata round trip; a pooled consumer is taken to continue where it stopped, or once its last
  fetch cannot still be parked at the broker (see :func:`_acquire`).

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
from dataclasses import dataclass
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
_DEFAULTS = {"max.poll.records": "200000", "max.partition.fetch.bytes": str(4 << 20), "fetch.max.wait.ms": "100"}
"""Consumer defaults of the source, each overridden by its ``kafka.*`` option. An executor reads a range of
records already in the log and hands whole polls to Spark as Arrow tables, so it fetches 4 MiB per partition
(Kafka's default: 1 MiB) and takes a whole fetch per poll: a quarter of the round trips to the broker, where it
spent two thirds of its read waiting for fetch responses with 1 MiB (bench/README.md, "Spark"). Its last fetch,
parked at the log end when a range ends there, comes back within 100 ms (Kafka's default: 500), after which the
pooled consumer can serve the next query's range (see :func:`_acquire`); ranges hold records that are already
there, so a shorter long poll costs nothing while reading."""


def consumer_config(kafka_params: Mapping[str, str], client_id: str | None = None,
                    group_id: str | None = None) -> dict[str, str]:
    """``kafka.*`` options (over :data:`_DEFAULTS`) -> a consumer config for assign-mode reads with ``group_id``
    (chosen as Spark's Kafka source does, see :func:`strom.spark.options._group_ids`); it never commits: Spark
    tracks offsets in its checkpoint."""
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

@dataclass
class _IdleConsumer:
    key: str  # the consumer's config
    tp: TopicPartition  # what it read last
    position: int  # where it stopped: the offset its last (possibly still parked) fetch asked for
    since: float  # time.monotonic() when it was released
    consumer: KafkaConsumer


_idle: list[_IdleConsumer] = []  # least recently released first
_pool_lock = threading.Lock()
MAX_IDLE_CONSUMERS = 16  # per Python worker process; the least recently used are closed beyond it
IDLE_TIMEOUT_S = 300.0  # Spark's spark.kafka.consumer.cache.timeout default


def _acquire(conf: Mapping[str, str], tp: TopicPartition, start: int) -> tuple[str, KafkaConsumer]:
    """An idle consumer with ``conf`` (whatever its ``group.id``) that can read ``tp`` from ``start`` at once,
    else a new one.

    A consumer's last poll leaves a fetch at its position, which the broker parks as a long poll when that is
    the log end (up to ``fetch.max.wait.ms``), and no other fetch goes to that broker until it returns. So an
    idle consumer is reused to continue where it stopped (a streaming query's next range of the same partition:
    the parked fetch is the one wanted), or for anything else once ``fetch.max.wait.ms`` has passed since it
    stopped; otherwise a new consumer costs a connection instead of a wait of up to ``fetch.max.wait.ms`` (Spark's
    own pool is keyed by partition for the same reason)."""
    # (not keyed by group.id: a batch query has a group id of its own, and the executors' consumers never use
    # theirs - assign mode, positions by seek, no commits, and a Fetch carries no group - so a consumer of an
    # earlier query serves the next one instead of a new consumer, connection and 4 MiB buffers per task)
    key = json.dumps(sorted((k, v) for k, v in conf.items() if k != "group.id"))
    max_wait_s = int(conf.get("fetch.max.wait.ms", 500)) / 1000
    expired: list[KafkaConsumer] = []
    found: KafkaConsumer | None = None
    with _pool_lock:
        now = time.monotonic()
        while _idle and now - _idle[0].since >= IDLE_TIMEOUT_S:
            expired.append(_idle.pop(0).consumer)
        candidates = [i for i, e in enumerate(_idle) if e.key == key]
        best = next((i for i in reversed(candidates) if _idle[i].tp == tp and _idle[i].position == start), None)
        if best is None:
            best = next((i for i in reversed(candidates) if now - _idle[i].since >= max_wait_s), None)
        if best is not None:
            found = _idle.pop(best).consumer
    _close_all(expired)
    return key, found if found is not None else KafkaConsumer(dict(conf))


def _release(key: str, consumer: KafkaConsumer, tp: TopicPartition) -> None:
    try:
        position = consumer.position(tp, timeout=1)
    except Exception:  # noqa: BLE001 - no position: not worth keeping
        _close_all([consumer])
        return
    with _pool_lock:
        _idle.append(_IdleConsumer(key, tp, position, time.monotonic(), consumer))
        extra = [e.consumer for e in _idle[:-MAX_IDLE_CONSUMERS]]
        del _idle[:-MAX_IDLE_CONSUMERS]
    _close_all(extra)


def _close_all(consumers: list[KafkaConsumer]) -> None:
    """Close without waiting: closing a fetch session waits behind a parked fetch (up to ``fetch.max.wait.ms``);
    the broker evicts a session left open, as when a client dies."""
    for c in consumers:
        try:
            c.close(timeout=0)
        except Exception:  # noqa: BLE001 - best effort
            pass


@atexit.register
def close_pooled_consumers() -> None:
    """Close every idle pooled consumer (at worker exit; tests call it too)."""
    with _pool_lock:
        consumers = [e.consumer for e in _idle]
        _idle.clear()
    _close_all(consumers)


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
    key, consumer = _acquire(consumer_config(kafka_params, client_id="strom-spark-executor", group_id=group_id),
                             r.tp, r.start)
    ok = False
    try:
        yield from _read(consumer, r, DataLossReporter(fail_on_data_loss), poll_timeout_ms)
        ok = True
    finally:
        if ok:
            _release(key, consumer, r.tp)
        else:
            consumer.close(timeout=2)


def _read(consumer: KafkaConsumer, r: OffsetRange, report: DataLossReporter, poll_timeout_ms: int) -> Iterator[Any]:
    import numpy as np

    from strom.consumer.internals.arrow_decoder import values_of

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
                lo, hi = np.searchsorted(values_of(offsets), [offset, r.end])
                table = table.slice(int(lo), int(hi - lo))
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

