"""Sender component tests: MockClient + MockTime, no sockets, no sleeps (Kafka's ``SenderTest``)."""

from __future__ import annotations

import logging
import math

import pytest

from strom.common.error_codes import (
    InvalidRecordError,
    NotLeaderOrFollowerError,
    TopicAuthorizationFailedError,
    UnsupportedVersionError,
)
from strom.common.errors import KafkaError, KafkaTimeoutError
from strom.common.structs import Node, TopicPartition
from strom.producer.internals.producer_batch import CompressionRatioEstimator
from strom.record.compression import CompressionType
from strom.record.header import HEADER_SIZE
from strom.record.records import MemoryRecords
from strom.testing.mock_client import metadata_update_with

from .sender_support import TP0, TP1, make_harness, produce_response, request_partitions

pytestmark = [pytest.mark.component, pytest.mark.timeout(60)]

NODE0 = Node(0, "localhost", 1969)


def test_one_produce_request_per_node_grouped_by_topic_then_partition() -> None:
    """§18 items 64, 65: one ProduceRequest per node with every drained batch of the partitions it leads,
    grouped by topic then partition; acks and timeout = request.timeout.ms; no transactional id."""
    h = make_harness(topics={"a": 2, "b": 2}, nodes=2, acks=1, request_timeout_ms=1234)
    a0, a1, b0, b1 = (TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0), TopicPartition("b", 1))
    for tp in (a0, a1, b0, b1):
        h.append(tp)
    h.run_once()
    requests = h.produce_requests()
    assert len(requests) == 2
    by_node = {r.destination: r.request for r in requests}
    leaders = {tp: h.metadata.fetch().leader_for(tp).node_id for tp in (a0, a1, b0, b1)}
    for node_id, request in by_node.items():
        assert set(request_partitions(request)) == {tp for tp, n in leaders.items() if n == node_id}
        assert [t.name for t in request.topic_data] == sorted({t.name for t in request.topic_data})
        assert all(len(t.partition_data) == 1 for t in request.topic_data)
        assert request.acks == 1
        assert request.timeout_ms == 1234
        assert request.transactional_id is None


def test_response_completes_futures_with_offsets_and_log_append_time() -> None:
    """§18 items 8, 9, 79: the response completes the batch; record i gets base offset + i; a log append
    time replaces the create time; each callback runs exactly once with metadata only."""
    h = make_harness()
    f1 = h.append(value=b"v1")
    f2 = h.append(value=b"v2")
    h.run_once()
    h.client.respond(produce_response(TP0, offset=42, log_append_time=777))
    h.run_once()
    assert (f1.get().offset, f2.get().offset) == (42, 43)
    assert f1.get().timestamp == 777
    assert [(md.offset, e) for md, e in h.results] == [(42, None), (43, None)]
    assert h.accumulator.buffer_pool_available_memory() == h.pool.total_memory()
    assert h.metric_values()["record-send-total"] == 2


def test_acks_zero_completes_on_send_without_offset() -> None:
    """§18 item 66: with acks=0 the request expects no response and its batches complete when sent."""
    h = make_harness(acks=0, retries=0)
    f = h.append()
    h.run_once()
    assert f.done()
    assert f.get().offset == -1
    assert not h.client.requests  # nothing awaits a response


def test_poll_timeout_zero_when_ready_else_linger_remaining() -> None:
    """§18 items 45, 68: with linger.ms=L a lone batch waits L ms (poll timeout = the rest of the linger);
    once sendable and its node is ready the poll timeout is 0."""
    h = make_harness(linger_ms=100)
    h.append()
    now = h.time.milliseconds()
    assert h.sender.send_producer_data(now) == 100
    h.time.sleep(60)
    assert h.sender.send_producer_data(h.time.milliseconds()) == 40
    assert not h.produce_requests()
    h.time.sleep(40)
    assert h.sender.send_producer_data(h.time.milliseconds()) == 0
    assert len(h.produce_requests()) == 1


