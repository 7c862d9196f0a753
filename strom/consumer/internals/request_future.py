"""The result of an asynchronous consumer request.

Kafka counterpart: ``org.apache.kafka.clients.consumer.internals.RequestFuture`` (+ ``RequestFutureAdapter``,
``RequestFutureListener``). A future completes once, with a value or an exception; listeners run on the thread
that completes it (the thread polling the network), or at once when added to a completed future. ``compose``
maps a response to another future through an adapter; ``chain`` forwards the outcome.

Thread-safety: completion and listener registration are guarded by a lock; listeners run outside it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from strom.common.errors import IllegalStateError, KafkaError

__all__ = ["RequestFuture", "coordinator_not_available", "no_brokers_available"]

_UNSET: Any = object()


class RequestFuture:
    """Kafka's ``RequestFuture``."""

    __slots__ = ("_value", "_exception", "_lock", "_listeners")

    def __init__(self) -> None:
        self._value: Any = _UNSET
        self._exception: BaseException | None = None
        self._lock = threading.Lock()
        self._listeners: list[tuple[Callable[[Any], None] | None, Callable[[BaseException], None] | None]] = []

    @classmethod
    def completed(cls, value: Any = None) -> RequestFuture:
        f = cls()
        f.complete(value)
        return f

    @classmethod
    def failure(cls, exc: BaseException) -> RequestFuture:
        f = cls()
        f.raise_(exc)
        return f

    def is_done(self) -> bool:
        return self._value is not _UNSET or self._exception is not None

    def succeeded(self) -> bool:
        return self._value is not _UNSET

    def failed(self) -> bool:
        return self._exception is not None

    def is_retriable(self) -> bool:
        return isinstance(self._exception, KafkaError) and self._exception.retriable

    @property
    def value(self) -> Any:
        if not self.succeeded():
            raise IllegalStateError("Attempt to retrieve value from future which hasn't successfully completed")
        return self._value

    @property
    def exception(self) -> BaseException:
        if self._exception is None:
            raise IllegalStateError("Attempt to retrieve exception from future which hasn't failed")
        return self._exception

    def complete(self, value: Any = None) -> None:
        with self._lock:
            if self.is_done():
                raise IllegalStateError("Invalid attempt to complete a request future which is already complete")
            self._value = value
            listeners, self._listeners = self._listeners, []
        for on_success, _ in listeners:
            if on_success is not None:
                on_success(value)

    def raise_(self, exc: BaseException) -> None:
        with self._lock:
            if self.is_done():
                raise IllegalStateError("Invalid attempt to complete a request future which is already complete")
            self._exception = exc
            listeners, self._listeners = self._listeners, []
        for _, on_failure in listeners:
            if on_failure is not None:
                on_failure(exc)

    def add_listener(self, on_success: Callable[[Any], None] | None = None,
                     on_failure: Callable[[BaseException], None] | None = None) -> RequestFuture:
        with self._lock:
            if not self.is_done():
                self._listeners.append((on_success, on_failure))
                return self
        if self._exception is not None:
            if on_failure is not None:
                on_failure(self._exception)
        elif on_success is not None:
            on_success(self._value)
        return self

    def compose(self, adapter: Callable[[Any, RequestFuture], None]) -> RequestFuture:
        """A new future completed by ``adapter(value, new_future)`` on success; failures pass through."""
        out = RequestFuture()
        self.add_listener(lambda value: adapter(value, out), out.raise_)
        return out

    def chain(self, other: RequestFuture) -> None:
        """Complete ``other`` with this future's outcome."""
        self.add_listener(other.complete, other.raise_)

    def __repr__(self) -> str:
        state = "pending" if not self.is_done() else (f"failed: {self._exception!r}" if self.failed() else "done")
        return f"RequestFuture({state})"


def coordinator_not_available() -> RequestFuture:
    from strom.common.error_codes import CoordinatorNotAvailableError

    return RequestFuture.failure(CoordinatorNotAvailableError())


def no_brokers_available() -> RequestFuture:
    from strom.common.errors import KafkaConnectionError

    return RequestFuture.failure(KafkaConnectionError("No brokers available to send the request to"))
