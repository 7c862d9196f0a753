"""Static membership (``group.instance.id``): a static member that restarts within the session timeout gets
its partitions back without a rebalance of the other members, and sends no LeaveGroup on close."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from strom.broker_process import BrokerProcess
from strom.common.structs import TopicPartition
from strom.consumer import KafkaConsumer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

ck = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def static_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("consumer-static") / "data",
                      overrides={"group.initial.rebalance.delay.ms": "0"})
    b.start()
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic("static", 4, 1)]).values():
        f.result(30)
    yield b
    b.stop()
    b.cleanup()


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, frozenset[int]]] = []

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        self.events.append(("assigned", frozenset(tp.partition for tp in partitions)))

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        self.events.append(("revoked", frozenset(tp.partition for tp in partitions)))


def member(bootstrap: str, instance: str | None, listener: Recorder) -> KafkaConsumer:
    c = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": "g-static"}, key_deserializer="bytes",
                      value_deserializer="bytes", group_instance_id=instance, session_timeout_ms=10_000,
                      heartbeat_interval_ms=500, partition_assignment_strategy=["range"])
    c.subscribe(["static"], listener)
    return c


def poll_both(consumers: list[KafkaConsumer], condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        for c in consumers:
            c.poll(0.05)


def test_static_member_rejoins_without_rebalance(static_broker: BrokerProcess) -> None:
    bs = static_broker.bootstrap
    ra, rb = Recorder(), Recorder()
    a = member(bs, "instance-a", ra)
    b = member(bs, None, rb)
    try:
        poll_both([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, 30, "a 2/2 split")
        before = a.assignment()
        generation = b._coordinator.generation.generation_id
        rb.events.clear()
        a.close()  # static: no LeaveGroup, the group keeps the member until its session times out
        a = member(bs, "instance-a", ra)
        poll_both([a, b], lambda: a.assignment() == before, 20, "the static member to get its partitions back")
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            for c in (a, b):
                c.poll(0.05)
        assert not [e for e in rb.events if e[0] == "revoked"], rb.events  # b never gave anything up
        assert b._coordinator.generation.generation_id == generation
    finally:
        a.close()
        b.close()
