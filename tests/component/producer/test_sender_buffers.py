"""The pooled buffer a batch writes into is what the produce request carries (no copy), so it must not be
reused before that request completes — even when the batch expired or was aborted in flight (Kafka
deallocates in ``completeBatch``/``failBatch`` after the response)."""

from __future__ import annotations

import pytest

from strom.common.errors import KafkaError, KafkaTimeoutError
from strom.record.records import RecordBatch

from .sender_support import TP0, make_harness, produce_response


def _records_of(request: object) -> memoryview:
    return request.request.topic_data[0].partition_data[0].records  # type: ignore[attr-defined]


def test_request_carries_a_view_of_the_pooled_buffer_which_returns_to_the_pool_after_the_response() -> None:
    h = make_harness(batch_size=1024, total_memory=4096)
    h.append(value=b"a" * 100)
    batch = h.accumulator.get_deque(TP0)[0]
    buffer = batch.buffer
    h.run_once()
    records = _records_of(h.produce_requests()[0])
    assert isinstance(records, memoryview) and records.obj is buffer  # zero-copy
    assert [r.value for r in RecordBatch(bytes(records))] == [b"a" * 100]
    assert h.pool.available_memory() == 4096 - 1024
    h.client.respond(produce_response(TP0, offset=0))
    h.run_once()
    assert h.pool.free_size() == 1 and h.pool.available_memory() == 4096
    h.append(value=b"b" * 100)  # the next batch reuses the pooled buffer
    assert h.accumulator.get_deque(TP0)[0].buffer is buffer


def test_buffer_of_batch_expired_in_flight_is_not_reused_before_the_response() -> None:
    """Reuse-before-completion would let new appends overwrite the bytes of the outstanding request."""
    h = make_harness(batch_size=1024, total_memory=2048, delivery_timeout_ms=2000, request_timeout_ms=60_000)
    f = h.append(value=b"A" * 100)
    h.run_once()
    request = h.produce_requests()[0]
    records = _records_of(request)
    sent = bytes(records)
    h.time.sleep(2001)
    h.run_once()  # the in-flight batch expires: failed now, its buffer kept until the response
    with pytest.raises(KafkaTimeoutError, match="Expiring 1 record"):
        f.get()
    assert h.pool.available_memory() == 2048 - 1024
    for _ in range(7):  # a new batch allocates while the request is outstanding
        h.append(TP0, value=b"B" * 100)
    assert h.pool.available_memory() == 0
    assert bytes(records) == sent, "the in-flight request's records were overwritten"
    h.client.respond_to_request(request, produce_response(TP0, offset=7))
    h.run_once()
    assert bytes(records) == sent
    assert len(h.results) == 1  # the late response completes nothing twice
    assert h.pool.available_memory() == 1024  # the expired batch's buffer is back


def test_buffer_of_batch_aborted_in_flight_is_returned_when_the_request_completes() -> None:
    h = make_harness(batch_size=1024, total_memory=2048)
    f = h.append(value=b"A" * 100)
    h.run_once()
    request = h.produce_requests()[0]
    sent = bytes(_records_of(request))
    h.accumulator.abort_batches(KafkaError("fatal"))
    with pytest.raises(KafkaError, match="fatal"):
        f.get()
    assert h.pool.available_memory() == 1024
    h.append(TP0, value=b"B" * 100)
    assert bytes(_records_of(request)) == sent
    h.client.respond_to_request(request, produce_response(TP0, offset=0), disconnected=True)
    h.run_once()
    assert h.pool.available_memory() == 1024  # the aborted batch's buffer returned; the new batch holds one
