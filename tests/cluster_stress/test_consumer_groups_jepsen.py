"""Consumer groups under failover, Jepsen-style (``make test-cluster``): while an idempotent acks=all producer
writes, two consumer groups read the topic and commit after every poll -- one of two strom consumers (one of them
closed and made again now and then, so the group rebalances), one of a confluent-kafka consumer -- and brokers are
kill -9'd and restarted in turn (partition leaders, the groups' coordinator, sometimes two at once), ZooKeeper once.
``__consumer_offsets`` has replication 3.

The judge is what the clients were told. Every acknowledged record reaches each group at least once, with the
value the log holds at its offset; while a member owns a partition its records come in offset order without a gap
(a skip would be a record the group never processes); and each group's committed offsets end at the log end.
"""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient

from strom import KafkaConsumer
from strom.testing.cluster import LocalCluster, wait_until
from tests.cluster.test_replication import create_topic, partition_meta, read_all
from tests.cluster_stress.rounds import kill_round

pytestmark = [pytest.mark.cluster, pytest.mark.stress, pytest.mark.timeout(900)]

ROUNDS = int(os.environ.get("STROM_JEPSEN_ROUNDS", "8"))
PARTITIONS = 4
TOPIC = "cg-jepsen"
STROM_GROUP = "cg-strom"
CONFLUENT_GROUP = "cg-confluent"


class Writer:
    """confluent-kafka, idempotent, acks=all: values 0, 1, 2, ... round-robin over the partitions."""

    def __init__(self, bootstrap: str) -> None:
        self.acked: dict[int, dict[int, int]] = {p: {} for p in range(PARTITIONS)}  # partition -> offset -> value
        # partition -> values acknowledged with no offset: librdkafka's idempotent producer reports the records of a
        # request whose answer it never got (a broker killed mid-request) as delivered, offset unknown, once a later
        # request to that partition succeeds, whose sequence numbers prove them written ("implicit acks")
        self.acked_without_offset: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.errors: list[str] = []
        self._p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                            "linger.ms": 5, "message.timeout.ms": 300000})
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="cg-writer", daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            def cb(err: Any, msg: Any) -> None:
                if err is not None:
                    self.errors.append(err.name())
                elif msg.offset() is None:
                    self.acked_without_offset[msg.partition()].append(int(msg.value()))
                else:
                    self.acked[msg.partition()][msg.offset()] = int(msg.value())
            try:
                self._p.produce(TOPIC, str(i).encode(), partition=i % PARTITIONS, on_delivery=cb)
                i += 1
            except BufferError:
                time.sleep(0.05)
            except Exception:  # noqa: BLE001 - refused at once (metadata lagging a restart): the value is tried again
                time.sleep(0.1)
            self._p.poll(0)
            if i % 20 == 0:
                time.sleep(0.01)  # about 2,000 records a second: the readers keep up, and are mid-read at each kill

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(60)
        assert self._p.flush(300) == 0


