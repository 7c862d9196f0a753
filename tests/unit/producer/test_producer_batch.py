"""ProducerBatch and FutureRecordMetadata: append, exactly-once completion, callbacks, split, timing."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from typing import Any

import pytest

from strom.common.error_codes import MessageTooLargeError, RecordListTooLargeError
from strom.common.errors import IllegalStateError, KafkaError, KafkaTimeoutError
from strom.common.structs import TopicPartition
from strom.producer.internals.future_record_metadata import FutureRecordMetadata
from strom.producer.internals.producer_batch import CompressionRatioEstimator, FinalState, ProducerBatch
from strom.producer.record import RecordMetadata
from strom.record.records import CompressionType, MemoryRecordsBuilder, RecordBatch

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

TP = TopicPartition("t", 2)


def new_batch(write_limit: int = 1024, created_ms: int = 1000, compression: int = 0) -> ProducerBatch:
    builder = MemoryRecordsBuilder(compression, write_limit=write_limit)
    return ProducerBatch(TP, builder, created_ms, buffer=bytearray(write_limit),
                         compression_ratio_estimator=CompressionRatioEstimator())


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, Any]] = []

    def cb(self, i: int) -> Any:
        return lambda m, e: self.calls.append((i, m, e))


def test_try_append_until_full() -> None:
    """§18 item 38: records go into the batch while it has room; a full batch refuses more."""
    batch = new_batch(write_limit=400)
    futures = []
    while (f := batch.try_append(1000 + len(futures), b"k", b"v" * 50, (), None, 1005)) is not None:
        futures.append(f)
    assert batch.record_count == len(futures) > 1
    assert batch.is_full() or batch.estimated_size_in_bytes() > 300
    assert [f.batch_index for f in futures] == list(range(len(futures)))
    assert batch.last_append_time == 1005
    batch.close_for_record_appends()
    assert batch.is_full() and batch.try_append(0, None, b"x", (), None, 0) is None


def test_first_record_always_fits() -> None:
    """§18 item 39: a record larger than the batch's limit still goes into an empty batch."""
    batch = new_batch(write_limit=100)
    assert batch.try_append(0, None, b"x" * 500, (), None, 0) is not None
    assert batch.try_append(0, None, b"x", (), None, 0) is None


def test_complete_fires_callbacks_in_order_and_futures() -> None:
    """§18 item 9 / §11.2: success → every callback once, in append order, with (metadata, None); futures give
    offset = base + index, create time unless log-append time, key/value sizes."""
    batch = new_batch()
    rec = Recorder()
    futures = [batch.try_append(500 + i, b"kk" if i else None, b"vvv", (), rec.cb(i), 0) for i in range(3)]
    assert not any(f.done() for f in futures)  # type: ignore[union-attr]
    assert batch.complete(100, -1) is True
    assert [c[0] for c in rec.calls] == [0, 1, 2]
    assert all(e is None and isinstance(m, RecordMetadata) for _, m, e in rec.calls)
    md = [f.get(0) for f in futures]  # type: ignore[union-attr]
    assert [m.offset for m in md] == [100, 101, 102]
    assert [m.timestamp for m in md] == [500, 501, 502]
    assert [m.serialized_key_size for m in md] == [-1, 2, 2] and md[0].serialized_value_size == 3
    assert md[0].topic == "t" and md[0].partition == 2
    assert batch.final_state is FinalState.SUCCEEDED
    b2 = new_batch()
    f = b2.try_append(5, None, b"v", (), None, 0)
    b2.complete(7, 9999)
    assert f.get().timestamp == 9999  # type: ignore[union-attr]


def test_failure_with_per_record_errors() -> None:
    """§18 item 9: on failure each callback gets (None, its error); per-record errors override the top one."""
    batch = new_batch()
    rec = Recorder()
    futures = [batch.try_append(0, None, b"v", (), rec.cb(i), 0) for i in range(3)]
    top, special = KafkaError("top"), ValueError("record 1")
    assert batch.complete_exceptionally(top, {1: special})
    assert [(i, m, e) for i, m, e in rec.calls] == [(0, None, top), (1, None, special), (2, None, top)]
    assert futures[1].exception() is special  # type: ignore[union-attr]
    with pytest.raises(KafkaError, match="top"):
        futures[0].result()  # type: ignore[union-attr]
    b2 = new_batch()
    f = b2.try_append(0, None, b"v", (), None, 0)
    b2.complete_exceptionally(top, lambda i: None)
    assert f.exception() is top  # type: ignore[union-attr]


