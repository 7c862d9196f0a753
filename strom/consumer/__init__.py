"""The consumer client.

Kafka counterpart: ``org.apache.kafka.clients.consumer`` (``KafkaConsumer``, ``ConsumerRecord(s)``,
``ConsumerRebalanceListener``, ``ConsumerInterceptor``, the assignors, ``OffsetAndMetadata``,
``OffsetAndTimestamp``). ``KafkaConsumer`` is not thread-safe except ``wakeup()``.
"""

from strom.common.structs import OffsetAndMetadata, TopicPartition
from strom.consumer.assignors import (
    ConsumerGroupMetadata,
    ConsumerPartitionAssignor,
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
)
from strom.consumer.config import ConsumerConfig
from strom.consumer.consumer_records import ConsumerRecord, ConsumerRecords, OffsetAndTimestamp
from strom.consumer.errors import (
    CommitFailedError,
    NoOffsetForPartitionError,
    RebalanceInProgressError,
    RecordDeserializationError,
    WakeupError,
)
from strom.consumer.interceptors import ConsumerInterceptor, ConsumerRebalanceListener
from strom.consumer.kafka_consumer import KafkaConsumer

__all__ = [
    "KafkaConsumer",
    "ConsumerConfig",
    "ConsumerRecord",
    "ConsumerRecords",
    "TopicPartition",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "ConsumerRebalanceListener",
    "ConsumerInterceptor",
    "ConsumerGroupMetadata",
    "ConsumerPartitionAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "CooperativeStickyAssignor",
    "CommitFailedError",
    "NoOffsetForPartitionError",
    "RebalanceInProgressError",
    "RecordDeserializationError",
    "WakeupError",
]
