"""strom consumer groups on a real strom broker: exactly-once with manual commits across three members, and
a killed member's partitions moving after the session timeout with no loss."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from strom.broker_process import BrokerProcess
from strom.common.structs import TopicPartition
from strom.consumer import KafkaConsumer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def fast_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("consumer-group") / "data",
                      overrides={"group.initial.rebalance.delay.ms": "0"})
    b.start()
    yield b
    b.stop()
    b.cleanup()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # keep a reference until the futures complete
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)


def produce(bootstrap: str, topic: str, partitions: int, start: int, n: int) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, value=b"%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


def member(bootstrap: str, group: str, name: str, **extra) -> KafkaConsumer:
    return KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group}, key_deserializer="bytes",
                         value_deserializer="bytes", auto_offset_reset="earliest", enable_auto_commit=False,
                         client_id=name, session_timeout_ms=6000, heartbeat_interval_ms=500, **extra)


class Member(threading.Thread):
    """Polls, records what it saw and commits synchronously after every non-empty poll."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, **extra) -> None:
        super().__init__(name=name, daemon=True)
        self.consumer = member(bootstrap, group, name, **extra)
        self.consumer.subscribe([topic])
        self.seen: list[tuple[int, int, bytes]] = []
        self.assignment: set[TopicPartition] = set()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                records = self.consumer.poll(0.2)
                self.seen.extend((r.partition, r.offset, r.value) for r in records)
                if records:
                    self.consumer.commit_sync()
                self.assignment = self.consumer.assignment()
        except BaseException as exc:  # surfaced by the test
            self.error = exc
        finally:
            self.consumer.close()


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_three_members_consume_every_record_exactly_once(fast_broker: BrokerProcess, strategy: str) -> None:
    topic, n = f"group-exactly-once-{strategy}", 3000
    create_topic(fast_broker.bootstrap, topic, 6)
    produce(fast_broker.bootstrap, topic, 6, 0, n // 2)
    members = [Member(fast_broker.bootstrap, f"g-eo-{strategy}", topic, f"m{i}",
                      partition_assignment_strategy=[strategy]) for i in range(3)]
    for m in members:
        m.start()
    wait_for(lambda: all(len(m.assignment) == 2 for m in members), 30, "three members with 2 partitions each")
    produce(fast_broker.bootstrap, topic, 6, n // 2, n - n // 2)
    wait_for(lambda: sum(len(m.seen) for m in members) >= n, 30, "every record")
    # One end marker per partition: a partition is read in offset order, so a duplicate (a re-read from an
    # older position) reaches its member before that partition's marker does.
    produce(fast_broker.bootstrap, topic, 6, n, 6)
    wait_for(lambda: {int(v) for m in members for _, _, v in m.seen} >= set(range(n, n + 6)), 30, "the end markers")
    for m in members:
        m.stop.set()
    for m in members:
        m.join(15)
        assert m.error is None, m.error
    seen = [(p, o) for m in members for p, o, _ in m.seen]
    assert len(seen) == n + 6 and len(set(seen)) == n + 6
    values = sorted(int(v) for m in members for _, _, v in m.seen)
    assert values == list(range(n + 6))
    assert {tp.partition for m in members for tp in m.assignment} == set(range(6))


VICTIM = r"""
import json, sys
from strom.consumer import KafkaConsumer
bootstrap, group, topic = sys.argv[1:4]
c = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group}, key_deserializer="bytes",
                  value_deserializer="bytes", auto_offset_reset="earliest", enable_auto_commit=False,
                  client_id="victim", session_timeout_ms=6000, heartbeat_interval_ms=500)
c.subscribe([topic])
assigned = None
while True:
    records = c.poll(0.2)
    if records:
        c.commit_sync()
        print(json.dumps({"committed": {str(tp.partition): off for tp, off in records.next_offsets().items()},
                          "count": len(records)}), flush=True)
    if c.assignment() != assigned:
        assigned = c.assignment()
        print(json.dumps({"assigned": sorted(tp.partition for tp in assigned)}), flush=True)
"""


def test_killed_member_partitions_move_after_session_timeout(fast_broker: BrokerProcess) -> None:
    topic, first, second = "group-kill", 1200, 1200
    create_topic(fast_broker.bootstrap, topic, 6)
    produce(fast_broker.bootstrap, topic, 6, 0, first)
    survivors = [Member(fast_broker.bootstrap, "g-kill", topic, f"s{i}") for i in range(2)]
    victim = subprocess.Popen([sys.executable, "-c", VICTIM, fast_broker.bootstrap, "g-kill", topic],
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    state = {"assigned": [], "committed": {}, "count": 0}

    def read_victim() -> None:
        assert victim.stdout is not None
        for line in victim.stdout:
            msg = json.loads(line)
            if "assigned" in msg:
                state["assigned"] = msg["assigned"]
            else:
                state["committed"].update({int(p): o for p, o in msg["committed"].items()})
                state["count"] += msg["count"]

    threading.Thread(target=read_victim, daemon=True).start()
    try:
        for s in survivors:
            s.start()
        wait_for(lambda: len(state["assigned"]) == 2 and all(len(s.assignment) == 2 for s in survivors), 40,
                 "the group to settle with the victim")
        # The victim prints its committed offsets only after commit_sync returns: they are final now.
        wait_for(lambda: state["count"] + sum(len(s.seen) for s in survivors) >= first, 30, "the first records")
        victim_partitions = set(state["assigned"])
        committed = {p: state["committed"].get(p, 0) for p in victim_partitions}
        victim.send_signal(signal.SIGKILL)  # no LeaveGroup
        victim.wait(10)
        killed_at = time.monotonic()
        produce(fast_broker.bootstrap, topic, 6, first, second)
        wait_for(lambda: {tp.partition for s in survivors for tp in s.assignment} == set(range(6)), 40,
                 "the survivors to take over the victim's partitions")
        moved_after = time.monotonic() - killed_at
        assert moved_after >= 3.0, f"partitions moved after {moved_after:.1f}s, before the session timeout"
        total = first + second
        wait_for(lambda: state["count"] + sum(len(s.seen) for s in survivors) >= total, 30, "every record")
    finally:
        victim.kill()
        for s in survivors:
            s.stop.set()
        for s in survivors:
            s.join(15)
    for s in survivors:
        assert s.error is None, s.error
    taken_over = [(p, o) for s in survivors for p, o, _ in s.seen if p in victim_partitions]
    for p in victim_partitions:  # consumption resumed exactly at the victim's committed offset
        offsets = sorted(o for q, o in taken_over if q == p)
        assert offsets and offsets[0] == committed[p], (p, offsets[:3], committed[p])
    values = {int(v) for s in survivors for _, _, v in s.seen}
    victim_values = {i for i in range(first) if i % 6 in victim_partitions}
    assert values | victim_values == set(range(total))


def test_pattern_subscription_picks_up_new_topics(fast_broker: BrokerProcess) -> None:
    create_topic(fast_broker.bootstrap, "pattern-a", 2)
    produce(fast_broker.bootstrap, "pattern-a", 2, 0, 10)
    import re

    c = member(fast_broker.bootstrap, "g-pattern", "p", metadata_max_age_ms=500)
    try:
        c.subscribe(re.compile(r"pattern-.*"))
        seen: set[tuple[str, int]] = set()
        deadline = time.monotonic() + 30
        while len(seen) < 10 and time.monotonic() < deadline:
            seen |= {(r.topic, int(r.value)) for r in c.poll(0.2)}
        assert c.subscription() == {"pattern-a"} and len(seen) == 10
        create_topic(fast_broker.bootstrap, "pattern-b", 1)
        produce(fast_broker.bootstrap, "pattern-b", 1, 100, 5)
        create_topic(fast_broker.bootstrap, "other-c", 1)
        deadline = time.monotonic() + 30
        while len(seen) < 15 and time.monotonic() < deadline:
            seen |= {(r.topic, int(r.value)) for r in c.poll(0.2)}
        assert {t for t, _ in seen} == {"pattern-a", "pattern-b"} and len(seen) == 15
        assert c.subscription() == {"pattern-a", "pattern-b"}
        assert {tp.topic for tp in c.assignment()} == {"pattern-a", "pattern-b"}
    finally:
        c.close()
