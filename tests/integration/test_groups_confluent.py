"""Consumer groups against a strom broker subprocess with confluent-kafka (librdkafka) consumers.

One scenario runs through three phases on one 6-partition topic: three consumers share the partitions and
consume every record exactly once with manual commits; a consumer that closes (LeaveGroup) hands its
partitions over; a consumer in a child process that is SIGKILLed (no LeaveGroup) loses its partitions after the
session timeout and the others resume from its committed offsets without losing records.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from strom.broker_process import BrokerProcess

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

OVERRIDES = {"group.initial.rebalance.delay.ms": "200", "group.min.session.timeout.ms": "1000",
             "offsets.topic.num.partitions": "5"}
CONSUMER = {"auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 3000,
            "heartbeat.interval.ms": 300, "max.poll.interval.ms": 30000, "topic.metadata.refresh.interval.ms": 2000}
TOPIC_PARTITIONS = 6


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("groups-ck") / "data", overrides=OVERRIDES)
    b.start()
    yield b
    b.stop()
    b.cleanup()


def create_topic(bootstrap: str, topic: str, partitions: int = TOPIC_PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # keep a reference: the result needs the handle
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)


def produce(bootstrap: str, topic: str, tag: str, n: int, partitions: int = TOPIC_PARTITIONS) -> set[bytes]:
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = [f"{tag}-{i}".encode() for i in range(n)]
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % partitions)
    assert p.flush(20) == 0
    return set(values)


def wait_until(cond: Callable[[], bool], timeout: float, poll: Callable[[], None], what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        poll()


def poll_all(consumers: list[ck.Consumer], sink: list[tuple[int, bytes]] | None = None) -> None:
    """One round of polling every consumer; records go to ``sink`` and are committed synchronously."""
    for idx, c in enumerate(consumers):
        msgs = c.consume(200, 0.05)
        got = [m for m in msgs if m.error() is None]
        if got:
            assert sink is not None, f"unexpected records {[m.value() for m in got][:3]}"
            sink.extend((idx, m.value()) for m in got)
            c.commit(asynchronous=False)


def assigned(c: ck.Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


CHILD = r"""
import sys, time
import confluent_kafka as ck
conf = dict(eval(sys.argv[1]))
c = ck.Consumer(conf)
c.subscribe([sys.argv[2]])
announced = False
while True:
    for m in c.consume(20, 0.1):
        if m.error() is None:
            print("REC", m.value().decode(), flush=True)    # printed before the commit: at-least-once
            c.commit(message=m, asynchronous=False)
            time.sleep(0.02)
    parts = sorted(tp.partition for tp in c.assignment())
    if parts and not announced:
        print("ASSIGNED", ",".join(map(str, parts)), flush=True)
        announced = True
