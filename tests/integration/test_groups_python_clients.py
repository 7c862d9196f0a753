"""Consumer groups against a strom broker subprocess with kafka-python and aiokafka consumers.

kafka-python: two members share a topic, commit, and a later member resumes from the commits; a static member
(``group_instance_id``) that restarts gets its partitions back without a rebalance of the others; a group mixing
kafka-python and confluent-kafka members agrees on the one protocol both support. aiokafka: commit and resume.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from strom.broker_process import BrokerProcess

kafka = pytest.importorskip("kafka")
from kafka.admin import NewTopic  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

OVERRIDES = {"group.initial.rebalance.delay.ms": "200", "group.min.session.timeout.ms": "1000",
             "offsets.topic.num.partitions": "5"}
KP = {"auto_offset_reset": "earliest", "enable_auto_commit": False, "session_timeout_ms": 6000,
      "heartbeat_interval_ms": 500}


class Poller:
    """One kafka-python consumer polled in a thread of its own, committing what it reads. kafka-python joins a
    group inside ``poll()``: members polled from one thread wait on each other (a member blocked in its
    JoinGroup holds up the one that would complete the rebalance until the broker expires its session), which
    made these tests flaky on a loaded machine."""

    def __init__(self, consumer: object, sink: list | None = None, idx: int = 0) -> None:  # type: ignore[type-arg]
        self.consumer = consumer
        self.sink = sink
        self.idx = idx
        self.polls = 0
        self.assigned: set[int] = set()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kp-poller-{idx}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        c = self.consumer
        try:
            while not self._stop.is_set():
                batch = c.poll(timeout_ms=100)  # type: ignore[attr-defined]
                records = [r for rs in batch.values() for r in rs]
                if records:
                    assert self.sink is not None, f"unexpected records {[r.value for r in records][:3]}"
                    self.sink.extend((self.idx, r.value) for r in records)
                    c.commit()  # type: ignore[attr-defined]
                self.assigned = {tp.partition for tp in c.assignment()}  # type: ignore[attr-defined]
                self.polls += 1
        except BaseException as e:  # noqa: BLE001 - reported by check()
            self.error = e

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"poller {self.idx} failed") from self.error
        assert self._thread.is_alive() or self._stop.is_set(), f"poller {self.idx} stopped"

    def parts(self) -> set[int]:
        self.check()
        return self.assigned

    def close(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), f"poller {self.idx} did not stop"
        self.consumer.close()  # type: ignore[attr-defined]
        self.check()


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("groups-py") / "data", overrides=OVERRIDES)
    b.start()
    yield b
    b.stop()
    b.cleanup()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    admin.close()


def produce(bootstrap: str, topic: str, tag: str, n: int, partitions: int) -> set[bytes]:
    p = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False)
    values = [f"{tag}-{i}".encode() for i in range(n)]
    for i, v in enumerate(values):
        p.send(topic, v, partition=i % partitions)
    p.flush(20)
    p.close()
    return set(values)


def wait_until(cond: Callable[[], bool], timeout: float, what: str, pollers: list[Poller] = ()) -> None:  # type: ignore[assignment]
    """Wait for ``cond()`` (checked every 50 ms) while the pollers run; a poller's error fails at once."""
    deadline = time.monotonic() + timeout
    while not cond():
        for p in pollers:
            p.check()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def parts(c) -> set[int]:  # type: ignore[no-untyped-def]
    return {tp.partition for tp in c.assignment()}


def test_kafka_python_members_share_commit_and_resume(group_broker: BrokerProcess) -> None:
    bootstrap, topic, group = group_broker.bootstrap, "kp-share", "kp-share-group"
    create_topic(bootstrap, topic, 4)
    got: list[tuple[int, bytes]] = []
    pollers = [Poller(kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id=f"kp{i}",
                                          **KP), got, i) for i in range(2)]
    try:
        wait_until(lambda: [len(p.parts()) for p in pollers] == [2, 2], 60, "two members with two partitions each",
                   pollers)
        sent = produce(bootstrap, topic, "a", 200, 4)
        wait_until(lambda: len(got) >= len(sent), 60, "records", pollers)
        assert Counter(v for _, v in got) == Counter(sent) and {i for i, _ in got} == {0, 1}
    finally:
        for p in pollers:
            p.close()
    sent2 = produce(bootstrap, topic, "b", 100, 4)
    # One end marker per partition after the new records: each partition is read in offset order, so an
    # already committed record read again would arrive before its partition's marker.
    markers = produce(bootstrap, topic, "end", 4, 4)
    got2: list[tuple[int, bytes]] = []
    late = Poller(kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, **KP), got2)
    try:
        wait_until(lambda: markers <= {v for _, v in got2}, 60, "records after restart", [late])
    finally:
        late.close()
    assert Counter(v for _, v in got2) == Counter(sent2 | markers)  # only what was not committed before


