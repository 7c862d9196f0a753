"""KafkaConsumer + ConsumerCoordinator + Fetcher stepped over a MockClient and MockTime (no sockets, no
threads: the heartbeat thread is created but stepped by hand)."""

from __future__ import annotations

import pytest

from strom.common.error_codes import ErrorCode, OffsetOutOfRangeError
from strom.common.structs import OffsetAndMetadata, TopicPartition
from strom.consumer import CommitFailedError, NoOffsetForPartitionError, RebalanceInProgressError, WakeupError
from strom.consumer.internals.abstract_coordinator import MemberState
from strom.consumer.internals.heartbeat import HeartbeatThread
from strom.protocol.api_keys import ApiKey

from .fake_broker import FakeBroker

pytestmark = [pytest.mark.component, pytest.mark.timeout(60)]

T = "topic"
TP0, TP1 = TopicPartition(T, 0), TopicPartition(T, 1)


@pytest.fixture(autouse=True)
def no_heartbeat_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(HeartbeatThread, "start", lambda self: None)


@pytest.fixture
def broker() -> FakeBroker:
    b = FakeBroker({T: 2})
    b.produce(TP0, 5)
    b.produce(TP1, 3)
    return b


def group_consumer(broker: FakeBroker, **configs):
    configs.setdefault("group_id", "g")
    configs.setdefault("auto_offset_reset", "earliest")
    configs.setdefault("enable_auto_commit", False)
    c = broker.consumer(**configs)
    c.subscribe([T])
    return c


def test_join_sync_fetch_and_commit(broker: FakeBroker) -> None:
    c = group_consumer(broker)
    records = broker.run(c, lambda rs: len(rs) >= 8)
    assert sorted((r.partition, r.offset) for r in records) == [(0, i) for i in range(5)] + [(1, i) for i in range(3)]
    assert c.assignment() == {TP0, TP1}
    coordinator = c._coordinator
    assert coordinator.state is MemberState.STABLE and coordinator.generation.generation_id == 1
    # the first JoinGroup carried no member id and was answered MEMBER_ID_REQUIRED
    joins = broker.requests_of(ApiKey.JOIN_GROUP)
    assert joins[0].member_id == "" and joins[1].member_id == "member-1"
    c.commit_async()
    broker.pump()
    c.commit_sync()
    assert broker.committed == {TP0: 5, TP1: 3}
    assert c.committed({TP0, TP1}) == {TP0: OffsetAndMetadata(5, "", None), TP1: OffsetAndMetadata(3, "", None)}
    assert c.position(TP0) == 5


def test_starts_from_committed_offsets(broker: FakeBroker) -> None:
    broker.committed[TP0] = 3
    c = group_consumer(broker)
    records = broker.run(c, lambda rs: len(rs) >= 5)
    assert sorted((r.partition, r.offset) for r in records) == [(0, 3), (0, 4), (1, 0), (1, 1), (1, 2)]


def test_max_poll_records(broker: FakeBroker) -> None:
    c = group_consumer(broker, max_poll_records=2)
    sizes = []
    broker.run(c, lambda rs: sizes.append(len(rs)) or len(rs) >= 8)
    polled = []
    for _ in range(3):
        polled.append(len(c.poll(timeout_ms=0)))
        broker.pump()
    assert all(n <= 2 for n in polled)


def test_heartbeat_rebalance_in_progress_triggers_rejoin(broker: FakeBroker) -> None:
    c = group_consumer(broker)
    broker.run(c, lambda rs: len(rs) >= 8)
    coordinator = c._coordinator
    broker.inject(ApiKey.HEARTBEAT, ErrorCode.REBALANCE_IN_PROGRESS)
    broker.time.sleep(3001)
    with coordinator.lock:
        coordinator.heartbeat_thread.run_once()  # sends the heartbeat
    broker.pump()
    with coordinator.lock:
        coordinator.client.poll_no_wakeup()
    assert coordinator.rejoin_needed
    broker.run(c, lambda rs: coordinator.generation.generation_id == 2)
    assert coordinator.state is MemberState.STABLE