def test_unknown_leader_keeps_batches_and_requests_metadata() -> None:
    """§18 items 26, 69: a partition without a leader keeps its batch queued (not failed) and triggers a
    metadata update; the batch goes out once a leader is known."""
    h = make_harness(leader_for=lambda topic, p: None if p == 0 else 1)
    f = h.append(TP0)
    h.run_once()
    assert not h.produce_requests()
    assert not f.done()
    assert h.metadata.update_requested()
    h.client.prepare_metadata_update(metadata_update_with(2, {"t": 2}))
    h.time.sleep(100)  # retry.backoff.ms since the last refresh
    h.run_once(3)
    assert len(h.produce_requests()) == 1
    assert not f.done()


def test_retriable_error_retries_after_backoff_and_refreshes_metadata() -> None:
    """§18 items 26, 46: NOT_LEADER_OR_FOLLOWER re-enqueues the batch, requests a metadata update, and the
    batch is not sent again before retry.backoff.ms has passed."""
    h = make_harness(retry_backoff_ms=100)
    f = h.append()
    h.run_once()
    h.client.respond(produce_response(TP0, error=6))
    h.run_once()
    assert h.metadata.update_requested()
    assert not f.done()
    batch = h.accumulator.get_deque(TP0)[0]
    assert batch.attempts == 1
    h.run_once()
    assert not h.produce_requests()
    h.time.sleep(99)
    h.run_once()
    assert not h.produce_requests()
    h.time.sleep(1)
    h.run_once()
    assert len(h.produce_requests()) == 1
    h.client.respond(produce_response(TP0, offset=5))
    h.run_once()
    assert f.get().offset == 5
    assert h.metric_values()["record-retry-total"] == 1
    topic = h.metric_values("producer-topic-metrics", topic="t")
    # Kafka counts a record as sent each time a request carries it: the retry sends it again
    assert (topic["record-retry-total"], topic["record-send-total"]) == (1, 2)
    assert h.metric_values()["record-send-total"] == 2


def test_retries_exhausted_fails_batch() -> None:
    """§11.2: once attempts reach ``retries`` a retriable error fails the batch with its exception."""
    h = make_harness(retries=1, retry_backoff_ms=0)
    f = h.append()
    h.run_once()
    h.client.respond(produce_response(TP0, error=6))
    h.run_once(2)
    h.client.respond(produce_response(TP0, error=6))
    h.run_once()
    with pytest.raises(NotLeaderOrFollowerError):
        f.get()
    assert h.results == [(None, h.results[0][1])]
    assert h.metric_values()["record-error-total"] == 1
    assert h.metric_values("producer-topic-metrics", topic="t")["record-error-total"] == 1


def test_non_retriable_error_fails_batch_with_kafka_exception() -> None:
    """§11.2: a non-retriable error fails the batch (TOPIC_AUTHORIZATION_FAILED names the topic)."""
    h = make_harness()
    f = h.append()
    h.run_once()
    h.client.respond(produce_response(TP0, error=29))
    h.run_once()
    with pytest.raises(TopicAuthorizationFailedError, match=r"Not authorized to access topics: \[t\]"):
        f.get()
    assert h.accumulator.buffer_pool_available_memory() == h.pool.total_memory()


def test_record_errors_map_to_their_records() -> None:
    """§11.2: record-level errors (INVALID_RECORD) fail the named record with its message and the others
    with Kafka's generic message."""
    h = make_harness()
    f0 = h.append(value=b"bad")
    f1 = h.append(value=b"good")
    h.run_once()
    h.client.respond(produce_response(TP0, error=87, record_errors=[(0, "bad record")]))
    h.run_once()
    with pytest.raises(InvalidRecordError, match="bad record"):
        f0.get()
    with pytest.raises(KafkaError, match="one more more invalid records"):
        f1.get()


