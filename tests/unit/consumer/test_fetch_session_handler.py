"""The client's FetchSessionHandler (Kafka's FetchSessionHandlerTest cases): full then incremental requests,
added / altered / removed partitions, and every way back to a full fetch."""

from __future__ import annotations

import pytest

from strom.common.error_codes import ErrorCode
from strom.common.structs import TopicPartition
from strom.network.fetch_session_handler import FetchSessionHandler, PartitionData
from strom.protocol.fetch_metadata import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID
from strom.protocol.messages.fetch import FetchResponse

pytestmark = pytest.mark.unit

FOO0, FOO1, BAR0 = TopicPartition("foo", 0), TopicPartition("foo", 1), TopicPartition("bar", 0)


def _resp(session_id: int, *tps: TopicPartition, error: int = ErrorCode.NONE, throttle_ms: int = 0,
          ) -> FetchResponse:
    topics: dict[str, list[FetchResponse.PartitionData]] = {}
    for tp in tps:
        topics.setdefault(tp.topic, []).append(FetchResponse.PartitionData(partition_index=tp.partition))
    return FetchResponse(error_code=error, session_id=session_id, throttle_time_ms=throttle_ms, responses=[
        FetchResponse.FetchableTopicResponse(topic=t, partitions=ps) for t, ps in topics.items()])


def _build(handler: FetchSessionHandler, parts: dict[TopicPartition, PartitionData]):  # type: ignore[no-untyped-def]
    builder = handler.new_builder()
    for tp, pd in parts.items():
        builder.add(tp, pd)
    return builder.build()


def _open(handler: FetchSessionHandler, sid: int = 123) -> None:
    data = _build(handler, {FOO0: PartitionData(0, -1, 100), FOO1: PartitionData(10, -1, 100)})
    assert data.metadata.is_full and data.metadata.session_id == INVALID_SESSION_ID
    assert list(data.to_send) == [FOO0, FOO1] and data.to_forget == []
    assert handler.handle_response(_resp(sid, FOO0, FOO1))
    assert (handler.session_id, handler.next_metadata.epoch) == (sid, 1)


def test_incremental_requests_name_only_changes() -> None:
    h = FetchSessionHandler(1)
    _open(h)
    # Same positions: nothing to send, both implied.
    data = _build(h, {FOO0: PartitionData(0, -1, 100), FOO1: PartitionData(10, -1, 100)})
    assert (data.metadata.session_id, data.metadata.epoch) == (123, 1)
    assert data.to_send == {} and data.to_forget == [] and list(data.session_partitions) == [FOO0, FOO1]
    assert h.handle_response(_resp(123))  # an empty incremental response is fine
    # foo-1 moved, foo-0 is no longer wanted, bar-0 is new: added first, then altered; foo-0 forgotten.
    data = _build(h, {FOO1: PartitionData(15, -1, 100), BAR0: PartitionData(0, -1, 100)})
    assert data.metadata.epoch == 2
    assert list(data.to_send) == [BAR0, FOO1] and data.to_forget == [FOO0]
    assert data.session_partitions == {FOO1: PartitionData(15, -1, 100), BAR0: PartitionData(0, -1, 100)}
    # The response may carry any session partition, not others.
    assert h.handle_response(_resp(123, BAR0))
    assert h.next_metadata.epoch == 3
    _build(h, {FOO1: PartitionData(15, -1, 100), BAR0: PartitionData(0, -1, 100)})
    assert not h.handle_response(_resp(123, FOO0))  # foo-0 left the session: an invalid response
    assert (h.session_id, h.next_metadata.epoch) == (123, INITIAL_EPOCH)  # full again, replacing session 123


def test_session_errors_and_failures_restart_with_a_full_fetch() -> None:
    h = FetchSessionHandler(1)
    _open(h)
    _build(h, {FOO0: PartitionData(5, -1, 100)})
    assert not h.handle_response(_resp(0, error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND))
    assert (h.session_id, h.next_metadata.epoch) == (INVALID_SESSION_ID, INITIAL_EPOCH)
    data = _build(h, {FOO0: PartitionData(5, -1, 100)})
    assert data.metadata.is_full and list(data.to_send) == [FOO0]
    assert h.handle_response(_resp(77, FOO0))
    _build(h, {FOO0: PartitionData(5, -1, 100)})
    assert not h.handle_response(_resp(0, error=ErrorCode.INVALID_FETCH_SESSION_EPOCH))
    assert (h.session_id, h.next_metadata.epoch) == (77, INITIAL_EPOCH)  # close 77, open a new one
    assert h.handle_response(_resp(78, *_build(h, {FOO0: PartitionData(5, -1, 100)}).to_send))
    _build(h, {FOO0: PartitionData(5, -1, 100)})
    h.handle_error(TimeoutError("request timed out"))
    assert (h.session_id, h.next_metadata.epoch) == (78, INITIAL_EPOCH)


def test_full_responses_that_do_not_match_are_refused() -> None:
    h = FetchSessionHandler(1)
    _build(h, {FOO0: PartitionData(0, -1, 100), FOO1: PartitionData(0, -1, 100)})
    assert not h.handle_response(_resp(5, FOO0))  # foo-1 omitted
    assert h.next_metadata.epoch == INITIAL_EPOCH and h.session_id == INVALID_SESSION_ID
    _build(h, {FOO0: PartitionData(0, -1, 100)})
    assert not h.handle_response(_resp(0, throttle_ms=100))  # KIP-219 throttle: empty, not used
    _build(h, {FOO0: PartitionData(0, -1, 100)})
    assert h.handle_response(_resp(0, FOO0))  # a broker without sessions: full fetches forever
    assert _build(h, {FOO0: PartitionData(1, -1, 100)}).metadata.is_full


def test_notify_close_makes_the_final_request() -> None:
    h = FetchSessionHandler(1)
    _open(h)
    h.notify_close()
    data = h.new_builder().build()
    assert (data.metadata.session_id, data.metadata.epoch) == (123, FINAL_EPOCH)
    assert data.metadata.is_full and data.to_send == {}
