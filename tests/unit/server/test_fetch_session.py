"""The broker's fetch session cache and contexts (KIP-227), stepped with MockTime: creation, LRU / privileged /
size-based eviction (Kafka's FetchSessionTest cases), epochs, forgotten partitions, topic-id keying and the
incremental response rules."""

from __future__ import annotations

import random
import uuid

import pytest

from strom.common.error_codes import ErrorCode
from strom.protocol.fetch_metadata import FINAL_EPOCH, INVALID_SESSION_ID, FetchMetadata
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from strom.server.fetch_session import (
    CachedPartition,
    FetchManager,
    FetchSessionCache,
    FullFetchContext,
    IncrementalFetchContext,
    SessionErrorContext,
    SessionlessFetchContext,
)
from strom.testing.mock_time import MockTime

pytestmark = pytest.mark.unit


def _dummy(size: int):  # type: ignore[no-untyped-def]
    def create() -> dict:  # type: ignore[type-arg]
        return {("t", i): CachedPartition("t", FetchRequest.FetchPartition(partition=i, fetch_offset=0,
                                                                           partition_max_bytes=100))
                for i in range(size)}
    return create


def _ids(cache: FetchSessionCache) -> set[int]:
    return {s.id for s in cache.sessions()}


# ------------------------------------------------------------------------------------------- the cache alone


def test_session_cache_lru_and_size_eviction() -> None:
    """Kafka's testSessionCache: a full cache admits a newcomer only by evicting a stale session, or an evictable
    one with fewer partitions."""
    cache = FetchSessionCache(3, 100, random.Random(1))
    id1 = cache.maybe_create_session(0, False, 10, True, _dummy(10))
    id2 = cache.maybe_create_session(10, False, 20, True, _dummy(20))
    id3 = cache.maybe_create_session(20, False, 30, True, _dummy(30))
    assert INVALID_SESSION_ID not in (id1, id2, id3) and len({id1, id2, id3}) == 3
    # Full, nobody stale, nobody old enough to be evictable: no session for the newcomers.
    assert cache.maybe_create_session(30, False, 40, True, _dummy(40)) == INVALID_SESSION_ID
    assert cache.maybe_create_session(40, False, 5, True, _dummy(5)) == INVALID_SESSION_ID
    assert _ids(cache) == {id1, id2, id3}
    # id1 used at 200: at 210 id2 (last used at 10) is stale and goes, whatever the sizes.
    cache.touch(cache.get(id1), 200)  # type: ignore[arg-type]
    id4 = cache.maybe_create_session(210, False, 11, True, _dummy(11))
    assert _ids(cache) == {id1, id3, id4}
    assert cache.evictions == 1
    # Nobody stale at 410, all old enough: the smallest (id1, 10 partitions) gives way to 50 partitions...
    cache.touch(cache.get(id1), 400)  # type: ignore[arg-type]
    cache.touch(cache.get(id3), 390)  # type: ignore[arg-type]
    cache.touch(cache.get(id4), 400)  # type: ignore[arg-type]
    id5 = cache.maybe_create_session(410, False, 50, True, _dummy(50))
    assert _ids(cache) == {id3, id4, id5}
    # ... but not to 5 partitions, unless the newcomer is privileged (a follower).
    assert cache.maybe_create_session(410, False, 5, True, _dummy(5)) == INVALID_SESSION_ID
    id6 = cache.maybe_create_session(410, True, 5, True, _dummy(5))
    assert _ids(cache) == {id3, id5, id6}
    assert cache.evictions == 3


def test_session_cache_partition_counts_and_resize() -> None:
    """Kafka's testResizeCachedSessions: NumIncrementalFetchPartitionsCached follows creation, eviction, removal
    and a session shrinking (counted at its next touch)."""
    cache = FetchSessionCache(2, 100, random.Random(2))
    assert (cache.size, cache.total_partitions, cache.evictions) == (0, 0, 0)
    id1 = cache.maybe_create_session(0, False, 2, True, _dummy(2))
    assert (cache.size, cache.total_partitions) == (1, 2)
    id2 = cache.maybe_create_session(0, False, 4, True, _dummy(4))
    assert (cache.size, cache.total_partitions) == (2, 6)
    s1, s2 = cache.get(id1), cache.get(id2)
    assert s1 is not None and s2 is not None
    cache.touch(s1, 200)
    cache.touch(s2, 200)
    id3 = cache.maybe_create_session(200, False, 5, True, _dummy(5))
    assert id3 > 0 and _ids(cache) == {id2, id3}  # id1, the smallest, was evicted
    assert (cache.size, cache.total_partitions, cache.evictions) == (2, 9, 1)
    assert cache.remove(id3) is not None and cache.remove(id3) is None
    assert (cache.size, cache.total_partitions, cache.evictions) == (1, 4, 1)
    del s2.partition_map[("t", 0)]
    assert (s2.size, s2.cached_size) == (3, 4)
    cache.touch(s2, s2.last_used_ms)
    assert cache.total_partitions == 3


