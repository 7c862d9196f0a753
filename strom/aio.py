"""asyncio front ends of strom's clients: :class:`AsyncKafkaProducer` and :class:`AsyncKafkaConsumer`.

They wrap :class:`~strom.producer.kafka_producer.KafkaProducer` and :class:`~strom.consumer.KafkaConsumer` (same
configs, same behaviour, same metrics) so that a coroutine never blocks its event loop:

* the producer's ``send`` appends to the accumulator on the calling task when it cannot block (the topic's
  metadata is cached and the buffer pool has a batch's worth of memory free: the usual case) and otherwise waits in
  a worker thread for metadata or memory (``max.block.ms`` still bounds it). The returned asyncio futures are
  completed on the loop: the producer's I/O thread tells the loop once per completed batch
  (``loop.call_soon_threadsafe``; a split batch hands its records on to its parts), so the I/O thread does no
  per-record work for them. ``flush``, ``close`` and the transactional calls wait in worker threads;
* the consumer runs every call in one thread of its own (a ``KafkaConsumer`` is used by one thread at a time), so
  ``poll`` waits there. A ``poll`` whose task is cancelled wakes the consumer up (``wakeup()``); records it had
  already taken (positions moved past them) are handed to the next ``poll`` instead of being lost.

Both are async context managers (``async with AsyncKafkaProducer(...) as producer:``); the consumer is an async
iterator of records (``async for record in consumer:``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

from strom.common.structs import OffsetAndMetadata, TopicPartition
from strom.consumer import ConsumerRecord, ConsumerRecords, KafkaConsumer
from strom.consumer.errors import WakeupError
from strom.producer.internals.future_record_metadata import FutureRecordMetadata, ProduceRequestResult
from strom.producer.kafka_producer import KafkaProducer
from strom.producer.record import ProducerRecord, RecordMetadata

__all__ = ["AsyncKafkaProducer", "AsyncKafkaConsumer"]

T = TypeVar("T")


class AsyncKafkaProducer:
    """:class:`~strom.producer.kafka_producer.KafkaProducer` for asyncio code (see the module docstring).

    Construction takes the producer's configs as ``KafkaProducer`` does and, like it, does no network I/O.
    """

    def __init__(self, configs: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.producer = KafkaProducer(configs, **kwargs)
        """The wrapped producer (its ``metrics()``, ``client_id``, ...)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        # The records awaited, by the batch they are in (loop thread only): a batch tells the loop once, when it
        # completes, and the loop completes its records' futures (no per-record work on the I/O thread).
        self._waiting: dict[ProduceRequestResult, list[tuple[FutureRecordMetadata, asyncio.Future[Any]]]] = {}
        self._completed: deque[ProduceRequestResult] = deque()  # batches done, not yet settled (I/O → loop)
        self._wake_pending = False

    def _bound_loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError("an AsyncKafkaProducer is used from one event loop (the one of its first send)")
        return loop

    def _await_record(self, future: FutureRecordMetadata, out: asyncio.Future[Any]) -> None:
        """On the loop: complete ``out`` when ``future``'s batch (the one it is in now) completes."""
        result = future.result_holder
        if result.split_to is not None:  # (a split since: the part it is in now)
            result = future._final()[0]
        entries = self._waiting.get(result)
        if entries is None:
            self._waiting[result] = [(future, out)]
            result.add_listener(self._on_batch_done)  # (called at once if the batch is already done)
        else:
            entries.append((future, out))

    def _on_batch_done(self, result: ProduceRequestResult) -> None:
        """A batch completed or was split: on the producer's I/O thread (or the loop, if it already had)."""
        self._completed.append(result)
        if not self._wake_pending:
            self._wake_pending = True
            try:
                self._loop.call_soon_threadsafe(self._settle)  # type: ignore[union-attr]
            except RuntimeError:  # the loop was closed meanwhile: nobody is left to tell
                pass

    def _settle(self) -> None:
        """On the loop: complete the futures of the records of every batch done so far."""
        self._wake_pending = False  # (first: a batch done from now on schedules another call)
        completed, waiting = self._completed, self._waiting
        while completed:
            result = completed.popleft()
            split = result.split_to is not None
            for future, out in waiting.pop(result, ()):
                if split:  # the record is in one of the parts now: wait for that one
                    self._await_record(future, out)
                elif not out.done():
                    try:
                        out.set_result(future.value())
                    except BaseException as e:  # the record's error, for the task that awaits it
                        out.set_exception(e)

    async def send(self, record: ProducerRecord | str, value: Any = None, *, key: Any = None,
                   partition: int | None = None, timestamp: int | None = None,
                   headers: Any = None) -> asyncio.Future[RecordMetadata]:
        """Append a record (a :class:`ProducerRecord`, or a topic and the record's fields) and return a future of
        its :class:`RecordMetadata`, failed with the record's error. Returns once the record is in the
        accumulator; errors ``KafkaProducer.send`` raises (serialization, a closed producer) are raised here."""
        loop = self._bound_loop()
        producer = self.producer
        if type(record) is str:
            if not producer._send_may_block(record, partition):
                future = producer.send(record, value=value, key=key, partition=partition, timestamp=timestamp,
                                       headers=headers)
            else:
                future = await loop.run_in_executor(None, partial(
                    producer.send, record, value=value, key=key, partition=partition, timestamp=timestamp,
                    headers=headers))
        elif isinstance(record, ProducerRecord) and not producer._send_may_block(record.topic, record.partition):
            future = producer.send(record)
        else:
            future = await loop.run_in_executor(None, producer.send, record)
        out: asyncio.Future[RecordMetadata] = loop.create_future()
        self._await_record(future, out)
        return out

    async def send_and_wait(self, record: ProducerRecord | str, value: Any = None, *, key: Any = None,
                            partition: int | None = None, timestamp: int | None = None,
                            headers: Any = None) -> RecordMetadata:
        """:meth:`send`, then wait for the acknowledgement: the record's metadata, or its error raised."""
        return await (await self.send(record, value, key=key, partition=partition, timestamp=timestamp,
                                      headers=headers))

    async def send_many(self, topic: str, values: Any, keys: Any = None, *, partition: int | None = None,
                        timestamp: int | None = None) -> list[asyncio.Future[RecordMetadata]]:
        """``KafkaProducer.send_many`` (the bulk path) from a worker thread: one future per batch segment, of the
        metadata of its last record."""
        loop = self._bound_loop()
        futures = await loop.run_in_executor(None, partial(self.producer.send_many, topic, values, keys,
                                                           partition=partition, timestamp=timestamp))
        outs = []
        for future in futures:
            out: asyncio.Future[RecordMetadata] = loop.create_future()
            self._await_record(future, out)
            outs.append(out)
        return outs

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every record sent before the call has completed (``KafkaProducer.flush``)."""
        await asyncio.get_running_loop().run_in_executor(None, self.producer.flush, timeout)

    async def partitions_for(self, topic: str) -> list[Any]:
        """The topic's partitions (waiting for its metadata in a worker thread)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.producer.partitions_for, topic)

    async def init_transactions(self, timeout: float | None = None) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.producer.init_transactions, timeout)

    def begin_transaction(self) -> None:
        """Local: no I/O (``KafkaProducer.begin_transaction``)."""
        self.producer.begin_transaction()

    async def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, Any], group_metadata: Any,
                                          timeout: float | None = None) -> None:
        await asyncio.get_running_loop().run_in_executor(
            None, self.producer.send_offsets_to_transaction, offsets, group_metadata, timeout)

    async def commit_transaction(self, timeout: float | None = None) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.producer.commit_transaction, timeout)

    async def abort_transaction(self, timeout: float | None = None) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.producer.abort_transaction, timeout)

    def metrics(self) -> dict[Any, Any]:
        return self.producer.metrics()

    async def close(self, timeout: float | None = None) -> None:
        """Send what is buffered and stop (``KafkaProducer.close``), waiting in a worker thread."""
        await asyncio.get_running_loop().run_in_executor(None, self.producer.close, timeout)

    async def __aenter__(self) -> AsyncKafkaProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncKafkaConsumer:
    """:class:`~strom.consumer.KafkaConsumer` for asyncio code (see the module docstring): every call runs on the
    consumer's own thread. Construction takes the consumer's configs as ``KafkaConsumer`` does."""

    def __init__(self, configs: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="strom-async-consumer")
        self.consumer = KafkaConsumer(configs, **kwargs)
        """The wrapped consumer; call it only through this object (it runs on the consumer's thread)."""
        self._pending: asyncio.Future[ConsumerRecords] | None = None
        self._woken = False  # a cancelled poll called wakeup(): the flag may still be set for the next call
        # Records an `async for` took from a poll and has not handed out yet (its loop stopped): the next poll or
        # iteration hands them out first, and commit() without offsets commits only what was handed out.
        self._undelivered: deque[ConsumerRecord] = deque()
        self._closed = False

    def _run(self, fn: Callable[..., T], *args: Any) -> Awaitable[T]:
        if self._closed:
            raise RuntimeError("the consumer is closed")
        return asyncio.get_running_loop().run_in_executor(self._thread, self._on_thread, fn, *args)

    def _on_thread(self, fn: Callable[..., T], *args: Any) -> T:
        if self._woken:  # a wakeup() meant for a poll that ended first must not fail this call
            self._woken = False
            client = self.consumer._client
            if client is not None:
                try:
                    client.maybe_trigger_wakeup()
                except WakeupError:
                    pass
        return fn(*args)

    async def subscribe(self, topics: Iterable[str] | str, listener: Any = None) -> None:
        names = [topics] if isinstance(topics, str) else list(topics)
        self._forget()
        await self._run(self.consumer.subscribe, names, listener)

    async def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._forget()
        await self._run(self.consumer.assign, list(partitions))

    async def unsubscribe(self) -> None:
        self._forget()
        await self._run(self.consumer.unsubscribe)

    async def assignment(self) -> set[TopicPartition]:
        return await self._run(self.consumer.assignment)

    async def poll(self, timeout: float | timedelta | None = None) -> ConsumerRecords:
        """Records, waiting up to ``timeout`` seconds for some (``KafkaConsumer.poll``). Cancelled, the wait
        ends (``wakeup``) and records already taken come with the next call."""
        if self._undelivered:
            by_partition: dict[TopicPartition, list[ConsumerRecord]] = {}
            is_assigned = self.consumer._subscriptions.is_assigned  # (a rebalance may have taken some away)
            while self._undelivered:
                record = self._undelivered.popleft()
                tp = TopicPartition(record.topic, record.partition)
                if is_assigned(tp):
                    by_partition.setdefault(tp, []).append(record)
            if by_partition:
                return ConsumerRecords(by_partition)
        pending = self._pending
        if pending is None:
            pending = self._pending = asyncio.ensure_future(self._run(self._poll_or_nothing, timeout))
        try:
            records = await asyncio.shield(pending)
        except asyncio.CancelledError:
            if not pending.done():
                self._woken = True
                self.consumer.wakeup()  # (thread-safe)
            raise  # `_pending` stays: the records it took, if any, go to the next poll
        except BaseException:
            self._pending = None  # the poll's error is the caller's now
            raise
        self._pending = None
        return records

    def _poll_or_nothing(self, timeout: float | timedelta | None) -> ConsumerRecords:
        try:
            return self.consumer.poll(timeout)
        except WakeupError:  # a cancelled poll: nothing was taken
            return ConsumerRecords.EMPTY

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
                     timeout: float | timedelta | None = None) -> None:
        """``commit_sync``: the given offsets, or the positions of every assigned partition, except that a
        partition whose records an ``async for`` has taken but not handed out yet is committed up to them."""
        if offsets is None and self._undelivered:
            held: dict[TopicPartition, OffsetAndMetadata] = {}
            for record in self._undelivered:
                held.setdefault(TopicPartition(record.topic, record.partition),
                                OffsetAndMetadata(record.offset, "", record.leader_epoch))

            def positions() -> dict[TopicPartition, OffsetAndMetadata]:
                consumed = self.consumer._subscriptions.all_consumed()
                return {**consumed, **{tp: om for tp, om in held.items() if tp in consumed}}

            offsets = await self._run(positions)
        await self._run(self.consumer.commit_sync, offsets, timeout)

    async def committed(self, partitions: TopicPartition | Iterable[TopicPartition],
                        timeout: float | None = None) -> Any:
        wanted = partitions if isinstance(partitions, TopicPartition) else list(partitions)
        return await self._run(self.consumer.committed, wanted, timeout)

    async def poll_arrow(self, timeout: float | timedelta | None = None, max_records: int | None = None) -> Any:
        """``KafkaConsumer.poll_arrow`` (a ``pyarrow.Table``) on the consumer's thread."""
        return await self._run(partial(self.consumer.poll_arrow, timeout, max_records=max_records))

    def _forget(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Drop held records of ``partitions`` (all when ``None``): their positions were moved."""
        held = self._undelivered  # (changed in place: an `async for` in progress holds it)
        if held:
            wanted = None if partitions is None else set(partitions)
            kept = [r for r in held if wanted is not None and TopicPartition(r.topic, r.partition) not in wanted]
            held.clear()
            held.extend(kept)

    async def seek(self, partition: TopicPartition, offset: int) -> None:
        self._forget([partition])
        await self._run(self.consumer.seek, partition, offset)

    async def position(self, partition: TopicPartition) -> int:
        return await self._run(self.consumer.position, partition)

    async def seek_to_beginning(self, partitions: Iterable[TopicPartition] = ()) -> None:
        tps = list(partitions)
        self._forget(tps or None)
        await self._run(self.consumer.seek_to_beginning, tps)

    async def seek_to_end(self, partitions: Iterable[TopicPartition] = ()) -> None:
        tps = list(partitions)
        self._forget(tps or None)
        await self._run(self.consumer.seek_to_end, tps)

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._run(self.consumer.end_offsets, list(partitions))

    async def group_metadata(self) -> Any:
        return await self._run(self.consumer.group_metadata)

    async def pause(self, partitions: Iterable[TopicPartition]) -> None:
        await self._run(self.consumer.pause, list(partitions))

    async def resume(self, partitions: Iterable[TopicPartition]) -> None:
        await self._run(self.consumer.resume, list(partitions))

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._run(self.consumer.beginning_offsets, list(partitions))

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, Any]:
        return await self._run(self.consumer.offsets_for_times, dict(timestamps))

    async def partitions_for(self, topic: str) -> list[Any]:
        return await self._run(self.consumer.partitions_for, topic)

    async def list_topics(self) -> dict[str, list[Any]]:
        return await self._run(self.consumer.list_topics)

    def metrics(self) -> dict[Any, Any]:
        return self.consumer.metrics()

    async def close(self) -> None:
        """Leave the group (committing as ``KafkaConsumer.close`` does) and stop the consumer's thread."""
        if self._closed:
            return
        if self._pending is not None and not self._pending.done():
            self._woken = True
            self.consumer.wakeup()
        await self._run(self.consumer.close)
        self._closed = True
        self._thread.shutdown(wait=False)

    async def __aenter__(self) -> AsyncKafkaConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self._records()

    async def _records(self) -> AsyncIterator[ConsumerRecord]:
        undelivered = self._undelivered
        while True:
            if not undelivered:
                undelivered.extend(await self.poll(1.0))
            while undelivered:
                yield undelivered.popleft()  # (a loop that stops here leaves the rest for the next poll)
