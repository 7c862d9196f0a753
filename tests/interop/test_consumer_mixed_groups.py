"""Mixed consumer groups on the strom broker: confluent-kafka (librdkafka) and strom consumers in one group
share the partitions and hand them over on rebalance, with eager (range) and cooperative (cooperative-sticky)
assignment, whichever client leads the group."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from strom.broker_process import BrokerProcess
from strom.common.structs import TopicPartition
from strom.consumer import KafkaConsumer

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

ck = pytest.importorskip("confluent_kafka")
PARTITIONS = 6


@pytest.fixture(scope="module")
def mixed_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("mixed-groups") / "data",
                      overrides={"group.initial.rebalance.delay.ms": "0"})
    b.start()
    yield b
    b.stop()
    b.cleanup()


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(30)


def produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, value=b"%d" % i, partition=i % PARTITIONS)
    assert p.flush(30) == 0


class Member(threading.Thread):
    """One group member polling in its own thread; ``events`` logs (kind, partitions) rebalance callbacks."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.seen: list[int] = []
        self.assignment: set[int] = set()
        self.events: list[tuple[str, frozenset[int]]] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.refused_commits: list[str] = []


class ConfluentMember(Member):
    def __init__(self, bootstrap: str, group: str, topic: str, strategy: str) -> None:
        super().__init__("confluent")
        self.consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                     "partition.assignment.strategy": strategy, "auto.offset.reset": "earliest",
                                     "enable.auto.commit": False, "session.timeout.ms": 10_000,
                                     "heartbeat.interval.ms": 500})
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, consumer, partitions) -> None:
        self.events.append(("assigned", frozenset(p.partition for p in partitions)))

    def _revoked(self, consumer, partitions) -> None:
        self.events.append(("revoked", frozenset(p.partition for p in partitions)))
        # The usual hand-over: commit what was read before the partitions go (they are still assigned here).
        # The group may still be completing the rebalance that revoked them: retry until the other member syncs.
        deadline = time.monotonic() + 10
        while not self._commit() and time.monotonic() < deadline:
            time.sleep(0.05)

    def _commit(self) -> bool:
        """Commit the positions read; False when the group's rebalance refused it (the application goes on, as
        with Kafka: a member that commits while its JoinGroup is pending may be a generation behind once the
        coordinator handles the commit, and the next commit carries the same positions)."""
        try:
            self.consumer.commit(asynchronous=False)
        except ck.KafkaException as exc:
            code = exc.args[0].code()
            if code == ck.KafkaError._NO_OFFSET:
                return True
            if code not in (ck.KafkaError.ILLEGAL_GENERATION, ck.KafkaError.REBALANCE_IN_PROGRESS):
                raise
            self.refused_commits.append(exc.args[0].name())
            return False
        return True

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                messages = [m for m in self.consumer.consume(100, 0.2) if not m.error()]
                self.seen.extend(int(m.value()) for m in messages)
                if messages:
                    self._commit()
                self.assignment = {p.partition for p in self.consumer.assignment()}
        except BaseException as exc:
            self.error = exc
        finally:
            self.consumer.close()


class StromMember(Member):
    def __init__(self, bootstrap: str, group: str, topic: str, strategy: str) -> None:
        super().__init__("strom")
        self.consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group},
                                      key_deserializer="bytes", value_deserializer="bytes",
                                      auto_offset_reset="earliest", enable_auto_commit=False,
                                      partition_assignment_strategy=[strategy], session_timeout_ms=10_000,
                                      heartbeat_interval_ms=500)
        member = self

        class Listener:
            def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
                member.events.append(("assigned", frozenset(tp.partition for tp in partitions)))

            def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
                member.events.append(("revoked", frozenset(tp.partition for tp in partitions)))

        self.consumer.subscribe([topic], Listener())

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                records = self.consumer.poll(0.2)
                self.seen.extend(int(r.value) for r in records)
                if records:
                    self.consumer.commit_sync()
                self.assignment = {tp.partition for tp in self.consumer.assignment()}
        except BaseException as exc:
            self.error = exc
        finally:
            self.consumer.close()