class Member:
    """One group member in a thread: poll, remember each record, commit synchronously; ``restart()`` closes the
    consumer and makes a new one (the group rebalances twice)."""

    def __init__(self, name: str, client: str, group: str, bootstrap: str) -> None:
        self.name = name
        self.client = client
        self.group = group
        self.bootstrap = bootstrap
        self.delivered: list[tuple[int, int, int]] = []  # (partition, offset, value)
        self.gaps: list[str] = []
        self.commit_errors: list[str] = []
        self.restarts = 0
        self.assignment: list[int] = []  # the partitions it owned at its last poll
        self._last: dict[int, int] = {}  # partition -> last offset seen while owning it
        self._restart = threading.Event()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"cg-member-{name}", daemon=True)

    # -- ownership: a partition (re)assigned starts a new run, at the committed offset ------------------------
    def _assigned(self, partitions: list[int]) -> None:
        for p in partitions:
            self._last.pop(p, None)

    def _see(self, partition: int, offset: int, value: int) -> None:
        last = self._last.get(partition)
        if last is not None and offset > last + 1:
            self.gaps.append(f"{self.name}: partition {partition} jumped from offset {last} to {offset}")
        self._last[partition] = offset
        self.delivered.append((partition, offset, value))

    def _consumer(self) -> Any:
        if self.client == "strom":
            member = self

            class Listener:
                def on_partitions_revoked(self, partitions: set[Any]) -> None:
                    pass

                def on_partitions_assigned(self, partitions: set[Any]) -> None:
                    member._assigned([tp.partition for tp in partitions])

            c = KafkaConsumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                               "enable.auto.commit": False, "auto.offset.reset": "earliest",
                               "max.poll.records": 300, "key.deserializer": "bytes", "value.deserializer": "bytes"})
            c.subscribe([TOPIC], listener=Listener())
            return c
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest"})
        c.subscribe([TOPIC], on_assign=lambda _c, tps: self._assigned([tp.partition for tp in tps]))
        return c

    def _poll_once(self, c: Any) -> bool:
        if self.client == "strom":
            records = list(c.poll(0.2))
            for r in records:
                self._see(r.partition, r.offset, int(r.value))
            self.assignment = sorted(tp.partition for tp in c.assignment())
        else:
            records = [m for m in c.consume(300, 0.2) if m.error() is None]
            for m in records:
                self._see(m.partition(), m.offset(), int(m.value()))
            self.assignment = sorted(tp.partition for tp in c.assignment())
        return bool(records)

    def state(self) -> str:
        last: dict[int, int] = {}
        for p, o, _ in self.delivered:
            last[p] = max(o, last.get(p, -1))
        return (f"{self.name}: owns {self.assignment}, highest offsets read {dict(sorted(last.items()))}, "
                f"restarts {self.restarts}, commit errors {sorted(set(self.commit_errors))}")

    def _commit(self, c: Any) -> None:
        try:
            if self.client == "strom":
                c.commit_sync()
            else:
                c.commit(asynchronous=False)
        except Exception as e:  # noqa: BLE001 - a rebalance or a coordinator moving: the records come again
            self.commit_errors.append(type(e).__name__)

    def _close(self, c: Any) -> None:
        try:
            c.close()
        except Exception as e:  # noqa: BLE001 - the coordinator may be down: the session times out instead
            self.commit_errors.append(f"close: {type(e).__name__}")

    def _run(self) -> None:
        c = self._consumer()
        while not self._stop.is_set():
            if self._restart.is_set():
                self._restart.clear()
                self._close(c)
                self._last.clear()
                self.restarts += 1
                c = self._consumer()
            if self._poll_once(c):
                self._commit(c)
        self._commit(c)
        self._close(c)

    def start(self) -> None:
        self.thread.start()

    def restart(self) -> None:
        self._restart.set()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(120)
        assert not self.thread.is_alive(), f"member {self.name} did not finish"


def group_coordinator(c: LocalCluster, group: str) -> int | None:
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        return admin.describe_consumer_groups([group], request_timeout=10)[group].result().coordinator.id
    except Exception:  # noqa: BLE001 - mid-failover: the caller picks someone else
        return None


def committed_offsets(c: LocalCluster, group: str, topic: str = TOPIC, partitions: int = PARTITIONS,
                      ) -> dict[int, int]:
    reader = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in reader.committed([CTP(topic, p) for p in range(partitions)],
                                                                   timeout=30)}
    finally:
        reader.close()