class CountingListener(kafka.ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.revoked = 0

    def on_partitions_revoked(self, revoked) -> None:  # type: ignore[no-untyped-def]
        if revoked:
            self.revoked += 1

    def on_partitions_assigned(self, assigned) -> None:  # type: ignore[no-untyped-def]
        pass


def test_kafka_python_static_member_restart_keeps_assignment(group_broker: BrokerProcess) -> None:
    bootstrap, topic, group = group_broker.bootstrap, "kp-static", "kp-static-group"
    create_topic(bootstrap, topic, 4)
    listener = CountingListener()
    dynamic_consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id="dyn", **KP)
    dynamic_consumer.subscribe([topic], listener=listener)
    dynamic = Poller(dynamic_consumer, idx=0)

    def static_member() -> Poller:
        return Poller(kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id="st",
                                          group_instance_id="instance-1", **KP), idx=1)

    static = static_member()
    try:
        wait_until(lambda: len(dynamic.parts()) == 2 and len(static.parts()) == 2, 60, "a stable group of two",
                   [dynamic, static])
        revoked_before, static_parts = listener.revoked, static.parts()
        static.close()  # a static member sends no LeaveGroup
        static = static_member()
        wait_until(lambda: len(static.parts()) == 2, 60, "the static member back", [dynamic, static])
        polls = dynamic.polls, static.polls
        wait_until(lambda: dynamic.polls >= polls[0] + 10 and static.polls >= polls[1] + 10, 60,
                   "ten more polls of each member", [dynamic, static])
        assert static.parts() == static_parts and len(dynamic.parts()) == 2
        assert listener.revoked == revoked_before  # the other member was not rebalanced
    finally:
        dynamic.close()
        static.close()


def test_mixed_clients_agree_on_common_protocol(group_broker: BrokerProcess) -> None:
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    bootstrap, topic, group = group_broker.bootstrap, "mixed", "mixed-group"
    create_topic(bootstrap, topic, 4)
    kp = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             partition_assignment_strategy=[RoundRobinPartitionAssignor], **KP)
    rd = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "session.timeout.ms": 3000, "heartbeat.interval.ms": 300,
                      "partition.assignment.strategy": "range,roundrobin"})
    rd.subscribe([topic])
    try:
        deadline = time.monotonic() + 60
        while not (len(parts(kp)) == 2 and len(rd.assignment()) == 2):  # (librdkafka joins in its own thread)
            assert time.monotonic() < deadline, "timed out waiting for a mixed stable group"
            kp.poll(timeout_ms=50)
            rd.poll(0.05)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
        assert desc.partition_assignor == "roundrobin"  # the only protocol both members support
    finally:
        kp.close()
        rd.close()


def test_aiokafka_commit_and_resume(group_broker: BrokerProcess) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    bootstrap, topic, group = group_broker.bootstrap, "aio-resume", "aio-resume-group"
    create_topic(bootstrap, topic, 3)
    sent = produce(bootstrap, topic, "x", 150, 3)

    async def consume(n: int) -> list[bytes]:
        c = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                      auto_offset_reset="earliest", enable_auto_commit=False,
                                      session_timeout_ms=3000, heartbeat_interval_ms=300)
        await c.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 30
            while len(got) < n and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=200)
                got.extend(m.value for msgs in batch.values() for m in msgs)
                if batch:
                    await c.commit()
            extra = await c.getmany(timeout_ms=300)
            got.extend(m.value for msgs in extra.values() for m in msgs)
        finally:
            await c.stop()
        return got

    first = asyncio.run(consume(len(sent)))
    assert Counter(first) == Counter(sent)
    sent2 = produce(bootstrap, topic, "y", 60, 3)
    second = asyncio.run(consume(len(sent2)))
    assert Counter(second) == Counter(sent2)
