"""The producer client's public types.

Kafka counterpart: ``org.apache.kafka.clients.producer``.
"""

from __future__ import annotations

from strom.producer.config import ProducerConfig
from strom.producer.interceptors import ProducerInterceptor, ProducerInterceptors
from strom.producer.partitioner import (
    DefaultPartitioner,
    Partitioner,
    RoundRobinPartitioner,
    UniformStickyPartitioner,
)
from strom.producer.record import Header, ProducerRecord, RecordHeaders, RecordMetadata

__all__ = [
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