def test_done_exactly_once(caplog: pytest.LogCaptureFixture) -> None:
    """§11.2 / Kafka's FinalState rules: a second completion is ignored after a failure and an
    IllegalStateError after a success; callbacks never run twice; abort after completion is illegal."""
    rec = Recorder()
    failed = new_batch()
    failed.try_append(0, None, b"v", (), rec.cb(0), 0)
    assert failed.done(-1, -1, KafkaError("x"))
    with caplog.at_level(logging.DEBUG):
        assert failed.done(-1, -1, KafkaError("y")) is False
        assert failed.done(5, -1, None) is False
    assert "had already been FAILED" in caplog.text
    assert len(rec.calls) == 1
    ok = new_batch()
    ok.try_append(0, None, b"v", (), rec.cb(1), 0)
    ok.complete(1, -1)
    with pytest.raises(IllegalStateError, match="A SUCCEEDED batch must not attempt another state change to FAILED"):
        ok.done(-1, -1, KafkaError("late"))
    with pytest.raises(IllegalStateError, match="Batch has already been completed in final state SUCCEEDED"):
        ok.abort(KafkaError("abort"))
    assert len(rec.calls) == 2


def test_concurrent_done_completes_once() -> None:
    """§18 item 9: racing completions complete a batch once; each callback runs exactly once."""
    batch = new_batch()
    rec = Recorder()
    for i in range(20):
        batch.try_append(0, None, b"v", (), rec.cb(i), 0)
    barrier = threading.Barrier(4)
    wins: list[bool] = []

    def complete() -> None:
        barrier.wait()
        wins.append(batch.done(-1, -1, KafkaError("e")))

    threads = [threading.Thread(target=complete) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(wins) == [False, False, False, True] and len(rec.calls) == 20


def test_abort() -> None:
    """§18 item 71 (batch part): abort fails every record with the reason."""
    batch = new_batch()
    rec = Recorder()
    f = batch.try_append(0, None, b"v", (), rec.cb(0), 0)
    reason = KafkaError("Producer is closed forcefully.")
    batch.abort(reason)
    assert rec.calls == [(0, None, reason)] and f.exception() is reason  # type: ignore[union-attr]
    assert batch.final_state is FinalState.ABORTED


def test_callback_exception_is_logged_and_others_run(caplog: pytest.LogCaptureFixture) -> None:
    """§18 item 85 (batch side): a failing user callback is logged and the other callbacks still run."""
    batch = new_batch()
    rec = Recorder()

    def bad(m: Any, e: Any) -> None:
        raise RuntimeError("user bug")

    batch.try_append(0, None, b"v", (), bad, 0)
    f = batch.try_append(0, None, b"v", (), rec.cb(1), 0)
    with caplog.at_level(logging.ERROR):
        batch.complete(0, -1)
    assert "Error executing user-provided callback on message for topic-partition 't-2'" in caplog.text
    assert len(rec.calls) == 1 and f.done()  # type: ignore[union-attr]


def test_future_interface() -> None:
    """§18 item 8: the future blocks until the record is acknowledged and yields RecordMetadata."""
    batch = new_batch()
    f = batch.try_append(0, None, b"v", (), None, 0)
    assert isinstance(f, FutureRecordMetadata)
    with pytest.raises(KafkaTimeoutError, match="Timeout after waiting for 10 ms."):
        f.get(0.01)
    with pytest.raises(concurrent.futures.TimeoutError):
        f.result(0.01)
    assert f.running() and not f.cancel() and not f.cancelled()
    seen: list[Any] = []
    f.add_done_callback(seen.append)
    cf = f.as_concurrent_future()
    waiter_result: list[Any] = []
    t = threading.Thread(target=lambda: waiter_result.append(f.get(10)))
    t.start()
    batch.complete(9, -1)
    t.join(10)
    assert waiter_result[0].offset == 9 and seen == [f]
    assert cf.result(0).offset == 9 and f.succeeded() and not f.failed()
    late: list[Any] = []
    f.add_done_callback(late.append)  # already done: runs at once
    assert late == [f]


def test_done_callbacks_registered_concurrently_fire_once() -> None:
    """A done callback registered while the batch completes runs exactly once."""
    for _ in range(200):
        batch = new_batch()
        f = batch.try_append(0, None, b"v", (), None, 0)
        hits: list[int] = []
        t = threading.Thread(target=FutureRecordMetadata.add_done_callback, args=(f, lambda _f, h=hits: h.append(1)))
        t.start()
        batch.complete(0, -1)
        t.join(10)
        assert hits == [1]


def test_delivery_timeout_and_retry_bookkeeping() -> None:
    """§18 items 46/53 (batch part): delivery timeout counted from creation; reenqueued bumps attempts and the
    last attempt time used for backoff; drained time kept."""
    batch = new_batch(created_ms=1000)
    assert not batch.has_reached_delivery_timeout(500, 1499)
    assert batch.has_reached_delivery_timeout(500, 1500)
    assert batch.waited_time_ms(1300) == 300 and batch.attempts == 0 and not batch.in_retry()
    batch.drained(1400)
    batch.reenqueued(1450)
    assert batch.attempts == 1 and batch.in_retry() and batch.last_attempt_ms == 1450
    assert batch.waited_time_ms(1500) == 50 and batch.queue_time_ms() == 400


def test_close_builds_records_and_producer_state() -> None:
    """§18 item 54: records are (compressed and) finalised when the batch is closed at drain time."""
    batch = new_batch(compression=CompressionType.GZIP)
    for i in range(10):
        batch.try_append(100 + i, None, b"abc" * 20, [("h", b"1")], None, 0)
    batch.set_producer_state(77, 3, 40, True)
    assert batch.has_sequence() and batch.base_sequence == 40 and batch.last_sequence() == 49
    batch.close()
    data = batch.records()
    rb = RecordBatch(data)
    assert rb.compression_type == CompressionType.GZIP and rb.producer_id == 77 and rb.base_sequence == 40
    assert rb.is_transactional and [r.value for r in rb] == [b"abc" * 20] * 10
    assert batch.is_closed() and batch.estimated_size_in_bytes() == len(data)
    batch.reset_producer_state(78, 0, 0, False)
    assert RecordBatch(batch.records()).producer_id == 78 and batch.reopened
    with pytest.raises(IllegalStateError):
        new_batch().records()


def test_split_keeps_futures_callbacks_and_sequences() -> None:
    """§11.2 (MESSAGE_TOO_LARGE split): records re-batched in order, each keeping its callback and its
    user-visible future, which completes through the new batch; sequences stay consecutive."""
    big = new_batch(write_limit=10_000, created_ms=777)
    rec = Recorder()
    futures = [big.try_append(10 + i, b"k%d" % i, b"v" * 100, (), rec.cb(i), 0) for i in range(20)]
    big.set_producer_state(5, 1, 100, False)
    done_hits: list[Any] = []
    futures[0].add_done_callback(done_hits.append)  # type: ignore[union-attr]
    big.close()
    parts = big.split(512)
    assert len(parts) > 2
    assert all(p.created_ms == 777 and p.is_split_batch() and p.buffer is None for p in parts)
    assert sum(p.record_count for p in parts) == 20
    assert [p.base_sequence for p in parts] == [100 + sum(q.record_count for q in list(parts)[:i])
                                                for i in range(len(parts))]
    assert not any(f.done() for f in futures)  # type: ignore[union-attr]
    assert big.produce_future.completed() and isinstance(big.produce_future.error(0), RecordListTooLargeError)
    base = 1000
    for p in parts:
        p.close()
        p.complete(base, -1)
        base += p.record_count
    assert [f.get(0).offset for f in futures] == list(range(1000, 1020))  # type: ignore[union-attr]
    assert [f.get(0).timestamp for f in futures] == list(range(10, 30))  # type: ignore[union-attr]
    assert [c[0] for c in rec.calls] == list(range(20)) and all(c[2] is None for c in rec.calls)
    assert done_hits == [futures[0]]


def test_split_twice_and_fail() -> None:
    """SPEC §11.2 split: a split part can be split again; failures reach the original futures."""
    big = new_batch(write_limit=10_000)
    futures = [big.try_append(0, None, b"v" * 100, (), None, 0) for i in range(8)]
    big.close()
    first = big.split(600)
    second = first[0]
    second.close()
    again = second.split(200)
    assert len(again) == second.record_count
    err = MessageTooLargeError()
    for p in list(again) + list(first)[1:]:
        p.complete_exceptionally(err)
    assert all(f.exception(0) is err for f in futures)  # type: ignore[union-attr]


def test_compression_ratio_estimator() -> None:
    """SPEC §12 compression: the per-topic ratio estimate moves up fast and down slowly (Kafka's steps)."""
    est = CompressionRatioEstimator()
    assert est.estimation("t", CompressionType.GZIP) == 1.0
    assert est.update_estimation("t", CompressionType.GZIP, 0.5) == pytest.approx(0.995)
    assert est.update_estimation("t", CompressionType.GZIP, 0.999) == pytest.approx(1.045)
    assert est.update_estimation("t", CompressionType.GZIP, 1.2) == pytest.approx(1.2)
    est.set_estimation("t", CompressionType.GZIP, 1.0)
    assert est.estimation("t", CompressionType.GZIP) == 1.0


def test_a_dropped_future_is_not_kept_by_its_batch() -> None:
    """A record sent without a callback: its batch keeps no future, so one the caller drops dies at once (it
    would otherwise age in the garbage collector until the batch completes); one sent with a callback is kept
    for it."""
    import weakref

    batch = new_batch()
    dropped = weakref.ref(batch.try_append(0, None, b"v", (), None, 0))  # type: ignore[arg-type]
    kept = weakref.ref(batch.try_append(0, None, b"v", (), lambda m, e: None, 0))  # type: ignore[arg-type]
    assert dropped() is None
    assert kept() is not None


def test_done_callbacks_of_callbackless_records_follow_a_split() -> None:
    big = new_batch(write_limit=10_000)
    futures = [big.try_append(i, None, b"v" * 100, (), None, 0) for i in range(12)]
    hits: list[Any] = []
    futures[3].add_done_callback(hits.append)  # type: ignore[union-attr]
    big.close()
    parts = list(big.split(400))
    assert len(parts) > 2 and hits == []
    futures[9].add_done_callback(hits.append)  # type: ignore[union-attr]  (registered after the split)
    base = 500
    for p in parts:
        p.close()
        p.complete(base, -1)
        base += p.record_count
    assert hits == [futures[3], futures[9]]  # (their parts complete in that order)
    assert futures[3].get(0).offset == 503 and futures[9].get(0).offset == 509  # type: ignore[union-attr]
    late: list[Any] = []
    futures[0].add_done_callback(late.append)  # type: ignore[union-attr]  (already done: runs here)
    assert late == [futures[0]]


def test_a_done_callback_added_after_completion_runs_at_once_and_is_not_kept() -> None:
    import weakref

    batch = new_batch()
    future = batch.try_append(0, None, b"v", (), None, 0)
    batch.close()
    batch.complete(7, -1)
    hits: list[Any] = []
    future.add_done_callback(hits.append)  # type: ignore[union-attr]
    assert hits == [future]
    gone = weakref.ref(future)  # type: ignore[arg-type]
    del future, hits
    assert gone() is None  # the completed batch holds no reference to it


def test_a_batch_listener_is_called_once_when_the_batch_completes_is_split_or_already_was() -> None:
    """``ProduceRequestResult.add_listener`` (what strom.aio waits on): one call per batch, when it completes; when
    it is split (the records' futures then lead to the parts, which take listeners of their own); at once when it
    already completed."""
    done = new_batch()
    done_futures = [done.try_append(i, None, b"v", (), None, 0) for i in range(3)]
    calls: list[Any] = []
    done.produce_future.add_listener(calls.append)
    done.produce_future.add_listener(calls.append)
    assert calls == []
    done.close()
    done.complete(40, -1)
    assert calls == [done.produce_future, done.produce_future]
    assert [f.get(0).offset for f in done_futures] == [40, 41, 42]  # type: ignore[union-attr]
    late: list[Any] = []
    done.produce_future.add_listener(late.append)  # already complete: called here and now
    assert late == [done.produce_future]

    big = new_batch(write_limit=10_000)
    futures = [big.try_append(i, None, b"v" * 100, (), None, 0) for i in range(12)]
    split_calls: list[Any] = []
    big.produce_future.add_listener(split_calls.append)
    big.close()
    parts = list(big.split(400))
    assert split_calls == [big.produce_future] and len(parts) > 2
    assert not futures[9].done()  # type: ignore[union-attr]  (its part has not completed)
    part_of_9 = futures[9]._final()[0]  # type: ignore[union-attr]
    part_calls: list[Any] = []
    part_of_9.add_listener(part_calls.append)
    base = 500
    for p in parts:
        p.close()
        p.complete(base, -1)
        base += p.record_count
    assert part_calls == [part_of_9] and futures[9].get(0).offset == 509  # type: ignore[union-attr]
