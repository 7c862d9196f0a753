"""The producer client's public types.

Kafka counterpart: ``org.apache.kafka.clients.producer``. :class:`KafkaProducer` and
:class:`FutureRecordMetadata` are imported lazily (they pull in the network layer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.producer.config import ProducerConfig
from strom.producer.interceptors import ProducerInterceptor, ProducerInterceptors
from strom.producer.partitioner import (
    DefaultPartitioner,
    Partitioner,
    RoundRobinPartitioner,
    UniformStickyPartitioner,
)
from strom.producer.record import Header, ProducerRecord, RecordHeaders, RecordMetadata

if TYPE_CHECKING:
    from strom.producer.internals.future_record_metadata import FutureRecordMetadata
    from strom.producer.kafka_producer import KafkaProducer, RecordTooLargeError

__all__ = [
    "KafkaProducer",
    "FutureRecordMetadata",
    "RecordTooLargeError",
    "ProducerConfig",
    "ProducerRecord",
    "RecordMetadata",
    "RecordHeaders",
    "Header",
    "Partitioner",
    "DefaultPartitioner",
    "RoundRobinPartitioner",
    "UniformStickyPartitioner",
    "ProducerInterceptor",
    "ProducerInterceptors",
]

_LAZY = {
    "KafkaProducer": "strom.producer.kafka_producer",
    "RecordTooLargeError": "strom.producer.kafka_producer",
    "FutureRecordMetadata": "strom.producer.internals.future_record_metadata",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'strom.producer' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