def test_consumer_groups_process_every_record_through_broker_kills() -> None:
    rnd = random.Random(int(os.environ.get("STROM_JEPSEN_SEED", "20261129")))
    with LocalCluster(3, overrides={"min.insync.replicas": "2", "unclean.leader.election.enable": "false",
                                    "offsets.topic.replication.factor": "3"}) as c:
        create_topic(c, TOPIC, partitions=PARTITIONS)
        writer = Writer(c.bootstrap)
        members = [Member("strom-a", "strom", STROM_GROUP, c.bootstrap),
                   Member("strom-b", "strom", STROM_GROUP, c.bootstrap),
                   Member("confluent", "confluent", CONFLUENT_GROUP, c.bootstrap)]
        writer.start()
        for m in members:
            m.start()
        log: list[str] = []
        zk_round = rnd.randrange(1, ROUNDS)
        for round_ in range(ROUNDS):
            time.sleep(1.0)
            kind = rnd.choice(["leader", "coordinator", "two", "coordinator"])
            if kind == "leader":
                victims = [partition_meta(c, TOPIC, rnd.randrange(PARTITIONS)).leader]
            elif kind == "coordinator":
                victims = [group_coordinator(c, rnd.choice([STROM_GROUP, CONFLUENT_GROUP])) or rnd.choice(c.alive())]
            else:
                victims = rnd.sample(sorted(c.alive()), 2)
            steps: list[str] = []

            def restart_a_member(steps: list[str] = steps) -> None:
                if rnd.random() < 0.5:
                    restarted = rnd.choice(members[:2])
                    restarted.restart()
                    steps.append(f"{restarted.name} closed and made again")

            kill_round(c, rnd, victims, f" ({kind})", steps, restart_zookeeper=round_ == zk_round,
                       while_down=restart_a_member)
            log.extend(f"round {round_}: {step}" for step in steps)
        writer.stop()
        summary = "; ".join(log)
        assert not writer.errors, f"records failed back to the producer: {sorted(set(writer.errors))} ({summary})"
        acked = {(p, o): v for p, by_offset in writer.acked.items() for o, v in by_offset.items()}
        acked_values = {(p, v) for p, vs in writer.acked_without_offset.items() for v in vs}  # (no offset)
        assert len(acked) + len(acked_values) > 2000, \
            f"too little was acknowledged to judge anything: {len(acked) + len(acked_values)} ({summary})"
        groups = {STROM_GROUP: members[:2], CONFLUENT_GROUP: members[2:]}

        def missing(group: str) -> list[str]:
            delivered = [(p, o, v) for m in groups[group] for p, o, v in list(m.delivered)]
            seen, seen_values = {(p, o) for p, o, _ in delivered}, {(p, v) for p, _, v in delivered}
            return [f"{p}@{o}" for p, o in sorted(k for k in acked if k not in seen)] + \
                [f"{p}: value {v}" for p, v in sorted(acked_values - seen_values)]

        for group in groups:
            try:
                wait_until(lambda g=group: not missing(g), 180, f"group {group} to read every acknowledged record")
            except AssertionError as e:
                lost = missing(group)
                raise AssertionError(f"{e}: {len(lost)} never read, e.g. {lost[:3]} ... {lost[-3:]}; "
                                     f"{'; '.join(m.state() for m in groups[group])} ({summary})") from None
        for m in members:
            m.stop()
        ends = {p: max(writer.acked[p], default=-1) + 1 for p in range(PARTITIONS)}
        log_values = read_all(c.bootstrap, TOPIC, PARTITIONS, until=ends)
        at = {(p, o): v for p in range(PARTITIONS) for o, v in log_values[p]}
        absent = sorted(acked_values - {(p, v) for (p, _), v in at.items()})
        assert not absent, f"acknowledged without an offset, not in the log: {absent[:5]} ({summary})"
        for group, group_members in groups.items():
            for m in group_members:
                wrong = [(p, o, v) for p, o, v in m.delivered if at.get((p, o)) != v]
                assert not wrong, f"{m.name} was given records that are not the log's: {wrong[:5]} ({summary})"
                assert not m.gaps, f"{m.gaps[:5]} ({summary})"
            committed = committed_offsets(c, group)
            assert committed == ends, f"group {group} committed {committed}, the log ends at {ends} ({summary})"
        duplicates = {m.name: len(m.delivered) - len({(p, o) for p, o, _ in m.delivered}) for m in members}
        print(f"{len(acked) + len(acked_values)} acknowledged records ({len(acked_values)} without an offset), each "
              f"read by both groups; {summary}; "
              f"re-deliveries per member: {duplicates}; restarts: {[(m.name, m.restarts) for m in members]}; "
              f"commit errors: {[(m.name, sorted(set(m.commit_errors))) for m in members]}")
