"""strom: Apache Kafka's architecture in Python.

``from strom import KafkaProducer, ProducerRecord, KafkaConsumer, AdminClient, …`` (imported lazily, so importing ``strom``
for the broker or the CLI does not load the clients).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "KafkaProducer",
    "ProducerRecord",
    "RecordMetadata",
    "KafkaConsumer",
    "ConsumerRecord",
    "ConsumerRecords",
    "TopicPartition",
    "OffsetAndMetadata",
    "AdminClient",
    "__version__",
]

if TYPE_CHECKING:
    from strom.admin import AdminClient
    from strom.common.structs import OffsetAndMetadata, TopicPartition
    from strom.consumer import ConsumerRecord, ConsumerRecords, KafkaConsumer
    from strom.producer.kafka_producer import KafkaProducer
    from strom.producer.record import ProducerRecord, RecordMetadata

_LAZY = {
    "KafkaProducer": "strom.producer.kafka_producer",
    "ProducerRecord": "strom.producer.record",
    "RecordMetadata": "strom.producer.record",
    "KafkaConsumer": "strom.consumer",
    "ConsumerRecord": "strom.consumer",
    "ConsumerRecords": "strom.consumer",
    "TopicPartition": "strom.common.structs",
    "OffsetAndMetadata": "strom.common.structs",
    "AdminClient": "strom.admin",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'strom' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
