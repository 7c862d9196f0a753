"""strom's own clients and tools across leadership moves on a real 3-broker cluster (brokers killed with kill -9).

The judge is what the clients were told: every record the producer had acknowledged (acks=all, idempotent,
min.insync.replicas=2) is read back exactly once and in order per partition by a consumer group that kept
consuming while the leader died; the admin client keeps working when the controller dies; the tools report the
under-replicated and unavailable partitions and the preferred leader election puts the first replica back.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from strom.testing.cluster import LocalCluster, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

CLI = [sys.executable, "-m", "strom.cli.main"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """Brokers die here: a cluster of this module's own."""
    with LocalCluster(3) as c:
        yield c


@pytest.fixture(autouse=True)
def revive(cluster: LocalCluster) -> Iterator[None]:
    """A test that fails half-way must not leave the next one a cluster of one: restart whoever died."""
    yield
    dead = [n for n in cluster.brokers if n not in cluster.alive()]
    for n in dead:
        cluster.brokers[n].start(timeout=60)
    if dead:
        cluster.wait_for_metadata()


def strom(*args: str) -> str:
    out = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, f"strom {' '.join(args)}: {out.stderr}"
    return out.stdout


def partitions(cluster: LocalCluster, topic: str, *flags: str) -> list[dict[str, Any]]:
    found = []
    for m in re.finditer(r"^\tTopic: (\S+)\tPartition: (\d+)\tLeader: (\d+|none)\tReplicas: ([\d,]*)\tIsr: ([\d,]*)$",
                         strom("topics", "--bootstrap-server", cluster.bootstrap_of(*cluster.alive()), "--describe",
                               "--topic", topic, *flags), re.M):
        found.append({"partition": int(m[2]), "leader": None if m[3] == "none" else int(m[3]),
                      "replicas": [int(x) for x in m[4].split(",") if x], "isr": [int(x) for x in m[5].split(",") if x]})
    return found


def in_sync(cluster: LocalCluster, topic: str, count: int) -> bool:
    parts = partitions(cluster, topic)
    return len(parts) == count and all(sorted(p["isr"]) == [1, 2, 3] for p in parts)


