"""Task commit markers: a streaming sink task that already wrote its part of a batch is not written again.

After a task's producer has flushed (every record acknowledged), the task records "Spark partition ``p`` of
batch ``b`` of query ``q`` is written" as a committed consumer-group offset: group
``<prefix>-<queryId>-<p>``, offset ``b + 1``, on partition 0 of every topic the task wrote to (group offsets
must name an existing topic-partition, and every topic written is a valid key). Before writing, a task looks up
the marker on partition 0 of its first row's topic; when it is ``>= b + 1`` the task's rows are already in
the topic and the task writes nothing. Any topic of the task's rows works for the look-up, because the
marker was committed on all of them.

Markers use the plain OffsetCommit / OffsetFetch APIs (standalone commits, no group membership), so they work
on strom and on any Kafka cluster. Groups keep their offsets for the broker's ``offsets.retention.minutes``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from strom.common.structs import OffsetAndMetadata, TopicPartition
from strom.consumer.assignors.abstract import ConsumerGroupMetadata
from strom.consumer.config import CONSUMER_CONFIG_DEF
from strom.consumer.kafka_consumer import KafkaConsumer

__all__ = ["TaskIdentity", "CommitMarkers"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskIdentity:
    """Which piece of which micro-batch a sink task writes (from Spark's TaskContext)."""

    query_id: str
    batch_id: int
    partition_id: int
    attempt: int = 0


class CommitMarkers:
    """The markers of one task. Creates its consumer lazily; call :meth:`close`."""

    def __init__(self, kafka_params: Mapping[str, str], prefix: str, task: TaskIdentity,
                 timeout_s: float = 60.0) -> None:
        self.task = task
        self.group_id = f"{prefix}-{task.query_id}-{task.partition_id}"
        conf = _consumer_keys(kafka_params)
        conf.update({"group.id": self.group_id, "enable.auto.commit": "false", "key.deserializer": "bytes",
                     "value.deserializer": "bytes", "client.id": f"strom-spark-sink-marker-{task.partition_id}"})
        self._conf = conf
        self._timeout_s = timeout_s
        self._consumer: KafkaConsumer | None = None

    @property
    def consumer(self) -> KafkaConsumer:
        if self._consumer is None:
            self._consumer = KafkaConsumer(self._conf)
        return self._consumer

    def already_written(self, topic: str) -> bool:
        """Whether this task's part of the batch was written and marked by an earlier attempt or run."""
        committed = self.consumer.committed(TopicPartition(topic, 0), timeout=self._timeout_s)
        done = committed is not None and committed.offset > self.task.batch_id
        if done:
            log.info("sink task %s: batch %d already written (marker %s); skipping", self.group_id,
                     self.task.batch_id, committed)
        return done

    def marker_offsets(self, topics: Iterable[str], records: int,
                       ) -> tuple[dict[TopicPartition, OffsetAndMetadata], ConsumerGroupMetadata]:
        """The marker as offsets of the marker group (for ``send_offsets_to_transaction``)."""
        meta = json.dumps({"batch": self.task.batch_id, "records": records, "attempt": self.task.attempt})
        offsets = {TopicPartition(t, 0): OffsetAndMetadata(self.task.batch_id + 1, meta) for t in sorted(topics)}
        return offsets, ConsumerGroupMetadata(self.group_id)

    def mark_written(self, topics: Iterable[str], records: int) -> None:
        offsets, _group = self.marker_offsets(topics, records)
        if offsets:
            self.consumer.commit_sync(offsets, timeout=self._timeout_s)

    def close(self) -> None:
        if self._consumer is not None:
            c, self._consumer = self._consumer, None
            c.close(timeout=5)


def _consumer_keys(conf: Mapping[str, str]) -> dict[str, str]:
    """Only the keys a consumer knows (the sink's ``kafka.*`` options are producer settings)."""
    return {k: v for k, v in conf.items() if CONSUMER_CONFIG_DEF.canonical_name(k) is not None}
