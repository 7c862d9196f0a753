"""Fetch sessions (KIP-227) on a real broker, with hand-built Fetch requests (RawClient): full fetches that open a
session, incremental fetches that answer only what changed, long polls woken by a partition the request did
not name, forgotten partitions, session errors, topic-id sessions (v13+), sessionless fetches, the cache
configs, eviction and the FetchSessionCache metrics."""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Iterator

import pytest

from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.create_topics import CreateTopicsRequest
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from strom.protocol.messages.metadata import MetadataRequest
from strom.protocol.messages.produce import ProduceRequest
from strom.record.builder import MemoryRecordsBuilder
from strom.testing.broker_process import BrokerProcess, free_port
from strom.testing.raw_client import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

V = 12  # topics by name
P = 4  # partitions of each test topic


def _start(tmp_path_factory: pytest.TempPathFactory, name: str, **overrides: str) -> BrokerProcess:
    overrides.setdefault("metrics.prometheus.listener", f"http://127.0.0.1:{free_port()}")
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp(name) / "data", overrides=overrides)
    b.start()
    return b


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = _start(tmp_path_factory, "fetch-sessions")
    yield b
    b.stop()
    b.cleanup()


def _create(c: RawClient, topic: str, partitions: int = P) -> uuid.UUID:
    r = c.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=topic, num_partitions=partitions, replication_factor=1)], timeout_ms=10_000))
    assert r.topics[0].error_code == ErrorCode.NONE
    return r.topics[0].topic_id  # type: ignore[no-any-return]


def _produce(c: RawClient, topic: str, partition: int, n: int) -> None:
    b = MemoryRecordsBuilder()
    for i in range(n):
        b.append(1_700_000_000_000 + i, None, b"v%d" % i)
    r = c.request(ApiKey.PRODUCE, 8, ProduceRequest(acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=b.build())])]))
    assert r.responses[0].partition_responses[0].error_code == ErrorCode.NONE


def _fetch(c: RawClient, session_id: int, epoch: int, parts: dict[tuple[str, int], int], *, version: int = V,
           forget: tuple[tuple[str, int], ...] | list[tuple[str, int]] = (), max_wait_ms: int = 0, topic_ids: dict[str, uuid.UUID] | None = None,
           ) -> FetchResponse:  # type: ignore[assignment]
    by_topic: dict[str, list[FetchRequest.FetchPartition]] = {}
    for (t, p), offset in parts.items():
        by_topic.setdefault(t, []).append(FetchRequest.FetchPartition(partition=p, fetch_offset=offset,
                                                                     partition_max_bytes=1 << 20))
    forgotten: dict[str, list[int]] = {}
    for t, p in forget:
        forgotten.setdefault(t, []).append(p)
    ids = topic_ids or {}
    return c.request(ApiKey.FETCH, version, FetchRequest(  # type: ignore[no-any-return]
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 24, session_id=session_id,
        session_epoch=epoch,
        topics=[FetchRequest.FetchTopic(topic=t, topic_id=ids.get(t, uuid.UUID(int=0)), partitions=ps)
                for t, ps in by_topic.items()],
        forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=t, topic_id=ids.get(t, uuid.UUID(int=0)),
                                                           partitions=ps) for t, ps in forgotten.items()]))