def wait_for(condition, timeout: float, what: str, *members: Member) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            state = "; ".join(f"{m.name}: assignment {sorted(m.assignment)}, error {m.error!r}, events "
                              f"{m.events[-6:]}, refused commits {m.refused_commits}" for m in members)
            raise AssertionError(f"timed out waiting for {what} ({state})")
        time.sleep(0.05)


def split_evenly(a: Member, b: Member) -> bool:
    return len(a.assignment) == 3 and len(b.assignment) == 3 and a.assignment | b.assignment == set(range(6))


def run_scenario(bootstrap: str, topic: str, strategy: str, first: type, second: type) -> tuple[Member, Member]:
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, 0, 600)
    group = f"mixed-{topic}"
    a = first(bootstrap, group, topic, strategy)
    a.start()
    wait_for(lambda: len(a.assignment) == 6, 30, f"{a.name} to own every partition")
    b = second(bootstrap, group, topic, strategy)
    b.start()
    try:
        wait_for(lambda: split_evenly(a, b), 90, "the partitions to be shared 3/3", a, b)
        produce(bootstrap, topic, 600, 600)
        wait_for(lambda: len(set(a.seen) | set(b.seen)) >= 1200, 30, "every record while shared")
        b.stop.set()  # b leaves the group (close sends LeaveGroup): a takes everything back
        b.join(20)
        wait_for(lambda: len(a.assignment) == 6, 40, f"{a.name} to take every partition back", a, b)
        produce(bootstrap, topic, 1200, 600)
        wait_for(lambda: len(set(a.seen) | set(b.seen)) >= 1800, 30, "every record after the hand-back")
        # One end marker per partition: a partition is read in offset order, so a record consumed twice
        # (re-read from an older position after a hand-over) arrives before that partition's marker.
        produce(bootstrap, topic, 1800, PARTITIONS)
        wait_for(lambda: set(a.seen) >= set(range(1800, 1800 + PARTITIONS)), 30, "the end markers")
    finally:
        for m in (a, b):
            m.stop.set()
        for m in (a, b):
            m.join(20)
    for m in (a, b):
        assert m.error is None, m.error
    seen = a.seen + b.seen
    assert set(seen) == set(range(1800 + PARTITIONS))  # nothing lost
    assert len(seen) == len(set(seen)), "records consumed twice across the hand-overs"
    assert set(b.seen) and set(a.seen)
    return a, b


def test_eager_range_confluent_leader(mixed_broker: BrokerProcess) -> None:
    a, b = run_scenario(mixed_broker.bootstrap, "mixed-eager", "range", ConfluentMember, StromMember)
    # eager: the confluent member gave up all six partitions when the strom member joined
    assert ("revoked", frozenset(range(6))) in a.events


def revocations(member: Member) -> list[frozenset[int]]:
    """Partitions revoked in rebalances (the last revocation, all six at close, left out)."""
    return [p for kind, p in member.events if kind == "revoked" and p][:-1]


def test_cooperative_sticky_confluent_leader(mixed_broker: BrokerProcess) -> None:
    a, b = run_scenario(mixed_broker.bootstrap, "mixed-coop-ck", "cooperative-sticky", ConfluentMember,
                        StromMember)
    # cooperative: the confluent member revoked only the three partitions that moved, and the strom member was
    # assigned them incrementally
    assert revocations(a) and all(len(p) == 3 for p in revocations(a)), a.events
    assert [p for kind, p in b.events if kind == "assigned" and p] == [revocations(a)[0]], (a.events, b.events)


def test_cooperative_sticky_strom_leader(mixed_broker: BrokerProcess) -> None:
    a, b = run_scenario(mixed_broker.bootstrap, "mixed-coop-strom", "cooperative-sticky", StromMember,
                        ConfluentMember)
    # the strom leader kept three partitions and revoked only the three handed to the confluent member
    assert revocations(a) and all(len(p) == 3 for p in revocations(a)), a.events
    assert not any(len(p) == 6 for p in revocations(a)), a.events
