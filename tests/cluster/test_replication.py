"""Replication on a real cluster (ZooKeeper + 3 strom brokers): ISR, min.insync.replicas, failover, truncation,
coordinator failover and rolling restarts. The judge is what clients were told: every acknowledged record is
present exactly once, in order, and every replica holds the same log up to the high watermark."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic

from strom.common.structs import TopicPartition
from strom.record.records import MemoryRecords
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.testing.cluster import LocalCluster, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


def create_topic(cluster: LocalCluster, name: str, partitions: int = 1, rf: int = 3, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, rf, config=dict(configs))], operation_timeout=30).values():
        f.result(60)


def partition_meta(cluster: LocalCluster, topic: str, partition: int = 0, nodes: tuple[int, ...] | None = None):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_of(*(nodes or tuple(cluster.alive())))})
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[partition]


def isr_is(cluster: LocalCluster, topic: str, expected: set[int], nodes: tuple[int, ...] | None = None) -> bool:
    return set(partition_meta(cluster, topic, nodes=nodes).isrs) == expected


def produce(bootstrap: str, topic: str, values: list[int], acks: str = "all", timeout_ms: int = 30000,
            ) -> tuple[list[tuple[int, int, int]], list[str]]:
    """Produce and return ([(partition, offset, value)] acknowledged, [error names])."""
    acked: list[tuple[int, int, int]] = []
    errors: list[str] = []

    def cb(err: KafkaError | None, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(err.name())
        else:
            acked.append((msg.partition(), msg.offset(), int(msg.value())))

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "message.timeout.ms": timeout_ms,
                  "enable.idempotence": acks == "all", "retries": 0 if acks != "all" else 2147483647})
    for v in values:
        p.produce(topic, str(v).encode(), partition=0, on_delivery=cb)
    p.flush(timeout_ms / 1000 + 30)
    return acked, errors


def read_all(bootstrap: str, topic: str, partitions: int = 1, until: dict[int, int] | None = None,
             ) -> dict[int, list[tuple[int, int]]]:
    """Every (offset, value) of each partition, read until the given end offsets (or the high watermark)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        ends = until or {p: _high_watermark(c, topic, p) for p in range(partitions)}
        c.assign([CTP(topic, p, 0) for p in range(partitions)])
        out: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + 60
        while any((out[p][-1][0] + 1 if out[p] else 0) < ends[p] for p in ends):
            assert time.monotonic() < deadline, f"could not read up to {ends}: got {[len(v) for v in out.values()]}"
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            out[m.partition()].append((m.offset(), int(m.value())))
        return out
    finally:
        c.close()


def _high_watermark(c: Consumer, topic: str, partition: int) -> int:
    """The partition's high watermark, asked again while the leader answers a retriable error (OFFSET_NOT_AVAILABLE
    from a leader elected a moment ago whose high watermark has not caught up yet: KIP-207)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return int(c.get_watermark_offsets(CTP(topic, partition), timeout=10)[1])
        except KafkaException as e:
            if not e.args[0].retriable() or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def replica_logs(cluster: LocalCluster, tp: TopicPartition) -> dict[int, list[tuple[int, bytes]]]:
    """Each broker's copy of ``tp`` up to its checkpointed high watermark, read from the files (cluster stopped)."""
    out = {}
    for node, b in cluster.brokers.items():
        d = Path(b.data_dir) / f"{tp.topic}-{tp.partition}"
        if not d.exists():
            continue
        lg = Log(str(d), LogConfig())
        try:
            hw = lg.high_watermark
            records, offset = [], lg.log_start_offset
            while offset < hw:
                data = lg.read(offset, 1 << 20, max_offset=hw, min_one_message=True)
                if not data.records:
                    break
                for batch in MemoryRecords(data.records).batches():
                    for r in batch.records():
                        if r.offset < hw:
                            records.append((r.offset, bytes(r.value or b"")))
                    offset = batch.next_offset
            out[node] = records
        finally:
            lg.close()
    return out