def test_privileged_sessions_are_protected_until_old() -> None:
    """A follower's session can be evicted by nobody while young, and then only by another privileged one; an
    unprivileged young session can be evicted by a privileged newcomer right away."""
    cache = FetchSessionCache(1, 100, random.Random(3))
    follower = cache.maybe_create_session(0, True, 1, False, _dummy(1))
    assert cache.maybe_create_session(50, False, 1000, False, _dummy(1000)) == INVALID_SESSION_ID
    assert cache.maybe_create_session(50, True, 1000, False, _dummy(1000)) == INVALID_SESSION_ID
    cache.touch(cache.get(follower), 150)  # type: ignore[arg-type]  # older than 100 ms now, still in use
    assert cache.maybe_create_session(160, False, 1000, False, _dummy(1000)) == INVALID_SESSION_ID
    other = cache.maybe_create_session(160, True, 2, False, _dummy(2))
    assert _ids(cache) == {other}
    cache2 = FetchSessionCache(1, 100, random.Random(4))
    consumer = cache2.maybe_create_session(0, False, 500, False, _dummy(500))
    assert cache2.maybe_create_session(10, False, 1000, False, _dummy(1000)) == INVALID_SESSION_ID
    follower2 = cache2.maybe_create_session(10, True, 1, False, _dummy(1))
    assert _ids(cache2) == {follower2} and consumer != follower2


def test_zero_slots_never_creates_a_session() -> None:
    cache = FetchSessionCache(0, 100)
    assert cache.maybe_create_session(0, True, 10, False, _dummy(10)) == INVALID_SESSION_ID
    assert cache.size == 0


# ------------------------------------------------------------------------------------- contexts and epochs


def _fp(partition: int, offset: int, max_bytes: int = 1000) -> FetchRequest.FetchPartition:
    return FetchRequest.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes)


def _pd(partition: int, hw: int, records: bytes = b"", error: int = ErrorCode.NONE, log_start: int = 0,
        lso: int | None = None) -> FetchResponse.PartitionData:
    return FetchResponse.PartitionData(partition_index=partition, error_code=error, high_watermark=hw,
                                       last_stable_offset=hw if lso is None else lso, log_start_offset=log_start,
                                       records=records)


def _topics(*entries: tuple[str, list[FetchResponse.PartitionData]]) -> list[FetchResponse.FetchableTopicResponse]:
    return [FetchResponse.FetchableTopicResponse(topic=t, partitions=ps) for t, ps in entries]


def _sent(resp: FetchResponse) -> list[tuple[str, int]]:
    return [(t.topic, p.partition_index) for t in resp.responses for p in t.partitions]


@pytest.fixture
def manager() -> FetchManager:
    return FetchManager(MockTime(), FetchSessionCache(10, 1000, random.Random(5)))


def _open(manager: FetchManager, version: int = 12) -> int:
    ctx = manager.new_context(version, FetchMetadata.INITIAL, False,
                              {("foo", 0): _fp(0, 0), ("foo", 1): _fp(1, 10), ("bar", 0): _fp(0, 5)}, [])
    assert isinstance(ctx, FullFetchContext)
    resp = ctx.update_and_generate_response_data(
        _topics(("foo", [_pd(0, 20), _pd(1, 10)]), ("bar", [_pd(0, 5)])))
    assert resp.error_code == ErrorCode.NONE and resp.session_id != INVALID_SESSION_ID
    assert _sent(resp) == [("foo", 0), ("foo", 1), ("bar", 0)]  # a full response has every partition
    return resp.session_id


