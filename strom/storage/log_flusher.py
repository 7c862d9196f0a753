"""The thread that fsyncs logs when an append reaches ``flush.messages`` or a segment rolls.

Kafka counterpart: none as a class. Kafka's ``UnifiedLog.append`` calls ``flush`` inline when
``unflushedMessages >= flush.messages`` (on a request handler thread, one of many) and a roll schedules
``flushUptoOffsetExclusive`` on the ``kafka-scheduler`` pool. strom handles requests on one event loop, where an
fsync would stall every connection, so appends hand the flush to this thread and get a future that completes
once the records are durable; the produce path answers only after that future (with ``flush.messages=1`` an
acknowledged record has been fsynced, as in Kafka).

Requests for the same log coalesce (group commit): while one fsync runs, later appends queue up and the next
round flushes all of them with one fsync per file. :meth:`Log.flush` advances the recovery point only after
its fsyncs, so the recovery-point checkpoint never claims more than is durable.

Threading: thread-safe; one daemon thread. :meth:`shutdown` flushes whatever is still queued, then stops.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol

__all__ = ["LogFlusher", "Flushable"]

log = logging.getLogger(__name__)


class Flushable(Protocol):
    """What the flusher needs of a log (:class:`strom.storage.log.Log`)."""

    @property
    def dir(self) -> str: ...

    def flush(self, up_to_offset: int | None = None) -> None: ...


class LogFlusher:
    """Runs ``log.flush(up_to)`` on a dedicated thread and completes the futures of the appends it covers."""

    def __init__(self, name: str = "log-flusher", on_flush: Callable[[Flushable], None] | None = None) -> None:
        self._cond = threading.Condition()
        # log -> (highest offset asked for, futures waiting); dicts keep insertion order: first asked, first done
        self._pending: dict[Flushable, tuple[int, list[Future[None]]]] = {}
        self._stopped = False
        self._on_flush = on_flush  # called after each fsync round of a log (tests)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def request(self, lg: Flushable, up_to_offset: int) -> Future[None]:
        """Flush ``lg`` up to ``up_to_offset`` (exclusive) soon; the future completes when that is durable, or
        with the ``KafkaStorageError`` the flush raised. After :meth:`shutdown` the flush runs on the caller."""
        fut: Future[None] = Future()
        with self._cond:
            if not self._stopped:
                target, waiters = self._pending.get(lg, (up_to_offset, []))
                waiters.append(fut)
                self._pending[lg] = (max(target, up_to_offset), waiters)
                self._cond.notify()
                return fut
        _run_flush(lg, up_to_offset, [fut])
        return fut

    @property
    def queued(self) -> int:
        with self._cond:
            return len(self._pending)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopped:
                    self._cond.wait()
                if not self._pending:
                    return
                lg = next(iter(self._pending))
                target, waiters = self._pending.pop(lg)
            _run_flush(lg, target, waiters)
            if self._on_flush is not None:
                self._on_flush(lg)

    def shutdown(self) -> None:
        """Flush what is queued, then stop the thread (idempotent)."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join()


def _run_flush(lg: Flushable, target: int, waiters: list[Future[None]]) -> None:
    try:
        lg.flush(target)
    except Exception as e:  # KafkaStorageError from a failed fsync: every waiting append learns of it
        log.error("flush of %s failed: %s", lg.dir, e)
        for fut in waiters:
            fut.set_exception(e)
        return
    for fut in waiters:
        fut.set_result(None)