@pytest.fixture
def cluster():
    with LocalCluster(3, overrides={"min.insync.replicas": "2"}) as c:
        try:
            yield c
        finally:
            for n, b in c.brokers.items():  # shown by pytest when the test failed
                print(f"==== broker {n} log (tail)\n" + "\n".join(b.read_log().splitlines()[-60:]))


def test_min_isr_and_recovery(cluster: LocalCluster) -> None:
    """Two of three down: acks=all is refused (NOT_ENOUGH_REPLICAS), acks=1 works; back up: ISR of 3 again."""
    create_topic(cluster, "durable")
    meta = partition_meta(cluster, "durable")
    assert sorted(meta.replicas) == [1, 2, 3] and set(meta.isrs) == {1, 2, 3}
    acked, errors = produce(cluster.bootstrap, "durable", list(range(100)))
    assert len(acked) == 100 and not errors
    leader = meta.leader
    followers = [n for n in (1, 2, 3) if n != leader]
    for n in followers:
        cluster.brokers[n].kill()
    # The leader notices the dead followers after replica.lag.time.max.ms and shrinks the ISR to itself.
    wait_until(lambda: isr_is(cluster, "durable", {leader}, nodes=(leader,)), 60, "ISR shrink to the leader")
    acked, errors = produce(cluster.bootstrap_of(leader), "durable", [1000], acks="all", timeout_ms=1500)
    assert not acked and errors and set(errors) <= {"NOT_ENOUGH_REPLICAS", "_MSG_TIMED_OUT"}, errors
    assert "NOT_ENOUGH_REPLICAS" in errors or "_MSG_TIMED_OUT" in errors
    acked1, errors1 = produce(cluster.bootstrap_of(leader), "durable", list(range(100, 150)), acks="1")
    assert len(acked1) == 50 and not errors1
    for n in followers:
        cluster.brokers[n].start(timeout=60)
    wait_until(lambda: isr_is(cluster, "durable", {1, 2, 3}), 60, "ISR back to 3")
    got = read_all(cluster.bootstrap, "durable")[0]
    assert [v for _, v in got] == list(range(100)) + list(range(100, 150))
    cluster.stop()
    logs = replica_logs(cluster, TopicPartition("durable", 0))
    assert len(logs) == 3 and logs[1] == logs[2] == logs[3] and len(logs[1]) == 150