def test_incremental_fetch_sends_only_what_changed(manager: FetchManager) -> None:
    sid = _open(manager)
    # Epoch 1: foo-0 moved on (its new offset is named), the rest is implied by the session.
    ctx = manager.new_context(12, FetchMetadata(sid, 1), False, {("foo", 0): _fp(0, 20)}, [])
    assert isinstance(ctx, IncrementalFetchContext)
    assert [(t, fp.partition, fp.fetch_offset) for t, fp in ctx.partitions()] == \
        [("foo", 0, 20), ("foo", 1, 10), ("bar", 0, 5)]
    resp = ctx.update_and_generate_response_data(_topics(
        ("foo", [_pd(0, 20), _pd(1, 12, records=b"x" * 30)]),  # nothing new on foo-0; foo-1 has records
        ("bar", [_pd(0, 5, log_start=3)])))  # bar-0: its log start moved
    assert resp.error_code == ErrorCode.NONE and resp.session_id == sid
    assert _sent(resp) == [("foo", 1), ("bar", 0)]
    # Epoch 2: foo-1 had records, so it went to the back of the session's order; an unchanged partition is not
    # sent again, a new high watermark is, an error is.
    ctx = manager.new_context(12, FetchMetadata(sid, 2), False, {("foo", 1): _fp(1, 12)}, [])
    assert [(t, fp.partition) for t, fp in ctx.partitions()] == [("foo", 0), ("bar", 0), ("foo", 1)]
    resp = ctx.update_and_generate_response_data(_topics(
        ("foo", [_pd(0, 21)]), ("bar", [_pd(0, 5, log_start=3)]),
        ("foo", [_pd(1, 12, error=ErrorCode.FENCED_LEADER_EPOCH)])))  # errors may carry the high watermark
    assert _sent(resp) == [("foo", 0), ("foo", 1)]
    # Epoch 3: foo-1's error cleared with the same high watermark as before it: sent again (the error reset the
    # cached one); the last stable offset moving alone is news too.
    ctx = manager.new_context(12, FetchMetadata(sid, 3), False, {}, [])
    resp = ctx.update_and_generate_response_data(_topics(
        ("foo", [_pd(0, 21, lso=15)]), ("bar", [_pd(0, 5, log_start=3)]), ("foo", [_pd(1, 12)])))
    assert _sent(resp) == [("foo", 0), ("foo", 1)]


def test_epochs_and_session_errors(manager: FetchManager) -> None:
    sid = _open(manager)
    wrong = manager.new_context(12, FetchMetadata(sid, 2), False, {}, [])
    assert isinstance(wrong, SessionErrorContext) and wrong.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    resp = wrong.update_and_generate_response_data([])
    assert (resp.error_code, resp.session_id, resp.responses) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, [])
    missing = manager.new_context(12, FetchMetadata(sid + 1, 1), False, {}, [])
    assert missing.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # A session keyed by name cannot go on with a v13 (topic id) request, nor the other way round.
    assert manager.new_context(13, FetchMetadata(sid, 1), False, {}, []).error_code == \
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    # An error leaves the session as it was: epoch 1 still works, then 2, 3...
    for epoch in (1, 2, 3):
        ctx = manager.new_context(12, FetchMetadata(sid, epoch), False, {}, [])
        assert isinstance(ctx, IncrementalFetchContext)
        assert ctx.update_and_generate_response_data([]).session_id == sid
    # Replaying an accepted epoch fails.
    assert manager.new_context(12, FetchMetadata(sid, 3), False, {}, []).error_code == \
        ErrorCode.INVALID_FETCH_SESSION_EPOCH


def test_epoch_wraps_to_one() -> None:
    assert FetchMetadata.next_epoch(2**31 - 1) == 1
    assert FetchMetadata.next_epoch(0) == 1
    assert FetchMetadata.next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_a_duplicate_request_meanwhile_answers_invalid_epoch(manager: FetchManager) -> None:
    """A request waiting for data whose session accepted a later request meanwhile must not answer as if the
    session were still at its epoch (Kafka: 'Possible duplicate request')."""
    sid = _open(manager)
    first = manager.new_context(12, FetchMetadata(sid, 1), False, {}, [])
    second = manager.new_context(12, FetchMetadata(sid, 2), False, {}, [])
    assert second.update_and_generate_response_data([]).error_code == ErrorCode.NONE
    assert first.update_and_generate_response_data([]).error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert first.get_throttled_response(10).error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH


def test_forgotten_partitions_and_emptied_session(manager: FetchManager) -> None:
    sid = _open(manager)
    ctx = manager.new_context(12, FetchMetadata(sid, 1), False, {("baz", 0): _fp(0, 0)},
                              [("foo", 0), ("foo", 1), ("nope", 7)])
    assert [(t, fp.partition) for t, fp in ctx.partitions()] == [("bar", 0), ("baz", 0)]
    assert manager.cache.total_partitions == 2
    # Forgetting everything closes the session: the request is served sessionless.
    ctx = manager.new_context(12, FetchMetadata(sid, 2), False, {}, [("bar", 0), ("baz", 0)])
    assert isinstance(ctx, SessionlessFetchContext)
    assert manager.cache.get(sid) is None
    assert ctx.update_and_generate_response_data([]).session_id == INVALID_SESSION_ID


