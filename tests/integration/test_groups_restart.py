"""Committed offsets and group metadata survive a broker restart (replay of ``__consumer_offsets``)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strom.broker_process import BrokerProcess

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

OVERRIDES = {"group.initial.rebalance.delay.ms": "100", "group.min.session.timeout.ms": "1000",
             "offsets.topic.num.partitions": "3"}
CONSUMER = {"auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300}


@pytest.fixture
def restart_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path / "data", overrides=OVERRIDES)
    b.start()
    yield b
    b.stop()
    b.cleanup()


def wait_until(cond: Callable[[], bool], timeout: float, step: Callable[[], None], what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        step()


def produce(bootstrap: str, topic: str, tag: str, n: int) -> set[bytes]:
    p = ck.Producer({"bootstrap.servers": bootstrap})
    values = [f"{tag}-{i}".encode() for i in range(n)]
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % 3)
    assert p.flush(20) == 0
    return set(values)


def consume_into(c: ck.Consumer, sink: list[bytes]) -> None:
    msgs = [m for m in c.consume(500, 0.1) if m.error() is None]
    if msgs:
        sink.extend(m.value() for m in msgs)
        c.commit(asynchronous=False)


def test_committed_offsets_survive_restart(restart_broker: BrokerProcess) -> None:
    b = restart_broker
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("rs", 3, 1)])["rs"].result(10)
    sent = produce(b.bootstrap, "rs", "a", 90)
    c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "rs-group", **CONSUMER})
    c.subscribe(["rs"])
    got: list[bytes] = []
    wait_until(lambda: len(got) >= 90, 30, lambda: consume_into(c, got), "first records")
    c.close()
    # A standalone (assign()) consumer's commit, generation -1, in another group.
    solo = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "rs-solo", **CONSUMER})
    solo.commit(offsets=[ck.TopicPartition("rs", 1, 7)], asynchronous=False)
    solo.close()
    admin.delete_consumer_groups(["rs-solo"], request_timeout=10)["rs-solo"].result()
    solo2 = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "rs-solo2", **CONSUMER})
    solo2.commit(offsets=[ck.TopicPartition("rs", 2, 11, metadata="meta")], asynchronous=False)
    solo2.close()
    del admin

    b.restart()

    sent2 = produce(b.bootstrap, "rs", "b", 30)
    c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "rs-group", **CONSUMER})
    committed = c.committed([ck.TopicPartition("rs", p) for p in range(3)], timeout=10)
    assert [tp.offset for tp in committed] == [30, 30, 30]
    c.subscribe(["rs"])
    got2: list[bytes] = []
    wait_until(lambda: len(got2) >= 30, 30, lambda: consume_into(c, got2), "records after restart")
    c.close()
    assert Counter(got) == Counter(sent) and Counter(got2) == Counter(sent2)  # resumed, nothing twice
    probe = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "rs-solo2", **CONSUMER})
    [tp] = probe.committed([ck.TopicPartition("rs", 2)], timeout=10)
    assert (tp.offset, tp.metadata) == (11, "meta")
    probe.close()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    groups = {g.group_id for g in admin.list_consumer_groups(request_timeout=10).result().valid}
    assert {"rs-group", "rs-solo2"} <= groups and "rs-solo" not in groups  # the deletion was replayed too


def test_member_carries_on_across_restart(restart_broker: BrokerProcess) -> None:
    b = restart_broker
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("live", 3, 1)])["live"].result(10)
    del admin
    c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "live-group", **CONSUMER})
    c.subscribe(["live"])
    try:
        wait_until(lambda: len(c.assignment()) == 3, 30, lambda: consume_into(c, []), "assignment")
        sent = produce(b.bootstrap, "live", "x", 60)
        got: list[bytes] = []
        wait_until(lambda: len(got) >= 60, 30, lambda: consume_into(c, got), "records before restart")
        b.restart()
        sent2 = produce(b.bootstrap, "live", "y", 60)
        wait_until(lambda: len(got) >= 120, 60, lambda: consume_into(c, got), "records after restart")
        assert Counter(got) == Counter(sent | sent2)
    finally:
        c.close()
