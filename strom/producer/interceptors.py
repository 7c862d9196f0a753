"""Producer interceptors: user hooks around ``send`` and acknowledgement.

Kafka counterparts: ``ProducerInterceptor``, ``internals.ProducerInterceptors`` and ``KafkaProducer``'s private
``InterceptorCallback``.

Exceptions raised by an interceptor are logged and swallowed (SPEC §2.5, §18 items 10-11): ``on_send`` keeps
going with the last record an interceptor successfully returned; ``on_acknowledgement`` / ``on_send_error``
go on with the next interceptor.

Thread-safety: :class:`ProducerInterceptors` holds no mutable state of its own; ``on_send`` runs on the
caller's threads and ``on_acknowledgement`` on the Sender thread, so interceptors must be thread-safe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from strom.common.structs import TopicPartition
from strom.producer.record import UNKNOWN_PARTITION, ProducerRecord, RecordMetadata

__all__ = [
    "ProducerInterceptor",
    "ProducerInterceptors",
    "InterceptorCallback",
    "Callback",
    "make_interceptors",
]

log = logging.getLogger(__name__)

Callback = Callable[[RecordMetadata | None, BaseException | None], None]
"""A send callback: ``(metadata, exception)``, exactly one of them non-``None`` (SPEC §18 item 9)."""


@runtime_checkable
class ProducerInterceptor(Protocol):
    """Kafka's ``ProducerInterceptor``. Optional ``configure(configs)`` is called after construction."""

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        """Called before serialization; may return a modified record."""

    def on_acknowledgement(self, metadata: RecordMetadata, exception: BaseException | None) -> None:
        """Called on the Sender thread when the record is acknowledged or fails (also for send errors)."""

    def close(self) -> None:
        """Called when the producer closes."""


class ProducerInterceptors:
    """The ordered interceptor chain (Kafka's ``ProducerInterceptors``). Thread-safe."""

    __slots__ = ("interceptors",)

    def __init__(self, interceptors: Iterable[ProducerInterceptor] = ()) -> None:
        self.interceptors: tuple[ProducerInterceptor, ...] = tuple(interceptors)

    def __len__(self) -> int:
        return len(self.interceptors)

    def __bool__(self) -> bool:
        return bool(self.interceptors)

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        """Run every ``on_send`` in order, each seeing the previous result; exceptions are logged and the
        chain continues with the latest good record."""
        intercepted = record
        for interceptor in self.interceptors:
            try:
                intercepted = interceptor.on_send(intercepted)
            except Exception:
                log.warning("Error executing interceptor onSend callback for topic: %s, partition: %s",
                            record.topic, record.partition, exc_info=True)
        return intercepted

    def on_acknowledgement(self, metadata: RecordMetadata, exception: BaseException | None) -> None:
        """Run every ``on_acknowledgement``; exceptions are logged and swallowed."""
        for interceptor in self.interceptors:
            try:
                interceptor.on_acknowledgement(metadata, exception)
            except Exception:
                log.warning("Error executing interceptor onAcknowledgement callback", exc_info=True)

    def on_send_error(self, record: ProducerRecord | None, tp: TopicPartition | None,
                      exception: BaseException) -> None:
        """A send failed before reaching the accumulator: tell every interceptor through
        ``on_acknowledgement`` with placeholder metadata (-1 offset; the partition is ``tp``'s, the record's
        or -1) — Kafka's ``onSendError``."""
        for interceptor in self.interceptors:
            try:
                if record is None and tp is None:
                    interceptor.on_acknowledgement(None, exception)  # type: ignore[arg-type]
                else:
                    if tp is None:
                        assert record is not None
                        partition = record.partition if record.partition is not None else UNKNOWN_PARTITION
                        tp = TopicPartition(record.topic, partition)
                    interceptor.on_acknowledgement(RecordMetadata.unknown(tp), exception)
            except Exception:
                log.warning("Error executing interceptor onAcknowledgement callback", exc_info=True)

    def close(self) -> None:
        """Close every interceptor; exceptions are logged."""
        for interceptor in self.interceptors:
            try:
                close = getattr(interceptor, "close", None)
                if callable(close):
                    close()
            except Exception:
                log.error("Failed to close producer interceptor", exc_info=True)


class InterceptorCallback:
    """Runs the interceptors' ``on_acknowledgement`` then the user callback (Kafka's ``InterceptorCallback``).

    Interceptors always receive metadata (a -1 placeholder on error); the user callback receives ``(None,
    exception)`` on error, so exactly one argument is non-``None`` (SPEC §18 item 9; Kafka 3.x passes the
    placeholder to the user too). Runs on the Sender thread.
    """

    __slots__ = ("user_callback", "interceptors", "tp")

    def __init__(self, user_callback: Callback | None, interceptors: ProducerInterceptors,
                 tp: TopicPartition) -> None:
        self.user_callback = user_callback
        self.interceptors = interceptors
        self.tp = tp

    def __call__(self, metadata: RecordMetadata | None, exception: BaseException | None) -> None:
        if self.interceptors:
            self.interceptors.on_acknowledgement(
                metadata if metadata is not None else RecordMetadata.unknown(self.tp), exception
            )
        if self.user_callback is not None:
            self.user_callback(None if exception is not None else metadata, exception)


def make_interceptors(specs: Sequence[Any], configs: Mapping[str, Any] | None = None) -> ProducerInterceptors:
    """Build the chain from ``interceptor.classes`` entries: classes / dotted paths are instantiated without
    arguments and ``configure(configs)`` is called when present; instances are used as given."""
    from strom.config.config_def import get_configured_instance

    built: list[ProducerInterceptor] = [
        get_configured_instance(spec, "interceptor.classes", configs, "on_send", "ProducerInterceptor")
        for spec in specs
    ]
    return ProducerInterceptors(built)
