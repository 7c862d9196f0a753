"""Consumer interceptors and the rebalance listener protocol.

Kafka counterparts: ``ConsumerInterceptor``, ``internals.ConsumerInterceptors`` and
``ConsumerRebalanceListener``.

``on_consume`` runs in ``poll`` before records are returned (each interceptor sees the previous one's
result; an exception is logged and the chain goes on with the last good result); ``on_commit`` runs when
offsets are committed (sync or async; on the caller's thread). Exceptions are logged and swallowed, as in
Kafka.

The rebalance listener's callbacks run on the caller's thread inside ``poll`` (or ``unsubscribe`` /
``close``); an exception raised there is re-raised from ``poll`` after the rebalance step completes.

Thread-safety: the chain holds no state; interceptors run on the thread calling the consumer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from strom.common.structs import OffsetAndMetadata, TopicPartition
from strom.consumer.consumer_records import ConsumerRecords

__all__ = [
    "ConsumerInterceptor",
    "ConsumerInterceptors",
    "ConsumerRebalanceListener",
    "NoOpConsumerRebalanceListener",
    "make_interceptors",
]

log = logging.getLogger(__name__)


@runtime_checkable
class ConsumerInterceptor(Protocol):
    """Kafka's ``ConsumerInterceptor``. Optional ``configure(configs)`` is called after construction."""

    def on_consume(self, records: ConsumerRecords) -> ConsumerRecords:
        """Called before ``poll`` returns; may return modified records."""

    def on_commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """Called when offsets were committed."""

    def close(self) -> None:
        """Called when the consumer closes."""


class ConsumerInterceptors:
    """The ordered interceptor chain (Kafka's ``ConsumerInterceptors``)."""

    __slots__ = ("interceptors",)

    def __init__(self, interceptors: Iterable[Any] = ()) -> None:
        self.interceptors: tuple[Any, ...] = tuple(interceptors)

    def __bool__(self) -> bool:
        return bool(self.interceptors)

    def __len__(self) -> int:
        return len(self.interceptors)

    def on_consume(self, records: ConsumerRecords) -> ConsumerRecords:
        intercepted = records
        for interceptor in self.interceptors:
            try:
                intercepted = interceptor.on_consume(intercepted)
            except Exception:
                log.warning("Error executing interceptor onConsume callback", exc_info=True)
        return intercepted

    def on_commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        for interceptor in self.interceptors:
            try:
                on_commit = getattr(interceptor, "on_commit", None)
                if callable(on_commit):
                    on_commit(offsets)
            except Exception:
                log.warning("Error executing interceptor onCommit callback", exc_info=True)

    def close(self) -> None:
        for interceptor in self.interceptors:
            try:
                close = getattr(interceptor, "close", None)
                if callable(close):
                    close()
            except Exception:
                log.error("Failed to close consumer interceptor", exc_info=True)


def make_interceptors(specs: Sequence[Any], configs: Mapping[str, Any] | None = None) -> ConsumerInterceptors:
    """Build the chain from ``interceptor.classes``: classes / dotted paths are instantiated without arguments
    and ``configure(configs)`` is called when present; instances are used as given."""
    from strom.config.config_def import get_configured_instance

    built: list[Any] = [
        get_configured_instance(spec, "interceptor.classes", configs, "on_consume", "ConsumerInterceptor")
        for spec in specs
    ]
    return ConsumerInterceptors(built)


@runtime_checkable
class ConsumerRebalanceListener(Protocol):
    """Kafka's ``ConsumerRebalanceListener``. ``on_partitions_lost`` is optional: without it, lost partitions
    are reported through ``on_partitions_revoked`` (Kafka's default method)."""

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        """Partitions taken away in a rebalance (commit their offsets here)."""

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        """Partitions newly given to this consumer (all of them with eager assignors, only the added ones
        with cooperative ones)."""


class NoOpConsumerRebalanceListener:
    """A listener that does nothing (Kafka's ``NoOpConsumerRebalanceListener``)."""

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        pass

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        pass

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        pass