def test_producer_and_consumer_group_ride_through_a_leader_kill(cluster: LocalCluster) -> None:
    from strom import AdminClient, KafkaConsumer, KafkaProducer
    from strom.admin import NewTopic

    topic = "seq"
    with AdminClient({"bootstrap.servers": cluster.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 3, 3, None, {"min.insync.replicas": "2"})]).all().result(30)
    wait_until(lambda: in_sync(cluster, topic, 3), 30, "an ISR of 3 everywhere")

    acked: dict[int, list[int]] = {0: [], 1: [], 2: []}
    errors: list[BaseException] = []
    lock = threading.Lock()
    stop = threading.Event()
    sent = [0]

    def on_ack(seq: int) -> Any:
        def callback(metadata: Any, exc: BaseException | None) -> None:
            with lock:
                if exc is not None:
                    errors.append(exc)
                else:
                    acked[metadata.partition].append(seq)
        return callback

    producer = KafkaProducer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                              "key.serializer": "bytes", "value.serializer": "bytes",
                              "linger.ms": 5, "max.in.flight.requests.per.connection": 5})

    def produce() -> None:
        seq = 0
        while not stop.is_set():
            producer.send(topic, value=str(seq).encode(), partition=seq % 3, callback=on_ack(seq))
            seq += 1
            sent[0] = seq
            if seq % 50 == 0:
                producer.flush(60)
        producer.flush(120)

    consumed: dict[int, list[int]] = {0: [], 1: [], 2: []}
    consumer = KafkaConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": "riders",
                              "auto.offset.reset": "earliest", "enable.auto.commit": False},
                             key_deserializer="bytes", value_deserializer="bytes")
    consumer.subscribe([topic])

    def consume_some() -> None:
        for r in consumer.poll(0.2):
            consumed[r.partition].append(int(r.value))
        consumer.commit_sync()

    writer = threading.Thread(target=produce, name="seq-writer")
    writer.start()
    try:
        wait_until(lambda: (consume_some(), sum(map(len, consumed.values())) >= 300)[1], 60,
                   "300 records written and read before the kill", interval_s=0)
        victim = next(p["leader"] for p in partitions(cluster, topic) if p["partition"] == 0)
        cluster.brokers[victim].kill()  # kill -9
        # The controller moves leadership off the dead broker; the tools show the shrunken ISR.
        wait_until(lambda: all(p["leader"] != victim and victim not in p["isr"]
                               for p in partitions(cluster, topic)), 30, "leaders and ISRs without the dead broker")
        under = partitions(cluster, topic, "--under-replicated-partitions")
        assert {p["partition"] for p in under} == {0, 1, 2}
        assert partitions(cluster, topic, "--unavailable-partitions") == []
        before = sent[0]
        wait_until(lambda: (consume_some(), sent[0] > before + 300)[1], 60,
                   "300 more records written after the kill", interval_s=0)
        cluster.brokers[victim].start(timeout=60)
        wait_until(lambda: in_sync(cluster, topic, 3), 60, "the ISR back to 3 after the restart")
    finally:
        stop.set()
        writer.join(180)
        producer.close(30)
    assert errors == []
    assert strom("topics", "--bootstrap-server", cluster.bootstrap, "--describe", "--topic", topic,
                 "--under-replicated-partitions") == ""

    total = sum(map(len, acked.values()))
    wait_until(lambda: (consume_some(), sum(map(len, consumed.values())) >= total)[1], 60,
               f"the group to read all {total} acknowledged records", interval_s=0)
    consumer.close()
    for p in range(3):
        assert consumed[p] == sorted(acked[p]), f"partition {p}: read != acknowledged (order, loss or duplicates)"

    # Leadership of partition 0 went away from its preferred replica; the tool brings it back.
    preferred = {p["partition"]: p["replicas"][0] for p in partitions(cluster, topic)}
    moved = sorted(p["partition"] for p in partitions(cluster, topic) if p["leader"] != preferred[p["partition"]])
    assert 0 in moved
    out = strom("leader-election", "--bootstrap-server", cluster.bootstrap, "--election-type", "preferred",
                "--all-topic-partitions")
    assert "Successfully completed leader election (PREFERRED) for partitions " in out
    assert all(f"{topic}-{p}" in out.splitlines()[0] for p in moved), out
    wait_until(lambda: all(p["leader"] == preferred[p["partition"]] for p in partitions(cluster, topic)), 30,
               "every leader back on its preferred replica")


def test_admin_client_survives_the_controller_kill_and_unavailable_partitions_are_reported(
        cluster: LocalCluster) -> None:
    from strom import AdminClient
    from strom.admin import NewTopic
    from strom.common.structs import TopicPartition

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    try:
        controller = admin.describe_cluster().controller().result(30).node_id
        # a single-replica topic on a broker that is not the controller: it becomes unavailable when that broker dies
        lonely = next(n for n in cluster.alive() if n != controller)
        admin.create_topics([NewTopic("lonely", 1, None, {0: [lonely]})]).all().result(30)
        cluster.brokers[controller].kill()
        cluster.brokers[lonely].kill()
        (survivor,) = cluster.alive()
        # Until the dead brokers' ZooKeeper sessions expire the survivor still counts them, and a new topic could
        # be placed on one of them (its leader never elected, the create would time out): wait until it is alone.
        cluster.wait_for_metadata([survivor])
        # The long-lived admin client finds the new controller (the survivor) and creates topics through it.
        admin.create_topics([NewTopic("after-kill", 1, 1)]).all().result(60)
        assert admin.describe_cluster().controller().result(30).node_id == survivor
        wait_until(lambda: partitions(cluster, "lonely", "--unavailable-partitions") == [
            {"partition": 0, "leader": None, "replicas": [lonely], "isr": [lonely]}], 30,
            "lonely-0 reported unavailable")
        results = admin.elect_leaders("unclean", [TopicPartition("lonely", 0)]).partitions().result(30)
        assert type(results[TopicPartition("lonely", 0)]).__name__ == "EligibleLeadersNotAvailableError"
        cluster.brokers[lonely].start(timeout=60)
        cluster.brokers[controller].start(timeout=60)
        wait_until(lambda: partitions(cluster, "lonely", "--unavailable-partitions") == [], 60,
                   "lonely-0 led again")
    finally:
        admin.close(10)