def test_leader_failover_keeps_acknowledged_records(cluster: LocalCluster) -> None:
    """kill -9 of the leader (and, later, the controller): every acknowledged record survives, once, in order."""
    create_topic(cluster, "failover")
    all_acked: list[tuple[int, int, int]] = []
    value = 0
    for round_ in range(2):
        meta = partition_meta(cluster, "failover")
        acked, errors = produce(cluster.bootstrap, "failover", list(range(value, value + 500)))
        assert not errors and len(acked) == 500
        all_acked += acked
        value += 500
        victim = meta.leader if round_ == 0 else AdminClient(
            {"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10).controller_id
        cluster.brokers[victim].kill()
        wait_until(lambda v=victim: partition_meta(cluster, "failover").leader not in (-1, v), 60, "a new leader")
        acked, errors = produce(cluster.bootstrap, "failover", list(range(value, value + 500)))
        assert not errors and len(acked) == 500
        all_acked += acked
        value += 500
        cluster.brokers[victim].start(timeout=60)
        wait_until(lambda: isr_is(cluster, "failover", {1, 2, 3}), 60, "ISR back to 3")
    got = read_all(cluster.bootstrap, "failover")[0]
    values = [v for _, v in got]
    assert values == sorted(values) and len(values) == len(set(values))
    assert {v for *_, v in all_acked} <= set(values)
    assert [(o, v) for _, o, v in sorted(all_acked)] == [(o, v) for o, v in got if v in {x for *_, x in all_acked}]
    cluster.stop()
    logs = replica_logs(cluster, TopicPartition("failover", 0))
    assert logs[1] == logs[2] == logs[3]


def leader_alone_with_records_only_it_has(cluster: LocalCluster, topic: str) -> tuple[int, list[int]]:
    """Values 0..9 on every replica of ``topic`` (replication 3, min.insync.replicas 1), then the followers killed
    and 100..119 written (acks=1) to the leader alone. Returns (leader, followers)."""
    create_topic(cluster, topic, **{"min.insync.replicas": "1"})
    acked, errors = produce(cluster.bootstrap, topic, list(range(10)))
    assert len(acked) == 10 and not errors
    leader = partition_meta(cluster, topic).leader
    followers = [n for n in (1, 2, 3) if n != leader]
    for n in followers:
        cluster.brokers[n].kill()
    wait_until(lambda: isr_is(cluster, topic, {leader}, nodes=(leader,)), 60, "ISR shrink to the old leader")
    acked, errors = produce(cluster.bootstrap_of(leader), topic, list(range(100, 120)), acks="1")
    assert len(acked) == 20 and not errors
    return leader, followers


def unclean_election_among(cluster: LocalCluster, topic: str, leader: int, followers: list[int]) -> None:
    """Kill ``leader`` and restart ``followers`` with unclean.leader.election.enable: one of them leads."""
    cluster.brokers[leader].kill()
    for n in followers:
        cluster.brokers[n].overrides["unclean.leader.election.enable"] = "true"
        cluster.brokers[n].start(timeout=60)
    wait_until(lambda: partition_meta(cluster, topic, nodes=tuple(followers)).leader in followers, 60,
               "a follower elected leader")


def test_divergent_old_leader_is_truncated(cluster: LocalCluster) -> None:
    """An old leader with records past the new leader's log drops them on return (KIP-101 / KIP-279)."""
    # Cut the followers off, let the leader take writes only it has, then kill it; the followers come back and,
    # with unclean election, one of them leads (the old leader is down).
    leader, followers = leader_alone_with_records_only_it_has(cluster, "diverge")
    unclean_election_among(cluster, "diverge", leader, followers)
    acked, errors = produce(cluster.bootstrap_of(*followers), "diverge", list(range(200, 205)), acks="1")
    assert len(acked) == 5 and not errors
    cluster.brokers[leader].start(timeout=60)
    wait_until(lambda: isr_is(cluster, "diverge", {1, 2, 3}), 90, "the old leader back in the ISR")
    got = [v for _, v in read_all(cluster.bootstrap, "diverge")[0]]
    assert got == list(range(10)) + list(range(200, 205))
    cluster.stop()
    logs = replica_logs(cluster, TopicPartition("diverge", 0))
    assert logs[1] == logs[2] == logs[3]
    assert [int(v) for _, v in logs[leader]] == list(range(10)) + list(range(200, 205))


def test_consumers_detect_the_truncation_of_an_unclean_election(cluster: LocalCluster) -> None:
    """KIP-320 on a real cluster: consumers that read records only the old leader had (its followers were down,
    min.insync.replicas=1) see the unclean election's truncation when the new leader takes over. Validating the
    position (OffsetsForLeaderEpoch) finds where the logs diverged: with a reset policy the consumer reads on
    from there (the new leader's records); with ``auto.offset.reset=none`` it gets LogTruncationError naming the
    divergent offset and its epoch. Without validation both would wait for offset 30 the new log never reaches."""
    from strom.consumer import KafkaConsumer
    from strom.consumer.errors import LogTruncationError

    leader, followers = leader_alone_with_records_only_it_has(cluster, "truncated")
    tp = TopicPartition("truncated", 0)

    def consumer(reset: str) -> KafkaConsumer:
        # The metadata these consumers get while the followers are down names the old leader only: when it
        # dies, they go back to bootstrap.servers to find the others (KIP-899).
        c = KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset=reset,
                          key_deserializer="bytes", value_deserializer="bytes",
                          metadata_recovery_strategy="rebootstrap")
        c.assign([tp])
        c.seek(tp, 0)
        return c

    resetting, strict = consumer("earliest"), consumer("none")
    try:
        for c in (resetting, strict):
            records: list[Any] = []
            deadline = time.monotonic() + 60
            while len(records) < 30:
                assert time.monotonic() < deadline, records
                records += list(c.poll(timeout_ms=500))
            assert [int(r.value) for r in records] == list(range(10)) + list(range(100, 120))
            assert c.position(tp) == 30
        # the epoch of the records every replica has (the new leader's log ends with them)
        shared_epoch = records[9].leader_epoch
        unclean_election_among(cluster, "truncated", leader, followers)
        acked, errors = produce(cluster.bootstrap_of(*followers), "truncated", list(range(200, 205)), acks="1")
        assert [(o, v) for _, o, v in acked] == [(10 + i, 200 + i) for i in range(5)] and not errors

        got = []
        deadline = time.monotonic() + 60
        while len(got) < 5:
            assert time.monotonic() < deadline, got
            got += [(r.offset, int(r.value)) for r in resetting.poll(timeout_ms=500)]
        assert got == [(10 + i, 200 + i) for i in range(5)]  # read on from the divergence point

        deadline = time.monotonic() + 60
        with pytest.raises(LogTruncationError) as info:
            while time.monotonic() < deadline:
                assert strict.poll(timeout_ms=500).count() == 0
        assert info.value.offset_out_of_range_partitions == {tp: 30}
        divergent = info.value.divergent_offsets[tp]
        assert (divergent.offset, divergent.leader_epoch) == (10, shared_epoch)
    finally:
        resetting.close()
        strict.close()


def test_group_survives_coordinator_death(cluster: LocalCluster) -> None:
    """Offsets committed to a coordinator that dies are served by its successor; nothing is lost or re-read."""
    create_topic(cluster, "orders", partitions=3)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(300):
        p.produce("orders", str(i).encode(), partition=i % 3)
    assert p.flush(30) == 0
    conf = {"bootstrap.servers": cluster.bootstrap, "group.id": "billing", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000}
    c = Consumer(conf)
    c.subscribe(["orders"])
    seen: list[int] = []
    while len(seen) < 150:
        m = c.poll(1)
        if m is not None and not m.error():
            seen.append(int(m.value()))
    c.commit(asynchronous=False)
    c.close()
    # Find the coordinator's broker and kill it.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    coordinator = admin.describe_consumer_groups(["billing"])["billing"].result(30).coordinator.id
    cluster.brokers[coordinator].kill()
    c2 = Consumer({**conf, "bootstrap.servers": cluster.bootstrap_of(*[n for n in (1, 2, 3) if n != coordinator])})
    c2.subscribe(["orders"])
    rest: list[int] = []
    deadline = time.monotonic() + 90
    while len(seen) + len(rest) < 300:
        assert time.monotonic() < deadline, f"read {len(rest)} after failover"
        m = c2.poll(1)
        if m is not None and not m.error():
            rest.append(int(m.value()))
    c2.close()
    assert sorted(seen + rest) == list(range(300))
    assert not set(seen) & set(rest)


def test_rolling_restart_gives_producer_no_error(cluster: LocalCluster) -> None:
    """SIGTERM one broker at a time (controlled shutdown moves leadership first): an acks=all producer sees no
    error and loses nothing."""
    create_topic(cluster, "rolling", partitions=3)
    acked: list[int] = []
    errors: list[str] = []

    def cb(err, msg) -> None:  # type: ignore[no-untyped-def]
        (errors.append(err.name()) if err else acked.append(int(msg.value())))

    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 120000})
    value = 0
    for node in (1, 2, 3):
        for _ in range(200):
            p.produce("rolling", str(value).encode(), on_delivery=cb)
            value += 1
        p.poll(0)
        cluster.brokers[node].stop(timeout=60)
        for _ in range(200):
            p.produce("rolling", str(value).encode(), on_delivery=cb)
            value += 1
            p.poll(0)
        cluster.brokers[node].start(timeout=60)
        wait_until(lambda: all(set(partition_meta(cluster, "rolling", q).isrs) == {1, 2, 3} for q in range(3)), 60,
                   "ISR back to 3 after the restart")
    assert p.flush(120) == 0
    assert errors == []
    got = read_all(cluster.bootstrap, "rolling", partitions=3)
    values = [v for part in got.values() for _, v in part]
    assert sorted(values) == list(range(value)) and sorted(acked) == list(range(value))


