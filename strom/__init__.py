"""strom: Apache Kafka's architecture in Python.

``from strom import KafkaProducer, ProducerRecord, RecordMetadata`` (imported lazily, so importing ``strom``
for the broker or the CLI does not load the clients).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["KafkaProducer", "ProducerRecord", "RecordMetadata", "__version__"]

if TYPE_CHECKING:
    from strom.producer.kafka_producer import KafkaProducer
    from strom.producer.record import ProducerRecord, RecordMetadata

_LAZY = {
    "KafkaProducer": "strom.producer.kafka_producer",
    "ProducerRecord": "strom.producer.record",
    "RecordMetadata": "strom.producer.record",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'strom' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