def test_two_of_three_down_refuses_acks_all_but_not_acks_1_and_the_isr_comes_back(cluster: LocalCluster) -> None:
    from strom import AdminClient, KafkaProducer
    from strom.admin import NewTopic
    from strom.common.error_codes import NotEnoughReplicasError

    topic = "durable"
    with AdminClient({"bootstrap.servers": cluster.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 1, 3, None, {"min.insync.replicas": "2"})]).all().result(30)
    wait_until(lambda: in_sync(cluster, topic, 1), 30, "an ISR of 3")
    (p0,) = partitions(cluster, topic)
    followers = [r for r in p0["replicas"] if r != p0["leader"]]
    for node in followers:
        cluster.brokers[node].kill()
    wait_until(lambda: partitions(cluster, topic)[0]["isr"] == [p0["leader"]], 30, "the ISR shrunk to the leader")
    common = {"bootstrap.servers": cluster.bootstrap_of(p0["leader"]), "key.serializer": "bytes",
              "value.serializer": "bytes", "enable.idempotence": False, "retries": 0}
    strict = KafkaProducer({**common, "acks": "all"})
    loose = KafkaProducer({**common, "acks": "1"})
    try:
        with pytest.raises(NotEnoughReplicasError):
            strict.send(topic, b"must not be acknowledged").get(30)
        assert loose.send(topic, b"acks=1 still works").get(30).offset >= 0
        assert [p["partition"] for p in partitions(cluster, topic, "--under-min-isr-partitions")] == [0]
    finally:
        strict.close(10)
        loose.close(10)
    for node in followers:
        cluster.brokers[node].start(timeout=60)
    wait_until(lambda: in_sync(cluster, topic, 1), 60, "the ISR back to 3 after the restarts")
    # One broker showed the ISR of 3; the others learn it from the controller's UpdateMetadata a moment later.
    wait_until(lambda: strom("topics", "--bootstrap-server", cluster.bootstrap, "--describe", "--topic", topic,
                             "--under-replicated-partitions") == "", 30, "no broker reporting it under-replicated")


def test_rolling_restart_with_sigterm_gives_an_acks_all_producer_no_error(cluster: LocalCluster) -> None:
    from strom import AdminClient, KafkaConsumer, KafkaProducer
    from strom.admin import NewTopic
    from strom.common.structs import TopicPartition

    topic = "rolling"
    with AdminClient({"bootstrap.servers": cluster.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 2, 3, None, {"min.insync.replicas": "2"})]).all().result(30)
    wait_until(lambda: in_sync(cluster, topic, 2), 30, "an ISR of 3")
    acked: dict[int, list[int]] = {0: [], 1: []}
    errors: list[BaseException] = []
    stop = threading.Event()
    producer = KafkaProducer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                              "key.serializer": "bytes", "value.serializer": "bytes", "linger.ms": 5})

    def produce() -> None:
        seq = 0
        while not stop.is_set():
            def done(md: Any, exc: BaseException | None, seq: int = seq) -> None:
                if exc is not None:
                    errors.append(exc)
                else:
                    acked[md.partition].append(seq)
            producer.send(topic, value=str(seq).encode(), partition=seq % 2, callback=done)
            seq += 1
            if seq % 20 == 0:
                producer.flush(120)

    writer = threading.Thread(target=produce, name="rolling-writer")
    writer.start()
    try:
        for node in sorted(cluster.brokers):  # one broker at a time: SIGTERM (controlled shutdown), restart
            before = sum(map(len, acked.values()))
            assert cluster.brokers[node].stop(timeout=60) == 0
            cluster.brokers[node].start(timeout=60)
            wait_until(lambda: in_sync(cluster, topic, 2), 60, f"the ISR back to 3 after restarting {node}")
            wait_until(lambda: sum(map(len, acked.values())) > before + 100, 60,  # noqa: B023
                       f"writes acknowledged after restarting {node}")
    finally:
        stop.set()
        writer.join(180)
        producer.close(30)
    assert errors == []
    consumer = KafkaConsumer({"bootstrap.servers": cluster.bootstrap, "auto.offset.reset": "earliest"},
                             key_deserializer="bytes", value_deserializer="bytes")
    consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    consumed: dict[int, list[int]] = {0: [], 1: []}
    total = sum(map(len, acked.values()))

    def read_all() -> bool:
        for r in consumer.poll(0.2):
            consumed[r.partition].append(int(r.value))
        return sum(map(len, consumed.values())) >= total

    try:
        wait_until(read_all, 60, f"all {total} acknowledged records read back", interval_s=0)
    finally:
        consumer.close()
    for p in (0, 1):
        assert consumed[p] == sorted(acked[p]), f"partition {p}: read != acknowledged"