def test_zookeeper_session_loss_of_the_leader(cluster: LocalCluster) -> None:
    """SIGSTOP the leader past its ZooKeeper session (a GC pause or a partition): the controller moves leadership,
    acks=all writes continue on the successor; when the old leader wakes it has lost its session, registers
    again, follows, and drops what it alone had. Acknowledged records stay, once and in order."""
    import os
    import signal

    create_topic(cluster, "paused")
    acked, errors = produce(cluster.bootstrap, "paused", list(range(200)))
    assert len(acked) == 200 and not errors
    leader = partition_meta(cluster, "paused").leader
    others = tuple(n for n in (1, 2, 3) if n != leader)
    proc = cluster.brokers[leader].proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        wait_until(lambda: partition_meta(cluster, "paused", nodes=others).leader in others, 60,
                   "a new leader while the old one is paused")
        acked2, errors2 = produce(cluster.bootstrap_of(*others), "paused", list(range(200, 400)))
        assert len(acked2) == 200 and not errors2
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    def settled() -> bool:  # every broker, the woken one included, agrees on the new leader and a full ISR
        views = [partition_meta(cluster, "paused", nodes=(n,)) for n in (1, 2, 3)]
        return all(v.leader in others and set(v.isrs) == {1, 2, 3} for v in views) and \
            len({v.leader for v in views}) == 1

    wait_until(settled, 90, "the woken broker back in the ISR, following")
    got = [v for _, v in read_all(cluster.bootstrap, "paused")[0]]
    assert got == list(range(400))
    cluster.stop()
    logs = replica_logs(cluster, TopicPartition("paused", 0))
    assert logs[1] == logs[2] == logs[3] and len(logs[1]) == 400