def test_commit_errors(broker: FakeBroker) -> None:
    c = group_consumer(broker)
    broker.run(c, lambda rs: len(rs) >= 8)
    broker.inject(ApiKey.OFFSET_COMMIT, ErrorCode.REBALANCE_IN_PROGRESS)
    with pytest.raises(RebalanceInProgressError):
        run_commit(broker, c)
    broker.inject(ApiKey.OFFSET_COMMIT, ErrorCode.UNKNOWN_MEMBER_ID)
    with pytest.raises(CommitFailedError):
        run_commit(broker, c)
    assert c._coordinator.generation.member_id == ""  # reset: the next poll rejoins as a new member


def test_commit_retries_after_coordinator_moved(broker: FakeBroker) -> None:
    c = group_consumer(broker)
    broker.run(c, lambda rs: len(rs) >= 8)
    broker.inject(ApiKey.OFFSET_COMMIT, ErrorCode.NOT_COORDINATOR)
    run_commit(broker, c)
    assert broker.committed == {TP0: 5, TP1: 3}
    assert len(broker.requests_of(ApiKey.FIND_COORDINATOR)) == 2


def run_commit(broker: FakeBroker, c) -> None:
    c.commit_sync(timeout=5)


def test_auto_commit_interval(broker: FakeBroker) -> None:
    c = group_consumer(broker, enable_auto_commit=True, auto_commit_interval_ms=1000)
    broker.run(c, lambda rs: len(rs) >= 8)
    assert broker.committed == {}
    broker.time.sleep(1001)
    broker.run(c, lambda rs: broker.committed == {TP0: 5, TP1: 3})


def test_offset_out_of_range_resets_per_policy(broker: FakeBroker) -> None:
    c = broker.consumer(auto_offset_reset="earliest")
    c.assign([TP0])
    c.seek(TP0, 100)
    records = broker.run(c, lambda rs: len(rs) >= 5)
    assert [r.offset for r in records] == [0, 1, 2, 3, 4]

    broker2 = FakeBroker({T: 2})  # one consumer per MockClient
    broker2.produce(TP0, 5)
    c2 = broker2.consumer(auto_offset_reset="none")
    c2.assign([TP0])
    c2.seek(TP0, 100)
    with pytest.raises(OffsetOutOfRangeError) as info:
        broker2.run(c2, lambda rs: False)
    assert info.value.offset_out_of_range_partitions == {TP0: 100}


def test_latest_and_none_reset_without_committed_offset(broker: FakeBroker) -> None:
    c = group_consumer(broker, auto_offset_reset="latest")
    broker.run(c, lambda rs: c.assignment() and all(c._subscriptions.position(tp) is not None for tp in c.assignment()))
    assert c.position(TP0) == 5 and c.position(TP1) == 3
    broker2 = FakeBroker({T: 2})
    c2 = group_consumer(broker2, auto_offset_reset="none")
    with pytest.raises(NoOffsetForPartitionError):
        broker2.run(c2, lambda rs: False)


def test_pause_resume_and_seek(broker: FakeBroker) -> None:
    c = broker.consumer()
    c.assign([TP0, TP1])
    c.seek_to_beginning()
    c.pause([TP1])
    records = broker.run(c, lambda rs: len(rs) >= 5)
    assert {r.partition for r in records} == {0} and c.paused() == {TP1}
    c.resume([TP1])
    records = broker.run(c, lambda rs: len(rs) >= 3)
    assert [r.offset for r in records if r.partition == 1] == [0, 1, 2]
    c.seek(TP0, 2)
    records = broker.run(c, lambda rs: len(rs) >= 3)
    assert [r.offset for r in records] == [2, 3, 4]


def test_wakeup_interrupts_poll(broker: FakeBroker) -> None:
    c = broker.consumer()
    c.assign([TP0])
    c.wakeup()
    with pytest.raises(WakeupError):
        c.poll(timeout_ms=0)
    c.poll(timeout_ms=0)  # the wakeup is consumed