def test_delivery_timeout_expires_queued_batch_with_kafka_message() -> None:
    """§18 item 53: a batch queued longer than delivery.timeout.ms fails with "Expiring N record(s) for
    <tp>:<ms> ms has passed since batch creation"."""
    h = make_harness(delivery_timeout_ms=1500)
    h.client.blackout(NODE0, 10_000)
    f = h.append()
    h.append()
    h.run_once()
    assert not h.produce_requests()
    h.time.sleep(1500)
    h.run_once()
    with pytest.raises(KafkaTimeoutError, match=r"^Expiring 2 record\(s\) for t-0:1500 ms has passed since batch "
                                                r"creation$"):
        f.get()


def test_delivery_timeout_expires_in_flight_batch_and_ignores_late_response() -> None:
    """§18 item 53: an in-flight batch past the delivery timeout fails at once; its late response changes
    nothing (no double completion, memory freed once)."""
    h = make_harness(delivery_timeout_ms=2000, request_timeout_ms=60_000)
    f = h.append()
    h.run_once()
    assert len(h.produce_requests()) == 1
    h.time.sleep(2001)
    h.run_once()
    with pytest.raises(KafkaTimeoutError, match="Expiring 1 record"):
        f.get()
    h.client.respond(produce_response(TP0, offset=1))
    h.run_once()
    assert len(h.results) == 1
    assert h.accumulator.buffer_pool_available_memory() == h.pool.total_memory()


def test_message_too_large_splits_and_resends() -> None:
    """§11.2 / §18 item 54: MESSAGE_TOO_LARGE on a batch of several records splits it into batches of about
    batch.size and resends them; every record completes once with consecutive offsets."""
    estimator = CompressionRatioEstimator()
    estimator.set_estimation("t", CompressionType.GZIP, 0.05)
    h = make_harness(batch_size=1024, compression=int(CompressionType.GZIP), estimator=estimator)
    futures = [h.append(value=b"x" * 100) for _ in range(60)]  # one batch: ~6 KB uncompressed
    assert len(h.accumulator.get_deque(TP0)) == 1
    h.run_once()
    h.client.respond(produce_response(TP0, error=10))
    h.run_once()
    parts = list(h.accumulator.get_deque(TP0))
    assert len(parts) > 1
    assert sum(b.record_count for b in parts) == 60
    offset = 0
    for _ in range(len(parts)):
        h.run_once()
        request = h.produce_requests()[0].request
        count = sum(1 for _ in MemoryRecords(request_partitions(request)[TP0]).records())
        h.client.respond(produce_response(TP0, offset=offset))
        h.run_once()
        offset += count
    assert [f.get().offset for f in futures] == list(range(60))
    assert h.metric_values()["batch-split-total"] == 1


def test_muting_with_max_in_flight_one() -> None:
    """§18 items 51, 52: with max.in.flight.requests.per.connection=1 a partition with a batch in flight is
    muted — its next batch is not drained until the response is handled."""
    h = make_harness(max_in_flight=1, batch_size=200)
    h.append(value=b"a" * 100)
    h.append(value=b"b" * 100)
    assert len(h.accumulator.get_deque(TP0)) == 2
    h.run_once()
    assert len(h.produce_requests()) == 1
    assert h.accumulator.is_muted(TP0)
    h.run_once(3)
    assert len(h.produce_requests()) == 1
    h.client.respond(produce_response(TP0, offset=0))
    h.run_once()
    assert not h.accumulator.is_muted(TP0)
    assert not h.produce_requests()
    h.run_once()
    assert len(h.produce_requests()) == 1
    assert h.accumulator.is_muted(TP0)


def test_without_muting_next_batch_goes_while_first_in_flight() -> None:
    """§18 item 52 (contrast): with max.in.flight 5 the second batch is sent while the first is in flight."""
    h = make_harness(max_in_flight=5, batch_size=200)
    h.append(value=b"a" * 100)
    h.append(value=b"b" * 100)
    h.run_once(2)
    assert len(h.produce_requests()) == 2


