"""strom consumer offsets on a real strom broker: committed offsets survive a broker restart,
``auto.offset.reset`` on out-of-range and missing offsets, offset lookups, seeks, pause/resume, interceptors
and deserializers."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from strom.broker_process import BrokerProcess
from strom.common.error_codes import OffsetOutOfRangeError
from strom.common.structs import OffsetAndMetadata, TopicPartition
from strom.consumer import KafkaConsumer, NoOffsetForPartitionError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

confluent_kafka = pytest.importorskip("confluent_kafka")
T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def topic_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("consumer-offsets") / "data",
                      overrides={"group.initial.rebalance.delay.ms": "0"})
    b.start()
    create_topic(b.bootstrap, "offsets", 2)
    produce(b.bootstrap, "offsets", 2, 100)
    yield b
    b.stop()
    b.cleanup()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)


def produce(bootstrap: str, topic: str, partitions: int, n: int) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"%d" % i, partition=i % partitions, timestamp=T0 + i,
                  headers=[("h", b"%d" % i)])
    assert p.flush(30) == 0


def consumer(bootstrap: str, **configs) -> KafkaConsumer:
    configs.setdefault("key_deserializer", "string")
    configs.setdefault("value_deserializer", "bytes")
    return KafkaConsumer({"bootstrap.servers": bootstrap}, **configs)


def poll_until(c: KafkaConsumer, n: int, timeout: float = 20.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out.extend(c.poll(0.2))
    return out


TP0, TP1 = TopicPartition("offsets", 0), TopicPartition("offsets", 1)


def test_committed_offsets_survive_broker_restart(tmp_path) -> None:
    with BrokerProcess(data_dir=tmp_path / "data", overrides={"group.initial.rebalance.delay.ms": "0"}) as b:
        create_topic(b.bootstrap, "restart", 1)
        produce(b.bootstrap, "restart", 1, 50)
        tp = TopicPartition("restart", 0)
        with consumer(b.bootstrap, group_id="g-restart", auto_offset_reset="earliest",
                      enable_auto_commit=False) as c:
            c.subscribe(["restart"])
            records = poll_until(c, 50)
            assert len(records) == 50
            c.commit_sync({tp: OffsetAndMetadata(30, "half way")})
        b.restart()
        with consumer(b.bootstrap, group_id="g-restart", auto_offset_reset="earliest",
                      enable_auto_commit=False) as c:
            assert c.committed(tp, timeout=20) == OffsetAndMetadata(30, "half way", c.committed(tp).leader_epoch)
            c.subscribe(["restart"])
            records = poll_until(c, 20)
            assert [r.offset for r in records] == list(range(30, 50))


def test_auto_offset_reset_policies_on_out_of_range(topic_broker: BrokerProcess) -> None:
    bs = topic_broker.bootstrap
    with consumer(bs, auto_offset_reset="earliest") as c:
        c.assign([TP0])
        c.seek(TP0, 10_000)
        assert [r.offset for r in poll_until(c, 50)] == list(range(50))
    with consumer(bs, auto_offset_reset="latest") as c:
        c.assign([TP0])
        c.seek(TP0, 10_000)
        deadline = time.monotonic() + 20
        while c.position(TP0) != 50 and time.monotonic() < deadline:
            assert not c.poll(0.1)
        assert c.position(TP0) == 50
    with consumer(bs, auto_offset_reset="none") as c:
        c.assign([TP0])
        c.seek(TP0, 10_000)
        with pytest.raises(OffsetOutOfRangeError) as info:
            poll_until(c, 1)
        assert info.value.offset_out_of_range_partitions == {TP0: 10_000}


def test_no_committed_offset_with_reset_none(topic_broker: BrokerProcess) -> None:
    with consumer(topic_broker.bootstrap, group_id="g-none", auto_offset_reset="none") as c:
        c.assign([TP1])
        with pytest.raises(NoOffsetForPartitionError):
            poll_until(c, 1)
    with consumer(topic_broker.bootstrap, group_id="g-latest", auto_offset_reset="latest") as c:
        c.assign([TP1])
        assert c.position(TP1, timeout=20) == 50


def test_record_fields_deserializers_and_lookups(topic_broker: BrokerProcess) -> None:
    seen_by_interceptor: list[int] = []

    class Counting:
        def on_consume(self, records):
            seen_by_interceptor.append(records.count())
            return records

        def on_commit(self, offsets):
            pass

        def close(self):
            pass

    with consumer(topic_broker.bootstrap, group_id="g-fields", auto_offset_reset="earliest",
                  interceptor_classes=[Counting()], value_deserializer=lambda b: int(b)) as c:
        c.assign([TP0])
        records = poll_until(c, 50)
        r = records[3]
        assert (r.topic, r.partition, r.offset, r.key, r.value) == ("offsets", 0, 3, "k6", 6)
        assert r.timestamp == T0 + 6 and r.timestamp_type == 0 and r.headers == (("h", b"6"),)
        assert r.serialized_key_size == 2 and r.serialized_value_size == 1
        assert sum(seen_by_interceptor) == 50
        assert c.beginning_offsets([TP0, TP1], timeout=20) == {TP0: 0, TP1: 0}
        assert c.end_offsets([TP0, TP1], timeout=20) == {TP0: 50, TP1: 50}
        found = c.offsets_for_times({TP0: T0 + 20, TP1: T0 + 10_000}, timeout=20)
        assert found[TP0].offset == 10 and found[TP1] is None
        c.seek_to_beginning([TP0])
        assert c.position(TP0) == 0
        c.seek_to_end([TP0])
        assert c.position(TP0) == 50
        c.commit_sync({TP0: 7})
        assert c.committed({TP0}, timeout=20)[TP0].offset == 7
        assert [p.partition for p in c.partitions_for("offsets")] == [0, 1]
        assert "offsets" in c.list_topics(timeout=20)
        assert c.current_lag(TP0) == 0


def test_pause_and_resume(topic_broker: BrokerProcess) -> None:
    with consumer(topic_broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TP0, TP1])
        c.pause([TP1])
        records = poll_until(c, 50)
        assert {r.partition for r in records} == {0}
        assert not c.poll(0.3)
        c.resume([TP1])
        assert {r.partition for r in poll_until(c, 50)} == {1}