"""


class ChildConsumer:
    """A confluent-kafka consumer in a child process; stdout lines are collected by a thread."""

    def __init__(self, conf: dict[str, object], topic: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, repr(conf), topic], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.records: list[bytes] = []
        self.assigned: set[int] = set()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            kind, _, rest = line.strip().partition(" ")
            if kind == "REC":
                self.records.append(rest.encode())
            elif kind == "ASSIGNED":
                self.assigned = {int(x) for x in rest.split(",")}

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


def test_group_shares_partitions_hands_over_on_close_and_on_crash(group_broker: BrokerProcess) -> None:
    bootstrap, topic, group = group_broker.bootstrap, "ck-share", "ck-share-group"
    create_topic(bootstrap, topic)
    conf = {"bootstrap.servers": bootstrap, "group.id": group, **CONSUMER}
    consumers = [ck.Consumer({**conf, "client.id": f"c{i}"}) for i in range(3)]
    child: ChildConsumer | None = None
    try:
        for c in consumers:
            c.subscribe([topic])
        wait_until(lambda: [len(assigned(c)) for c in consumers] == [2, 2, 2], 30, lambda: poll_all(consumers),
                   "three consumers with two partitions each")
        assert set().union(*(assigned(c) for c in consumers)) == set(range(TOPIC_PARTITIONS))

        # Phase 1: a stable group consumes every record exactly once, each from its own partitions.
        sent = produce(bootstrap, topic, "one", 600)
        got: list[tuple[int, bytes]] = []
        wait_until(lambda: len(got) >= len(sent), 30, lambda: poll_all(consumers, got), "phase 1 records")
        assert Counter(v for _, v in got) == Counter(sent)
        assert {i for i, _ in got} == {0, 1, 2}

        # Phase 2: closing a consumer (LeaveGroup) hands its partitions to the others.
        consumers.pop().close()
        wait_until(lambda: sorted(len(assigned(c)) for c in consumers) == [3, 3], 30, lambda: poll_all(consumers),
                   "two consumers with three partitions each")
        sent2 = produce(bootstrap, topic, "two", 300)
        got2: list[tuple[int, bytes]] = []
        wait_until(lambda: len(got2) >= len(sent2), 30, lambda: poll_all(consumers, got2), "phase 2 records")
        assert Counter(v for _, v in got2) == Counter(sent2)

        # Phase 3: a consumer process joins, takes two partitions, consumes part of them and is SIGKILLed.
        child = ChildConsumer({**conf, "client.id": "child"}, topic)
        wait_until(lambda: len(child.assigned) == 2 and sorted(len(assigned(c)) for c in consumers) == [2, 2], 30,
                   lambda: poll_all(consumers), "the child consumer in the group")
        sent3 = produce(bootstrap, topic, "three", 600)
        got3: list[tuple[int, bytes]] = []
        wait_until(lambda: len(child.records) >= 20, 30, lambda: poll_all(consumers, got3), "child progress")
        child.kill()
        killed_at = time.monotonic()
        wait_until(lambda: sorted(len(assigned(c)) for c in consumers) == [3, 3], 30,
                   lambda: poll_all(consumers, got3), "the dead consumer's partitions to move")
        moved_after = time.monotonic() - killed_at
        child_values = list(child.records)
        wait_until(lambda: set(v for _, v in got3) | set(child_values) >= sent3, 30,
                   lambda: poll_all(consumers, got3), "phase 3 records")
        everything = Counter(v for _, v in got3) + Counter(child_values)
        assert set(everything) == sent3  # nothing lost
        duplicates = sum(n - 1 for n in everything.values())
        # Survivors resume from the child's commits: at most the record it printed but had not committed yet,
        # plus what a survivor read but could not commit across the rebalance (rare).
        assert duplicates <= 3, duplicates
        assert 1.0 < moved_after < 20, moved_after  # after the 3 s session timeout, not before
        # Every partition's committed offset is its end offset.
        c0 = consumers[0]
        committed = c0.committed([ck.TopicPartition(topic, p) for p in range(TOPIC_PARTITIONS)], timeout=10)
        ends = [c0.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1] for p in range(TOPIC_PARTITIONS)]
        assert [tp.offset for tp in committed] == ends
    finally:
        if child is not None and child.proc.poll() is None:
            child.kill()
        for c in consumers:
            c.close()


def test_cooperative_sticky_rebalances(group_broker: BrokerProcess) -> None:
    bootstrap, topic, group = group_broker.bootstrap, "ck-coop", "ck-coop-group"
    create_topic(bootstrap, topic)
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "partition.assignment.strategy": "cooperative-sticky",
            **CONSUMER}
    a = ck.Consumer({**conf, "client.id": "a"})
    b = ck.Consumer({**conf, "client.id": "b"})
    consumers = [a]
    try:
        a.subscribe([topic])
        wait_until(lambda: len(assigned(a)) == TOPIC_PARTITIONS, 30, lambda: poll_all(consumers), "a owns all")
        sent = produce(bootstrap, topic, "coop", 300)
        got: list[tuple[int, bytes]] = []
        wait_until(lambda: len(got) >= len(sent), 30, lambda: poll_all(consumers, got), "records with one member")
        before = assigned(a)
        consumers.append(b)
        b.subscribe([topic])
        wait_until(lambda: (len(assigned(a)), len(assigned(b))) == (3, 3), 30, lambda: poll_all(consumers),
                   "incremental handover to b")
        assert assigned(a) <= before and not assigned(a) & assigned(b)  # sticky: a kept three of its own
        sent2 = produce(bootstrap, topic, "coop2", 300)
        got2: list[tuple[int, bytes]] = []
        wait_until(lambda: len(got2) >= len(sent2), 30, lambda: poll_all(consumers, got2), "records with two")
        assert Counter(v for _, v in got2) == Counter(sent2) and {i for i, _ in got2} == {0, 1}
        consumers.remove(b)
        b.close()
        wait_until(lambda: len(assigned(a)) == TOPIC_PARTITIONS, 30, lambda: poll_all(consumers), "a owns all again")
        sent3 = produce(bootstrap, topic, "coop3", 120)
        got3: list[tuple[int, bytes]] = []
        wait_until(lambda: len(got3) >= len(sent3), 30, lambda: poll_all(consumers, got3), "records after leave")
        assert Counter(v for _, v in got3) == Counter(sent3)
    finally:
        for c in consumers:
            c.close()


def test_admin_group_apis(group_broker: BrokerProcess) -> None:
    bootstrap, topic, group = group_broker.bootstrap, "ck-admin", "ck-admin-group"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, "adm", 10, partitions=2)
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, **CONSUMER})
    c.subscribe([topic])
    got: list[tuple[int, bytes]] = []
    wait_until(lambda: len(got) >= 10, 30, lambda: poll_all([c], got), "records")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups(request_timeout=10).result()
    assert group in {g.group_id for g in listed.valid}
    desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    assert str(desc.state).endswith("STABLE") and len(desc.members) == 1
    assert {tp.partition for tp in desc.members[0].assignment.topic_partitions} == {0, 1}
    offsets = admin.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group)])[group].result()
    assert sorted((tp.partition, tp.offset) for tp in offsets.topic_partitions) == [(0, 5), (1, 5)]
    with pytest.raises(ck.KafkaException, match="NON_EMPTY_GROUP"):
        admin.delete_consumer_groups([group], request_timeout=10)[group].result()
    c.close()
    admin.delete_consumer_groups([group], request_timeout=10)[group].result()
    listed = admin.list_consumer_groups(request_timeout=10).result()
    assert group not in {g.group_id for g in listed.valid}