def test_full_requests_close_or_replace_the_named_session(manager: FetchManager) -> None:
    sid = _open(manager)
    # Epoch -1 with the session id: close it, answer sessionless.
    ctx = manager.new_context(12, FetchMetadata(sid, FINAL_EPOCH), False, {("foo", 0): _fp(0, 0)}, [])
    assert isinstance(ctx, SessionlessFetchContext)
    assert manager.cache.get(sid) is None
    resp = ctx.update_and_generate_response_data(_topics(("foo", [_pd(0, 0)])))
    assert (resp.session_id, _sent(resp)) == (INVALID_SESSION_ID, [("foo", 0)])
    # Epoch 0 with an old session id: the old one is dropped, a new one made.
    sid2 = _open(manager)
    ctx = manager.new_context(12, FetchMetadata(sid2, 0), False, {("foo", 0): _fp(0, 0)}, [])
    resp = ctx.update_and_generate_response_data(_topics(("foo", [_pd(0, 0)])))
    assert resp.session_id not in (INVALID_SESSION_ID, sid2)
    assert manager.cache.get(sid2) is None and manager.cache.size == 1


def test_sessions_keyed_by_topic_id_from_v13(manager: FetchManager) -> None:
    foo, bar = uuid.uuid4(), uuid.uuid4()
    ctx = manager.new_context(13, FetchMetadata.INITIAL, False, {(foo, 0): _fp(0, 0), (bar, 0): _fp(0, 0)}, [])
    resp = ctx.update_and_generate_response_data([
        FetchResponse.FetchableTopicResponse(topic_id=foo, partitions=[_pd(0, 3)]),
        FetchResponse.FetchableTopicResponse(topic_id=bar, partitions=[_pd(0, -1, error=ErrorCode.UNKNOWN_TOPIC_ID)])])
    sid = resp.session_id
    assert sid != INVALID_SESSION_ID
    assert manager.new_context(12, FetchMetadata(sid, 1), False, {}, []).error_code == \
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    ctx = manager.new_context(13, FetchMetadata(sid, 1), False, {}, [(bar, 0)])
    assert [(t, fp.partition) for t, fp in ctx.partitions()] == [(foo, 0)]
    resp = ctx.update_and_generate_response_data([
        FetchResponse.FetchableTopicResponse(topic_id=foo, partitions=[_pd(0, 3)])])
    assert resp.error_code == ErrorCode.NONE and resp.responses == []


def test_followers_get_privileged_sessions_and_throttled_full_fetch_opens_none() -> None:
    manager = FetchManager(MockTime(), FetchSessionCache(1, 1000, random.Random(6)))
    consumer = manager.new_context(12, FetchMetadata.INITIAL, False, {("t", 0): _fp(0, 0)}, [])
    assert consumer.get_throttled_response(50).session_id == INVALID_SESSION_ID  # throttled: no session
    assert manager.cache.size == 0
    sid = consumer.update_and_generate_response_data(_topics(("t", [_pd(0, 0)]))).session_id
    follower = manager.new_context(12, FetchMetadata.INITIAL, True, {("t", 0): _fp(0, 0)}, [])
    fsid = follower.update_and_generate_response_data(_topics(("t", [_pd(0, 0)]))).session_id
    assert fsid != INVALID_SESSION_ID and manager.cache.get(sid) is None  # the follower evicted the consumer
    assert manager.cache.sessions()[0].privileged


def test_session_idle_past_eviction_time_gives_way() -> None:
    time = MockTime()
    manager = FetchManager(time, FetchSessionCache(1, 1000, random.Random(7)))
    first = manager.new_context(12, FetchMetadata.INITIAL, False, {("t", 0): _fp(0, 0)}, [])
    sid = first.update_and_generate_response_data(_topics(("t", [_pd(0, 0)]))).session_id
    time.sleep(600)
    assert manager.new_context(12, FetchMetadata(sid, 1), False, {}, []).error_code == ErrorCode.NONE  # touched
    time.sleep(1000)  # idle for exactly the eviction time: not yet stale
    other = manager.new_context(12, FetchMetadata.INITIAL, False, {("u", 0): _fp(0, 0)}, [])
    assert other.update_and_generate_response_data(_topics(("u", [_pd(0, 0)]))).session_id == INVALID_SESSION_ID
    time.sleep(1)
    other = manager.new_context(12, FetchMetadata.INITIAL, False, {("u", 0): _fp(0, 0)}, [])
    assert other.update_and_generate_response_data(_topics(("u", [_pd(0, 0)]))).session_id != INVALID_SESSION_ID
    assert manager.new_context(12, FetchMetadata(sid, 2), False, {}, []).error_code == \
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert manager.cache.evictions == 1
