"""Per-batch completion latch and the per-record future ``send`` returns.

Kafka counterparts: ``internals.ProduceRequestResult`` (one latch per batch) and ``internals.FutureRecordMetadata``
(a view of one record in that batch). When a batch is split, its result maps each record to its place in
the new batches (``split_to``) and the record's future follows it there: the batch keeps no per-record future
(only the records sent with a callback keep one, for the callback), so a future the caller drops dies at once
instead of aging in the garbage collector until its batch completes.

:class:`FutureRecordMetadata` follows the ``concurrent.futures.Future`` interface (``result``, ``exception``,
``done``, ``add_done_callback``, ``cancel`` ...) plus Kafka's ``get(timeout)``, but is not a subclass: it waits
on the batch's latch, so a record costs one small object instead of a lock and a condition. Use
:meth:`FutureRecordMetadata.as_concurrent_future` when a real ``concurrent.futures.Future`` is needed
(``asyncio.wrap_future``, ``concurrent.futures.wait``).

Thread-safety: thread-safe. The latch is set by the Sender thread; any thread may wait.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time as _time
from collections.abc import Callable
from typing import Any

from strom.common.errors import KafkaTimeoutError
from strom.common.structs import TopicPartition
from strom.producer.record import NO_TIMESTAMP, RecordMetadata

__all__ = ["ProduceRequestResult", "FutureRecordMetadata", "RecordErrorFn"]

log = logging.getLogger(__name__)

RecordErrorFn = Callable[[int], BaseException | None]
"""Maps a record's index in its batch to its error (``None`` = the record succeeded)."""

_CALLBACK_LOCK = threading.Lock()  # guards done-callback registration against completion (rarely contended)


class ProduceRequestResult:
    """The result of one batch's produce request (Kafka's ``ProduceRequestResult``). Thread-safe.

    ``set(base_offset, log_append_time, error_fn)`` stores the outcome, ``done()`` releases waiters.
    """

    __slots__ = ("topic_partition", "_event", "base_offset", "log_append_time", "_error_fn", "split_to",
                 "_watchers", "_listeners")

    def __init__(self, topic_partition: TopicPartition) -> None:
        self.topic_partition = topic_partition
        self._event = threading.Event()
        self.base_offset = -1
        self.log_append_time = NO_TIMESTAMP
        self._error_fn: RecordErrorFn | None = None
        # set (before this latch is released) when the batch was split: record i -> (its new result, index)
        self.split_to: list[tuple[ProduceRequestResult, int]] | None = None
        self._watchers: list[FutureRecordMetadata] | None = None  # futures with done callbacks to fire
        self._listeners: list[Callable[[ProduceRequestResult], Any]] | None = None  # see add_listener

    def split(self, split_to: list[tuple[ProduceRequestResult, int]]) -> None:
        """The batch was split: record ``i`` now lives at ``split_to[i]``; the futures waiting for done
        callbacks move with their records. Call before releasing this latch."""
        with _CALLBACK_LOCK:
            self.split_to = split_to
            watchers, self._watchers = self._watchers, None
            for future in watchers or ():
                result, _index = future._final()
                result._watch(future)
            listeners, self._listeners = self._listeners, None
        for fn in listeners or ():  # (their records moved: they look where, through the futures' _final())
            _run_listener(fn, self)

    def add_listener(self, fn: Callable[[ProduceRequestResult], Any]) -> None:
        """Call ``fn(self)`` once, when this batch completes or is split (on the Sender thread), or now on this
        thread if it already has: one call for all the records of a batch (``strom.aio``). Exceptions are logged.
        """
        with _CALLBACK_LOCK:
            if not self._event.is_set() and self.split_to is None:
                if self._listeners is None:
                    self._listeners = []
                self._listeners.append(fn)
                return
        _run_listener(fn, self)

    def _watch(self, future: FutureRecordMetadata) -> None:
        """Fire ``future``'s done callbacks when this batch completes (caller holds ``_CALLBACK_LOCK``)."""
        if self._watchers is None:
            self._watchers = []
        if future not in self._watchers:
            self._watchers.append(future)

    def fire_watchers(self) -> None:
        """After :meth:`done`: run the done callbacks of this batch's futures and its listeners (Sender
        thread)."""
        if self._watchers is None and self._listeners is None:
            return
        with _CALLBACK_LOCK:
            watchers, self._watchers = self._watchers, None
            listeners, self._listeners = self._listeners, None
        for future in watchers or ():
            future._fire_done_callbacks()
        for fn in listeners or ():
            _run_listener(fn, self)

    def set(self, base_offset: int, log_append_time: int, error_fn: RecordErrorFn | None) -> None:
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self._error_fn = error_fn

    def done(self) -> None:
        """Mark complete and wake every thread waiting on it."""
        self._event.set()

    def await_(self, timeout: float | None = None) -> bool:
        """Wait (``timeout`` in seconds, ``None`` = forever); ``True`` if completed."""
        return self._event.wait(timeout)

    def completed(self) -> bool:
        return self._event.is_set()

    def error(self, batch_index: int) -> BaseException | None:
        """The error of the record at ``batch_index`` (``None`` on success)."""
        return None if self._error_fn is None else self._error_fn(batch_index)

    def __repr__(self) -> str:
        return f"ProduceRequestResult({self.topic_partition}, done={self.completed()}, base_offset={self.base_offset})"


