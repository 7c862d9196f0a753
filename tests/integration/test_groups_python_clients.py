"""Consumer groups against a strom broker subprocess with kafka-python and aiokafka consumers.

kafka-python: two members share a topic, commit, and a later member resumes from the commits; a static member
(``group_instance_id``) that restarts gets its partitions back without a rebalance of the others; a group mixing
kafka-python and confluent-kafka members agrees on the one protocol both support. aiokafka: commit and resume.
"""

from __future__ import annotations

import asyncio
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
# The tests poll several kafka-python consumers from one thread, and kafka-python joins a group inside poll(): a
# member blocked in its JoinGroup waits for one that cannot poll until the broker expires that one's session. So
# the session must be short enough to break that wait quickly, yet long enough that a member polled late on a
# loaded machine is not evicted over and over (3 s flaked under load, 10 s left too little time in the waits).
KP = {"auto_offset_reset": "earliest", "enable_auto_commit": False, "session_timeout_ms": 6000,
      "heartbeat_interval_ms": 500}


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


def wait_until(cond: Callable[[], bool], timeout: float, step: Callable[[], None], what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        step()


def poll_kp(consumers: list, sink: list | None = None) -> None:  # type: ignore[type-arg]
    for idx, c in enumerate(consumers):
        batch = c.poll(timeout_ms=50)
        records = [r for rs in batch.values() for r in rs]
        if records:
            assert sink is not None, f"unexpected records {[r.value for r in records][:3]}"
            sink.extend((idx, r.value) for r in records)
            c.commit()


def parts(c) -> set[int]:  # type: ignore[no-untyped-def]
    return {tp.partition for tp in c.assignment()}


def test_kafka_python_members_share_commit_and_resume(group_broker: BrokerProcess) -> None:
    bootstrap, topic, group = group_broker.bootstrap, "kp-share", "kp-share-group"
    create_topic(bootstrap, topic, 4)
    consumers = [kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id=f"kp{i}", **KP)
                 for i in range(2)]
    try:
        wait_until(lambda: [len(parts(c)) for c in consumers] == [2, 2], 60, lambda: poll_kp(consumers),
                   "two members with two partitions each")
        sent = produce(bootstrap, topic, "a", 200, 4)
        got: list[tuple[int, bytes]] = []
        wait_until(lambda: len(got) >= len(sent), 60, lambda: poll_kp(consumers, got), "records")
        assert Counter(v for _, v in got) == Counter(sent) and {i for i, _ in got} == {0, 1}
    finally:
        for c in consumers:
            c.close()
    sent2 = produce(bootstrap, topic, "b", 100, 4)
    # One end marker per partition after the new records: each partition is read in offset order, so an
    # already committed record read again would arrive before its partition's marker.
    markers = produce(bootstrap, topic, "end", 4, 4)
    late = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, **KP)
    try:
        got2: list[tuple[int, bytes]] = []
        wait_until(lambda: markers <= {v for _, v in got2}, 60, lambda: poll_kp([late], got2),
                   "records after restart")
        assert Counter(v for _, v in got2) == Counter(sent2 | markers)  # only what was not committed before
    finally:
        late.close()


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
    dynamic = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id="dyn", **KP)
    dynamic.subscribe([topic], listener=listener)
    static = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id="st",
                                 group_instance_id="instance-1", **KP)
    try:
        wait_until(lambda: len(parts(dynamic)) == 2 and len(parts(static)) == 2, 60,
                   lambda: poll_kp([dynamic, static]), "a stable group of two")
        revoked_before, static_parts = listener.revoked, parts(static)
        static.close()  # a static member sends no LeaveGroup
        static = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id="st",
                                     group_instance_id="instance-1", **KP)
        wait_until(lambda: len(parts(static)) == 2, 60, lambda: poll_kp([dynamic, static]), "the static member back")
        for _ in range(10):
            poll_kp([dynamic, static])
        assert parts(static) == static_parts and len(parts(dynamic)) == 2
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
        def step() -> None:
            kp.poll(timeout_ms=50)
            rd.poll(0.05)

        wait_until(lambda: len(parts(kp)) == 2 and len(rd.assignment()) == 2, 60, step, "a mixed stable group")
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