def test_the_leader_recompresses_for_the_topic_and_followers_copy_its_batches(cluster: LocalCluster) -> None:
    """A topic with compression.type=zstd: the leader stores the producer's uncompressed batches as zstd and the
    followers hold the same batches, byte for byte (they copy, they do not recompress)."""
    from strom.record.compression import CompressionType

    create_topic(cluster, "zstd-rf3", **{"compression.type": "zstd"})
    acked, errors = produce(cluster.bootstrap, "zstd-rf3", list(range(2000)))
    assert not errors and len(acked) == 2000
    assert [v for _, v in read_all(cluster.bootstrap, "zstd-rf3")[0]] == list(range(2000))
    cluster.stop()
    logs = replica_logs(cluster, TopicPartition("zstd-rf3", 0))
    assert len(logs) == 3 and all(log == logs[1] for log in logs.values())
    batches = {}
    for node, b in cluster.brokers.items():
        data = b"".join(p.read_bytes() for p in sorted((Path(b.data_dir) / "zstd-rf3-0").glob("*.log")))
        # each batch from the magic on (the base offset and leader epoch are not compared)
        batches[node] = [(batch.compression_type, batch.to_bytes()[16:]) for batch in MemoryRecords(data).batches()]
    assert {codec for codec, _ in batches[1]} == {CompressionType.ZSTD}
    assert batches[1] == batches[2] == batches[3]


def _alter_broker_default(bootstrap: str, key: str, value: str) -> None:
    """The cluster-wide dynamic default (the BROKER resource named ""): written to ZooKeeper by the broker that
    takes it, applied by every broker when it sees the change notification."""
    from strom.admin import AdminClient as StromAdmin
    from strom.admin.models import AlterConfigOp, ConfigResource, ConfigResourceType

    admin = StromAdmin(bootstrap_servers=bootstrap)
    try:
        for f in admin.incremental_alter_configs(
                {ConfigResource(ConfigResourceType.BROKER, ""): [AlterConfigOp(key, value)]}).values().values():
            f.result(30)
    finally:
        admin.close()