def _parts(resp: FetchResponse) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(topic, partition) -> (error, high watermark, record bytes)."""
    return {(t.topic, p.partition_index): (p.error_code, p.high_watermark, len(p.records or b""))
            for t in resp.responses for p in t.partitions}


def _metrics(b: BrokerProcess) -> dict[str, float]:
    url = b.overrides["metrics.prometheus.listener"] + "/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("kafka_server_fetchsessioncache_"):
            name, _, value = line.partition(" ")
            out[name.removeprefix("kafka_server_fetchsessioncache_")] = float(value)
    return out


def test_incremental_fetch_answers_only_what_changed(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as c:
        _create(c, "inc")
        for p in range(P):
            _produce(c, "inc", p, 3)
        full = _fetch(c, 0, 0, {("inc", p): 0 for p in range(P)})
        assert full.error_code == ErrorCode.NONE and full.session_id > 0
        assert sorted(_parts(full)) == [("inc", p) for p in range(P)]
        assert all(e == ErrorCode.NONE and hw == 3 and size > 0 for e, hw, size in _parts(full).values())
        sid = full.session_id
        # Epoch 1 names the new positions; nothing was produced meanwhile: an empty response, not a full one.
        r = _fetch(c, sid, 1, {("inc", p): 3 for p in range(P)})
        assert (r.error_code, r.session_id, _parts(r)) == (ErrorCode.NONE, sid, {})
        # Data on partition 2 only: the request names nothing, the session implies all four partitions.
        _produce(c, "inc", 2, 5)
        r = _fetch(c, sid, 2, {})
        parts = _parts(r)
        assert list(parts) == [("inc", 2)] and parts[("inc", 2)][:2] == (ErrorCode.NONE, 8)
        assert parts[("inc", 2)][2] > 0
        # Partition 2 is still at offset 3 in the session (we did not say otherwise): the same records again,
        # and the high watermark did not move, so only partition 2 (it has records).
        r = _fetch(c, sid, 3, {})
        assert list(_parts(r)) == [("inc", 2)]
        r = _fetch(c, sid, 4, {("inc", 2): 8})
        assert _parts(r) == {}
        # A wrong epoch, an unknown session, a replayed epoch: errors; the session goes on at its epoch.
        assert _fetch(c, sid, 9, {}).error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        assert _fetch(c, sid, 4, {}).error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        bad = _fetch(c, sid ^ 0x5A5A, 5, {})
        assert (bad.error_code, bad.session_id, bad.responses) == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])
        assert _fetch(c, sid, 5, {}).error_code == ErrorCode.NONE
        # A name-keyed session cannot be continued with a v13 (topic id) request.
        assert _fetch(c, sid, 6, {}, version=13).error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
        # Closing it (epoch -1) answers sessionless; its id is gone.
        closed = _fetch(c, sid, -1, {("inc", 0): 3})
        assert closed.session_id == 0 and list(_parts(closed)) == [("inc", 0)]
        assert _fetch(c, sid, 6, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_long_poll_woken_by_a_partition_the_request_did_not_name(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as c, RawClient(broker.bootstrap) as producer:
        _create(c, "poll")
        sid = _fetch(c, 0, 0, {("poll", p): 0 for p in range(P)}).session_id
        assert sid > 0
        c.send(ApiKey.FETCH, V, FetchRequest(replica_id=-1, max_wait_ms=30_000, min_bytes=1, max_bytes=1 << 20,
                                             session_id=sid, session_epoch=1, topics=[], forgotten_topics_data=[]))
        _produce(producer, "poll", 3, 2)
        r = c.receive()  # answered by the append, well before the 30 s wait (the test's timeout is 120 s)
        assert r.error_code == ErrorCode.NONE and list(_parts(r)) == [("poll", 3)]


def test_forgotten_partitions_and_added_ones(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as c:
        _create(c, "forget-a")
        _create(c, "forget-b", 1)
        sid = _fetch(c, 0, 0, {("forget-a", 0): 0, ("forget-a", 1): 0}).session_id
        # Forget a-0, add b-0: b-0 is new to the session, so it is answered although nothing changed on it...
        r = _fetch(c, sid, 1, {("forget-b", 0): 0}, forget=[("forget-a", 0)])
        assert list(_parts(r)) == [("forget-b", 0)]
        # ... and a-0 is no longer read: data on it is not sent; data on a-1 is.
        _produce(c, "forget-a", 0, 1)
        _produce(c, "forget-a", 1, 1)
        assert list(_parts(_fetch(c, sid, 2, {}))) == [("forget-a", 1)]
        # Forgetting every partition closes the session: served sessionless, the id is gone.
        r = _fetch(c, sid, 3, {}, forget=[("forget-a", 1), ("forget-b", 0)])
        assert (r.error_code, r.session_id, r.responses) == (ErrorCode.NONE, 0, [])
        assert _fetch(c, sid, 4, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_topic_id_sessions_from_v13(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as c:
        tid = _create(c, "by-id", 2)
        ids = {"by-id": tid, "ghost": uuid.uuid4()}
        _produce(c, "by-id", 1, 2)
        full = _fetch(c, 0, 0, {("by-id", 0): 0, ("by-id", 1): 0, ("ghost", 0): 0}, version=13, topic_ids=ids)
        assert full.session_id > 0
        got = {(t.topic_id, p.partition_index): p.error_code for t in full.responses for p in t.partitions}
        assert got == {(tid, 0): ErrorCode.NONE, (tid, 1): ErrorCode.NONE, (ids["ghost"], 0): ErrorCode.UNKNOWN_TOPIC_ID}
        sid = full.session_id
        assert _fetch(c, sid, 1, {}, version=12).error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
        # Incremental: the unknown topic id's error is sent every time; the quiet partitions are not.
        r = _fetch(c, sid, 1, {("by-id", 1): 2}, version=13, topic_ids=ids)
        got = {(t.topic_id, p.partition_index): p.error_code for t in r.responses for p in t.partitions}
        assert got == {(ids["ghost"], 0): ErrorCode.UNKNOWN_TOPIC_ID}
        _produce(c, "by-id", 0, 1)
        r = _fetch(c, sid, 2, {}, version=13, topic_ids=ids, forget=[("ghost", 0)])
        got = {(t.topic_id, p.partition_index): p.error_code for t in r.responses for p in t.partitions}
        assert got == {(tid, 0): ErrorCode.NONE}


def test_sessionless_fetches_open_no_session(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as c:
        _create(c, "legacy", 2)
        before = _metrics(broker)["numincrementalfetchsessions"]
        for version in (4, 7, 12):  # v4: no session fields at all; v7+: session 0, epoch -1 (librdkafka's way)
            r = _fetch(c, 0, -1, {("legacy", 0): 0, ("legacy", 1): 0}, version=version)
            assert r.error_code == ErrorCode.NONE and r.session_id == 0
            assert sorted(_parts(r)) == [("legacy", 0), ("legacy", 1)]  # every partition, every time
        assert _metrics(broker)["numincrementalfetchsessions"] == before
        # An incremental request with no session id is not a sessionless one.
        assert _fetch(c, 0, 1, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_session_metrics_follow_the_cache(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as c:
        _create(c, "metered", 3)
        before = _metrics(broker)
        sid = _fetch(c, 0, 0, {("metered", p): 0 for p in range(3)}).session_id
        m = _metrics(broker)
        assert m["numincrementalfetchsessions"] == before["numincrementalfetchsessions"] + 1
        assert m["numincrementalfetchpartitionscached"] == before["numincrementalfetchpartitionscached"] + 3
        _fetch(c, sid, 1, {}, forget=[("metered", 0)])
        assert _metrics(broker)["numincrementalfetchpartitionscached"] == \
            before["numincrementalfetchpartitionscached"] + 2
        _fetch(c, sid, -1, {})
        assert _metrics(broker)["numincrementalfetchsessions"] == before["numincrementalfetchsessions"]


def test_full_cache_refuses_then_evicts(tmp_path_factory: pytest.TempPathFactory) -> None:
    """One slot: with the default eviction time a second session is refused (its client keeps full fetches);
    with eviction time 0 the idle first session is evicted and its next incremental fetch learns
    FETCH_SESSION_ID_NOT_FOUND, after which a full fetch gets it a session again."""
    b = _start(tmp_path_factory, "one-slot", **{"max.incremental.fetch.session.cache.slots": "1"})
    try:
        with RawClient(b.bootstrap) as c:
            _create(c, "slot", 2)
            first = _fetch(c, 0, 0, {("slot", 0): 0}).session_id
            assert first > 0
            assert _fetch(c, 0, 0, {("slot", 0): 0, ("slot", 1): 0}).session_id == 0
            assert _fetch(c, first, 1, {}).error_code == ErrorCode.NONE
            assert _metrics(b)["incrementalfetchsessionevictions_total"] == 0
    finally:
        b.stop()
        b.cleanup()
    b = _start(tmp_path_factory, "evicting", **{"max.incremental.fetch.session.cache.slots": "1",
                                                 "min.incremental.fetch.session.eviction.ms": "0"})
    try:
        with RawClient(b.bootstrap) as c:
            _create(c, "slot", 2)
            first = _fetch(c, 0, 0, {("slot", 0): 0}).session_id
            second = 0
            while second == 0:  # the first is stale once a millisecond has passed since its last use
                second = _fetch(c, 0, 0, {("slot", 0): 0, ("slot", 1): 0}).session_id
            assert second != first
            assert _fetch(c, first, 1, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
            assert _metrics(b)["incrementalfetchsessionevictions_total"] == 1
            assert _metrics(b)["numincrementalfetchsessions"] == 1
    finally:
        b.stop()
        b.cleanup()


def test_bad_session_configs_stop_the_broker(tmp_path_factory: pytest.TempPathFactory) -> None:
    for key in ("max.incremental.fetch.session.cache.slots", "min.incremental.fetch.session.eviction.ms"):
        b = BrokerProcess(data_dir=tmp_path_factory.mktemp("bad-config") / "data", overrides={key: "-1"})
        with pytest.raises(RuntimeError, match=key):
            b.start(timeout=30)
        b.cleanup()


def test_metadata_still_answers(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as c:  # the broker survived everything above
        assert c.request(ApiKey.METADATA, 9, MetadataRequest(topics=None)).brokers[0].port == broker.port