def test_disconnect_is_retriable_network_exception_and_refreshes_metadata() -> None:
    """§18 items 26, 86: a disconnected request fails its batches with NETWORK_EXCEPTION, which is retried,
    and requests a metadata update."""
    h = make_harness(retry_backoff_ms=0)
    f = h.append()
    h.run_once()
    h.client.disconnect(0)
    h.run_once()
    assert not f.done()
    assert h.metadata.update_requested()
    h.run_once(2)
    h.client.respond(produce_response(TP0, offset=9))
    h.run_once()
    assert f.get().offset == 9


def test_request_timeout_is_retried() -> None:
    """§18 item 86: a request unanswered for request.timeout.ms completes as a timed-out disconnect
    (REQUEST_TIMED_OUT) and the batch is retried."""
    h = make_harness(request_timeout_ms=1000, retry_backoff_ms=0)
    f = h.append()
    h.run_once()
    h.time.sleep(1001)
    h.run_once()
    assert not f.done()
    assert h.accumulator.get_deque(TP0)[0].attempts == 1
    h.run_once(2)
    h.client.respond(produce_response(TP0, offset=3))
    h.run_once()
    assert f.get().offset == 3


def test_version_mismatch_fails_with_unsupported_version() -> None:
    """§9.2: a request the node cannot take fails its batches with UNSUPPORTED_VERSION."""
    h = make_harness()
    h.client.prepare_response(produce_response(TP0), is_unsupported=True)
    f = h.append()
    h.run_once(2)
    with pytest.raises(UnsupportedVersionError):
        f.get()


def test_graceful_close_sends_everything() -> None:
    """§18 items 43, 70: initiate_close stops appends ("Producer closed while send in progress") but the loop
    runs until every accepted record is sent and acknowledged, then closes the client."""
    h = make_harness(nodes=1)
    futures = [h.append(TP0), h.append(TP1)]
    h.client.prepare_response(produce_response({TP0: 0, TP1: 0}))
    h.sender.initiate_close()
    with pytest.raises(KafkaError, match="Producer closed while send in progress"):
        h.append(TP0)
    h.sender.run()
    assert all(f.get().offset == 0 for f in futures)
    assert h.client.closed


def test_forced_close_aborts_incomplete_batches() -> None:
    """§18 item 71: force_close fails every pending future and callback at once."""
    h = make_harness()
    f_sent = h.append(TP0)
    h.run_once()
    f_queued = h.append(TP1)
    h.sender.force_close()
    h.sender.run()
    for f in (f_sent, f_queued):
        with pytest.raises(KafkaError, match="Producer is closed forcefully."):
            f.get()
    assert len(h.results) == 2 and all(md is None for md, _ in h.results)
    assert h.client.closed


def test_flush_makes_lingering_batches_sendable() -> None:
    """§18 item 72: a flush in progress makes queued batches sendable regardless of linger.ms."""
    h = make_harness(linger_ms=60_000)
    h.append()
    h.run_once()
    assert not h.produce_requests()
    h.accumulator.begin_flush()
    h.run_once()
    assert len(h.produce_requests()) == 1


def test_loop_survives_exceptions(caplog: pytest.LogCaptureFixture) -> None:
    """§18 item 63: an exception in one iteration is logged and the loop continues."""
    h = make_harness()
    calls = []

    def boom() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        h.sender.running = False

    h.sender.run_once = boom  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR):
        h.sender.run()
    assert len(calls) == 2
    assert "Uncaught error in kafka producer I/O thread" in caplog.text


def test_callback_exception_does_not_stop_other_callbacks(caplog: pytest.LogCaptureFixture) -> None:
    """§18 item 85: an exception from a user callback is logged; the other callbacks still run."""
    h = make_harness()
    seen = []

    def bad(md, e):  # type: ignore[no-untyped-def]
        raise ValueError("user bug")

    h.append(callback=bad)
    h.append(callback=lambda md, e: seen.append(md.offset))
    h.run_once()
    h.client.respond(produce_response(TP0, offset=10))
    with caplog.at_level(logging.ERROR):
        h.run_once()
    assert seen == [11]


