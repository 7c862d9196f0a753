"""Builders shared by the Sender / TransactionManager component tests (MockClient + MockTime, no sockets)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from strom.common.structs import TopicPartition
from strom.metrics import Metrics, metric_values
from strom.producer.internals.buffer_pool import BufferPool
from strom.producer.internals.producer_batch import CompressionRatioEstimator
from strom.producer.internals.producer_metadata import ProducerMetadata
from strom.producer.internals.record_accumulator import RecordAccumulator
from strom.producer.internals.sender import Sender
from strom.producer.internals.transaction_manager import TransactionManager
from strom.protocol.messages import InitProducerIdResponse, ProduceRequest, ProduceResponse
from strom.testing.mock_client import MockClient, metadata_update_with
from strom.testing.mock_time import MockTime

INT_MAX = 2**31 - 1
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


@dataclass
class Harness:
    time: MockTime
    metadata: ProducerMetadata
    client: MockClient
    pool: BufferPool
    accumulator: RecordAccumulator
    sender: Sender
    tm: TransactionManager | None
    results: list[tuple[Any, BaseException | None]] = field(default_factory=list)

    def append(self, tp: TopicPartition = TP0, value: bytes = b"value", key: bytes | None = b"key",
               callback: Any = None) -> Any:
        now = self.time.milliseconds()
        cb = callback if callback is not None else (lambda md, e: self.results.append((md, e)))
        return self.accumulator.append(tp, now, key, value, None, cb, 0, False, now).future

    def run_once(self, times: int = 1) -> None:
        for _ in range(times):
            self.sender.run_once()

    def metric_values(self, group: str = "producer-metrics", **tags: str) -> dict[str, Any]:
        """``{name: value}`` of the Sender's metrics in ``group`` (tags filter, e.g. ``topic="t"``)."""
        return metric_values(self.sender.metrics.metrics(), group, **tags)

    def produce_requests(self) -> list[Any]:
        return [r for r in self.client.requests if isinstance(r.request, ProduceRequest)]


def make_harness(*, acks: int = -1, max_in_flight: int = 5, retries: int = INT_MAX, idempotent: bool = False,
                 batch_size: int = 16384, linger_ms: int = 0, delivery_timeout_ms: int = 120_000,
                 retry_backoff_ms: int = 100, request_timeout_ms: int = 30_000, topics: dict[str, int] | None = None,
                 nodes: int = 2, total_memory: int = 1024 * 1024, max_request_size: int = 1024 * 1024,
                 leader_for: Any = None, compression: int = 0, estimator: Any = None,
                 fallback: bool = False, transactional_id: str | None = None) -> Harness:
    time = MockTime()
    metadata = ProducerMetadata(retry_backoff_ms, 300_000, 300_000, time)
    client = MockClient(time, metadata)
    topics = topics or {"t": 2}
    for topic in topics:
        metadata.add(topic, time.milliseconds())
    client.update_metadata(metadata_update_with(nodes, topics, leader_for=leader_for))
    pool = BufferPool(total_memory, batch_size, time=time)
    tm = (TransactionManager("", transactional_id=transactional_id, retry_backoff_ms=retry_backoff_ms,
                             allow_unsupported_fallback=fallback, time=time)
          if idempotent or transactional_id else None)
    accumulator = RecordAccumulator(batch_size, compression, linger_ms, retry_backoff_ms, delivery_timeout_ms, pool,
                                    time, transaction_manager=tm,
                                    compression_ratio_estimator=estimator or CompressionRatioEstimator())
    sender = Sender(client, metadata, accumulator, max_in_flight == 1, max_request_size, acks, retries,
                    Metrics(time=time), time, request_timeout_ms, retry_backoff_ms, tm)
    return Harness(time, metadata, client, pool, accumulator, sender, tm)


def produce_response(partitions: dict[TopicPartition, int] | TopicPartition, offset: int = 0, error: int = 0, *,
                     log_append_time: int = -1, log_start_offset: int = -1, record_errors: Any = (),
                     error_message: str | None = None, throttle_ms: int = 0) -> Any:
    """A ProduceResponse: ``partitions`` maps TopicPartition → base offset (or a single partition + ``offset``)."""
    if isinstance(partitions, TopicPartition):
        partitions = {partitions: offset}
    by_topic: dict[str, list[Any]] = {}
    for tp, base in partitions.items():
        by_topic.setdefault(tp.topic, []).append(ProduceResponse.PartitionProduceResponse(
            index=tp.partition, error_code=error, base_offset=base, log_append_time_ms=log_append_time,
            log_start_offset=log_start_offset, error_message=error_message,
            record_errors=[ProduceResponse.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                           for i, m in record_errors]))
    return ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(name=t, partition_responses=ps)
                                      for t, ps in by_topic.items()], throttle_time_ms=throttle_ms)


def init_producer_id_response(producer_id: int = 1000, epoch: int = 0, error: int = 0) -> Any:
    return InitProducerIdResponse(error_code=error, producer_id=producer_id, producer_epoch=epoch)


def request_partitions(request: Any) -> dict[TopicPartition, bytes]:
    """The record bytes per partition of a ProduceRequest."""
    out = {}
    for topic in request.topic_data:
        for p in topic.partition_data:
            out[TopicPartition(topic.name, p.index)] = bytes(p.records)
    return out