def _broker_config(bootstrap: str, node: int, key: str) -> str | None:
    from strom.admin import AdminClient as StromAdmin
    from strom.admin.models import ConfigResource, ConfigResourceType

    admin = StromAdmin(bootstrap_servers=bootstrap)
    try:
        resource = ConfigResource(ConfigResourceType.BROKER, str(node))
        entries = admin.describe_configs([resource]).values()[resource].result(30)
        return next(e.value for e in entries.entries if e.name == key)
    finally:
        admin.close()


def leaderless_after_the_leader_dies(cluster: LocalCluster, topic: str) -> list[int]:
    """``topic``'s followers back up without the records only its leader had, the leader dead, no unclean
    election allowed: the partition has no leader. Returns the followers."""
    leader, followers = leader_alone_with_records_only_it_has(cluster, topic)
    cluster.brokers[leader].kill()
    for n in followers:
        cluster.brokers[n].start(timeout=60)
    # back, registered, and told the partition has no leader: nothing in its ISR is alive
    wait_until(lambda: partition_meta(cluster, topic, nodes=tuple(followers)).leader == -1, 60,
               "the partition offline")
    return followers


def assert_elected_uncleanly(cluster: LocalCluster, topic: str, followers: list[int]) -> None:
    wait_until(lambda: partition_meta(cluster, topic, nodes=tuple(followers)).leader in followers, 60,
               "a follower elected leader")
    got = [v for _, v in read_all(cluster.bootstrap_of(*followers), topic)[0]]
    assert got == list(range(10))  # what only the old leader had is gone: the price of an unclean election


def test_a_dynamic_cluster_default_reaches_every_broker_and_enables_unclean_election(cluster: LocalCluster) -> None:
    """A cluster default set at runtime (AlterConfigs on the BROKER resource "", no restart) reaches the running
    brokers through the change notification and a broker that was down (kill -9) when it restarts; with
    ``unclean.leader.election.enable`` the controller then elects a leader for a partition whose only in-sync
    replica is gone, as Kafka's controller does when the default is enabled."""
    cluster.brokers[3].kill()  # down while the default changes: it reads the default from ZooKeeper at start
    _alter_broker_default(cluster.bootstrap_of(1, 2), "log.retention.ms", "7200000")
    for n in (1, 2):
        wait_until(lambda n=n: _broker_config(cluster.bootstrap_of(n), n, "log.retention.ms") == "7200000", 30,
                   f"broker {n} takes the new default")
    cluster.brokers[3].start(timeout=60)
    wait_until(lambda: _broker_config(cluster.bootstrap_of(3), 3, "log.retention.ms") == "7200000", 30,
               "broker 3, restarted, to have the default")
    followers = leaderless_after_the_leader_dies(cluster, "late-unclean")
    _alter_broker_default(cluster.bootstrap_of(*followers), "unclean.leader.election.enable", "true")
    assert_elected_uncleanly(cluster, "late-unclean", followers)


def test_a_topic_override_enables_unclean_election_of_its_leaderless_partition(cluster: LocalCluster) -> None:
    """The topic's own ``unclean.leader.election.enable`` (the brokers' is false): set while the partition has
    no live in-sync replica, the controller elects an out-of-sync one (Kafka's ``enableTopicUncleanLeaderElection``)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    followers = leaderless_after_the_leader_dies(cluster, "topic-unclean")
    entry = ConfigEntry("unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_of(*followers)})
    for f in admin.incremental_alter_configs(
            [ConfigResource(ResourceType.TOPIC, "topic-unclean", incremental_configs=[entry])]).values():
        f.result(30)
    assert_elected_uncleanly(cluster, "topic-unclean", followers)