def test_offsets_for_times_and_edges(broker: FakeBroker) -> None:
    c = broker.consumer()
    c.assign([TP0])
    assert c.beginning_offsets([TP0], timeout=5) == {TP0: 0}
    assert c.end_offsets([TP0], timeout=5) == {TP0: 5}
    found = c.offsets_for_times({TP0: 0}, timeout=5)
    assert found[TP0] is not None and found[TP0].offset == 0


def test_leave_group_on_poll_timeout(broker: FakeBroker) -> None:
    c = group_consumer(broker, max_poll_interval_ms=10_000, session_timeout_ms=30_000)
    broker.run(c, lambda rs: len(rs) >= 8)
    coordinator = c._coordinator
    broker.time.sleep(10_001)
    with coordinator.lock:
        coordinator.heartbeat_thread.run_once()
        coordinator.client.poll_no_wakeup()  # the heartbeat thread's next pass transmits it
    assert broker.requests_of(ApiKey.LEAVE_GROUP)
    assert coordinator.state is MemberState.UNJOINED
    # the next poll rejoins as a new member; the lost partitions were reported as lost
    broker.run(c, lambda rs: coordinator.state is MemberState.STABLE)


def test_commit_async_callbacks_run_in_order_on_the_caller_thread(broker: FakeBroker) -> None:
    import threading

    c = group_consumer(broker)
    broker.run(c, lambda rs: len(rs) >= 8)
    calls = []

    def callback(offsets, exc):
        calls.append((dict(offsets), exc, threading.current_thread().name))

    c.commit_async({TP0: 1}, callback)
    c.commit_async({TP0: 2}, callback)
    broker.inject(ApiKey.OFFSET_COMMIT, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    c.commit_async({TP0: 3}, callback)
    c.poll(timeout_ms=0)  # callbacks are delivered by the consumer's next call
    assert [(o[TP0].offset, type(e).__name__ if e else None) for o, e, _ in calls] == [
        (1, None), (2, None), (3, "RetriableCommitFailedError")]
    assert {name for _, _, name in calls} == {threading.current_thread().name}


def test_close_commits_with_auto_commit_and_leaves(broker: FakeBroker) -> None:
    revoked = []

    class Listener:
        def on_partitions_assigned(self, partitions):
            pass

        def on_partitions_revoked(self, partitions):
            revoked.append(set(partitions))

    c = broker.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=True)
    c.subscribe([T], Listener())
    broker.run(c, lambda rs: len(rs) >= 8)
    c.close()
    assert broker.committed == {TP0: 5, TP1: 3}
    assert revoked == [{TP0, TP1}] and broker.requests_of(ApiKey.LEAVE_GROUP)
    from strom.common.errors import IllegalStateError

    with pytest.raises(IllegalStateError):
        c.poll(timeout_ms=0)


def test_unsubscribe_revokes_and_leaves(broker: FakeBroker) -> None:
    c = group_consumer(broker)
    broker.run(c, lambda rs: len(rs) >= 8)
    c.unsubscribe()
    assert c.assignment() == set() and c.subscription() == set()
    c._client.poll_no_wakeup()
    assert broker.requests_of(ApiKey.LEAVE_GROUP)
    from strom.common.errors import IllegalStateError

    with pytest.raises(IllegalStateError, match="not subscribed"):
        c.poll(timeout_ms=0)


def test_only_one_thread_may_use_the_consumer(broker: FakeBroker) -> None:
    import threading

    from strom.consumer.errors import ConcurrentModificationError

    c = broker.consumer()
    c.assign([TP0])
    c._acquire()  # this thread is "inside" the consumer
    errors = []
    t = threading.Thread(target=lambda: errors.append(pytest.raises(ConcurrentModificationError, c.poll, 0)))
    t.start()
    t.join()
    c._release()
    assert errors