def test_a_topic_this_broker_has_no_metadata_for_yet_is_leader_not_available(cluster: LocalCluster) -> None:
    """A topic in ZooKeeper that a broker's metadata does not show yet (a broker just restarted, before the
    controller's UpdateMetadata; here the controller is paused) is LEADER_NOT_AVAILABLE to a Metadata request that
    allows auto-creation, as Kafka's AutoTopicCreationManager answers, not UNKNOWN_TOPIC_OR_PARTITION: librdkafka
    takes that for a deleted topic, sets its partition count to 0 and fails every record queued for it (the
    cluster stress run saw 89,430 such failures in 25 rounds of broker restarts)."""
    import os
    import signal

    from strom.common.error_codes import ErrorCode
    from strom.protocol.api_keys import ApiKey
    from strom.protocol.messages.create_topics import CreateTopicsRequest
    from strom.protocol.messages.metadata import MetadataRequest
    from strom.testing.raw_client import RawClient

    def metadata(node: int, topic: str, allow_auto: bool) -> Any:
        with RawClient(cluster.bootstrap_of(node), timeout=10) as c:
            return c.request(ApiKey.METADATA, 12, MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=allow_auto))

    controller = metadata(next(iter(cluster.alive())), "unused", False).controller_id
    creator, asked = (n for n in cluster.alive() if n != controller)
    paused = cluster.brokers[controller].proc
    assert paused is not None
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        with RawClient(cluster.bootstrap_of(creator), timeout=10) as c:  # written to ZooKeeper, never elected
            c.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(timeout_ms=1, topics=[
                CreateTopicsRequest.CreatableTopic(name="unseen", num_partitions=2, replication_factor=3)]))
        seen = metadata(asked, "unseen", True)
        assert seen.controller_id == controller  # (still paused: its ZooKeeper session has not expired)
        assert [(t.name, t.error_code, t.partitions) for t in seen.topics] == [
            ("unseen", ErrorCode.LEADER_NOT_AVAILABLE, [])]
        # without auto-creation: UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers
        assert metadata(asked, "unseen", False).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    wait_until(lambda: [len(p.replica_nodes) for p in metadata(asked, "unseen", True).topics[0].partitions] == [3, 3],
               30, "the controller to elect leaders for the topic")


def test_a_restarted_broker_answers_metadata_once_it_knows_the_cluster(cluster: LocalCluster) -> None:
    """A broker listens a second or so before the controller's first UpdateMetadata reaches it. A Metadata request
    in that window waits for it: it is not told that the cluster's topics do not exist (UNKNOWN_TOPIC_OR_PARTITION
    to a consumer, which does not allow auto-creation, or to `strom topics --describe`)."""
    from strom.common.error_codes import ErrorCode
    from strom.protocol.api_keys import ApiKey
    from strom.protocol.messages.metadata import MetadataRequest
    from strom.testing.raw_client import RawClient

    strom("topics", "--bootstrap-server", cluster.bootstrap, "--create", "--topic", "seen-after-restart",
          "--partitions", "3", "--replication-factor", "3")
    wait_until(lambda: in_sync(cluster, "seen-after-restart", 3), 60, "the topic's replicas in sync")
    restarted = cluster.brokers[max(cluster.alive())]
    restarted.kill()
    restarted.launch()
    answers: list[tuple[int, list[tuple[str, int]]]] = []  # (brokers listed, (topic, error)) per answer
    while not answers or answers[-1][0] < 3:
        try:
            with RawClient(restarted.bootstrap, timeout=30) as c:
                md = c.request(ApiKey.METADATA, 12, MetadataRequest(
                    topics=[MetadataRequest.MetadataRequestTopic(name="seen-after-restart")],
                    allow_auto_topic_creation=False))
        except OSError:  # not listening yet
            assert restarted.proc is not None and restarted.proc.poll() is None, restarted.read_log()[-2000:]
            time.sleep(0.01)
            continue
        answers.append((len(md.brokers), [(t.name, t.error_code) for t in md.topics]))
    restarted.wait_ready(60)
    assert all(topics == [("seen-after-restart", ErrorCode.NONE)] for _, topics in answers), \
        f"answers before the broker had the cluster's metadata: {answers[:3]} ({len(answers)} answers)"