def _encoded_records(batch: bytes | memoryview) -> list[bytes]:
    """The records of an uncompressed batch as encoded (length varint included)."""
    from strom.record.varint import decode_varint

    out, data, pos = [], bytes(batch), HEADER_SIZE
    while pos < len(data):
        length, end = decode_varint(data, pos)
        out.append(data[pos:end + length])
        pos = end + length
    return out


def test_metrics_reported() -> None:
    """§18 items 63-64 (metrics of the Sender):  batch-size-avg, records-per-request-avg, request-latency-avg, record-send-rate."""
    h = make_harness()
    h.append(value=b"v" * 300)
    h.append(value=b"w" * 10)
    h.run_once()
    sent = request_partitions(h.produce_requests()[0].request)[TP0]
    h.time.sleep(7)
    h.client.respond(produce_response(TP0))
    h.run_once()
    values = h.metric_values()
    assert values["records-per-request-avg"] == 2
    assert values["batch-size-avg"] == values["batch-size-max"] == len(sent)
    # record-size: a batch holding the largest record alone (Kafka's estimate per batch sent)
    largest = max(len(r) for r in _encoded_records(sent))
    assert values["record-size-avg"] == values["record-size-max"] == HEADER_SIZE + largest
    assert values["request-latency-avg"] == values["request-latency-max"] == 7
    assert values["record-queue-time-avg"] == 0 and values["produce-throttle-time-max"] == 0
    # 2 records sent 7 ms ago: Kafka's rate adds samples - 1 = one empty 30 s window to the 7 ms elapsed
    assert values["record-send-total"] == 2 and values["record-send-rate"] == pytest.approx(2 / 30.007)
    assert values["requests-in-flight"] == 0
    topic = h.metric_values("producer-topic-metrics", topic="t")
    assert (topic["record-send-total"], topic["byte-total"]) == (2, len(sent))
    assert math.isnan(topic["compression-rate"])


def test_an_error_while_completing_one_batch_fails_it_now_and_completes_the_others(caplog, monkeypatch) -> None:
    """A batch whose response handling raises (here: putting it back for a retry) fails at once with that error,
    instead of staying in flight until delivery.timeout.ms, and the other partitions of the same response are
    completed; the error is logged."""
    from strom.common.error_codes import ErrorCode
    from strom.protocol.messages import ProduceResponse

    h = make_harness(nodes=1, retry_backoff_ms=100)
    f0, f1 = h.append(TP0), h.append(TP1)
    h.run_once()
    assert len(h.produce_requests()) == 1  # both partitions in one request

    def broken_reenqueue(batch, now_ms):  # type: ignore[no-untyped-def]
        raise RuntimeError("reenqueue broke")

    monkeypatch.setattr(h.accumulator, "reenqueue", broken_reenqueue)
    part = ProduceResponse.PartitionProduceResponse
    partitions = [part(index=0, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, base_offset=-1, log_append_time_ms=-1,
                       log_start_offset=-1, record_errors=[], error_message=None),
                  part(index=1, error_code=ErrorCode.NONE, base_offset=7, log_append_time_ms=-1, log_start_offset=-1,
                       record_errors=[], error_message=None)]
    h.client.respond(ProduceResponse(throttle_time_ms=0, responses=[
        ProduceResponse.TopicProduceResponse(name="t", partition_responses=partitions)]))
    with caplog.at_level(logging.ERROR):
        h.run_once()
    assert f1.get().offset == 7
    with pytest.raises(KafkaError, match="Unexpected error handling the produce response for t-0: RuntimeError"):
        f0.get()
    assert "Uncaught error handling the produce response" in caplog.text
    assert not h.sender.in_flight_batches
    assert h.accumulator.buffer_pool_available_memory() == h.pool.total_memory()