class FutureRecordMetadata:
    """The future of one record (Kafka's ``FutureRecordMetadata``). Thread-safe.

    Completes when its batch completes; ``result()`` returns :class:`RecordMetadata` or raises the record's
    error; ``get(timeout)`` is the same but raises :class:`KafkaTimeoutError` on timeout (Kafka's wording).
    Records cannot be cancelled: ``cancel()`` returns ``False``.
    """

    __slots__ = (
        "result_holder", "batch_index", "create_timestamp", "serialized_key_size", "serialized_value_size",
        "_callbacks", "__weakref__",
    )

    def __init__(self, result: ProduceRequestResult, batch_index: int, create_timestamp: int,
                 serialized_key_size: int, serialized_value_size: int) -> None:
        self.result_holder = result
        self.batch_index = batch_index
        self.create_timestamp = create_timestamp
        self.serialized_key_size = serialized_key_size
        self.serialized_value_size = serialized_value_size
        self._callbacks: list[_Entry] | None = None

    def _final(self) -> tuple[ProduceRequestResult, int]:
        """The batch result and index the record has now (after any splits)."""
        result, index = self.result_holder, self.batch_index
        while result.split_to is not None:
            result, index = result.split_to[index]
        return result, index

    # ------------------------------------------------------------------------------------------- values

    def value(self) -> RecordMetadata:
        """The metadata of a completed future (raises its error); follows splits."""
        result, index = self._final()
        error = result.error(index)
        if error is not None:
            raise error
        tp = result.topic_partition
        offset = -1 if result.base_offset == -1 else result.base_offset + index
        timestamp = self.create_timestamp if result.log_append_time == NO_TIMESTAMP else result.log_append_time
        return RecordMetadata(tp.topic, tp.partition, offset, timestamp,
                              self.serialized_key_size, self.serialized_value_size)

    def _wait(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else _time.monotonic() + timeout
        result: ProduceRequestResult | None = self.result_holder
        index = self.batch_index
        while result is not None:
            remaining = None if deadline is None else max(0.0, deadline - _time.monotonic())
            if not result.await_(remaining):
                return False
            split = result.split_to  # set before the old batch's latch is released, so visible here
            result, index = split[index] if split is not None else (None, index)
        return True

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Kafka's ``get``: wait (``timeout`` seconds, ``None`` = forever) and return the metadata.

        Raises the record's error, or :class:`KafkaTimeoutError` "Timeout after waiting for N ms.".
        """
        if not self._wait(timeout):
            raise KafkaTimeoutError(f"Timeout after waiting for {int((timeout or 0) * 1000)} ms.")
        return self.value()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """``concurrent.futures.Future.result``: raises ``concurrent.futures.TimeoutError`` on timeout."""
        if not self._wait(timeout):
            raise concurrent.futures.TimeoutError()
        return self.value()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._wait(timeout):
            raise concurrent.futures.TimeoutError()
        try:
            self.value()
        except BaseException as e:
            return e
        return None

    def done(self) -> bool:
        # a split batch's map is set before its latch opens, so the record's latest batch decides
        return self._final()[0].completed()

    is_done = done

    def succeeded(self) -> bool:
        return self.done() and self.exception(0) is None

    def failed(self) -> bool:
        return self.done() and self.exception(0) is not None

    def cancel(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self.done()

    # ------------------------------------------------------------------------------------ done callbacks

    def add_done_callback(self, fn: Callable[[FutureRecordMetadata], Any]) -> None:
        """Call ``fn(self)`` once when the future completes: at once on this thread if it already has,
        else on the Sender thread. Exceptions from ``fn`` are logged.

        Protocol (no lock on the Sender's per-record fast path): register first, then look at the latch; if
        it is already released, whoever removes ``fn`` from the list (this thread or the Sender) runs it.
        """
        entry = _Entry(fn)
        with _CALLBACK_LOCK:
            if self._callbacks is None:
                self._callbacks = []
            self._callbacks.append(entry)
            result = self._final()[0]
            if not result.completed():  # (else the check below runs it here)
                result._watch(self)
        if self.done():
            with _CALLBACK_LOCK:
                mine = self._callbacks is not None and entry in self._callbacks
                if mine:
                    self._callbacks.remove(entry)  # type: ignore[union-attr]
            if mine:
                _run_callback(fn, self)

    def _fire_done_callbacks(self) -> None:
        """Called when the batch this future watches has released its latch (Sender thread)."""
        if self._callbacks is None:
            return
        with _CALLBACK_LOCK:
            callbacks, self._callbacks = self._callbacks, None
        if callbacks:
            for entry in callbacks:
                _run_callback(entry.fn, self)

    def as_concurrent_future(self) -> concurrent.futures.Future[RecordMetadata]:
        """A real ``concurrent.futures.Future`` completed together with this one."""
        cf: concurrent.futures.Future[RecordMetadata] = concurrent.futures.Future()
        cf.set_running_or_notify_cancel()

        def transfer(f: FutureRecordMetadata) -> None:
            try:
                cf.set_result(f.value())
            except BaseException as e:
                cf.set_exception(e)

        self.add_done_callback(transfer)
        return cf

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return (f"FutureRecordMetadata({self.result_holder.topic_partition}, index={self.batch_index}, "
                f"{state})")


class _Entry:
    """A registered done callback (identity-compared, so the same function may be added twice)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[FutureRecordMetadata], Any]) -> None:
        self.fn = fn


def _run_callback(fn: Callable[[FutureRecordMetadata], Any], future: FutureRecordMetadata) -> None:
    try:
        fn(future)
    except Exception:
        log.exception("exception calling done callback for %r", future)


def _run_listener(fn: Callable[[ProduceRequestResult], Any], result: ProduceRequestResult) -> None:
    try:
        fn(result)
    except Exception:
        log.error("Error executing a batch listener of %s", result.topic_partition, exc_info=True)
