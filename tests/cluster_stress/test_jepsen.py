"""Failover under load, Jepsen-style (``make test-cluster``): producers write sequence-numbered records to a
topic with replication 3 and min.insync.replicas=2 while brokers are kill -9'd and restarted in turn (leaders, the
controller, sometimes two at once) and ZooKeeper is stopped and restarted once.

The judge is what the producers were told: every acknowledged record is present exactly once, each producer's
records are in send order within a partition, and all replicas hold identical logs up to the high watermark.
Writers: confluent-kafka (librdkafka, idempotent, acks=all) and strom's own KafkaProducer (idempotent, acks=all).
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time

import pytest
from confluent_kafka import Producer

from strom import KafkaProducer, ProducerRecord
from strom.common.structs import TopicPartition
from strom.testing.cluster import LocalCluster, wait_until
from tests.cluster.test_replication import create_topic, partition_meta, read_all, replica_logs
from tests.cluster_stress.rounds import kill_round, replicas_agree

pytestmark = [pytest.mark.cluster, pytest.mark.stress, pytest.mark.timeout(1500)]

ROUNDS = int(os.environ.get("STROM_JEPSEN_ROUNDS", "10"))
PARTITIONS = 3
TOPIC = "jepsen"


class Writer:
    """One producer thread: values ``prefix * 10**9 + i``, i counting up; remembers what was acknowledged."""

    def __init__(self, name: str, prefix: int, send, flush) -> None:  # type: ignore[no-untyped-def]
        self.name = name
        self.prefix = prefix
        self._send = send
        self._flush = flush
        self.acked: dict[int, list[tuple[int, int]]] = {}  # partition -> [(offset, value)]
        # partition -> [value]: acknowledged with no offset. librdkafka's idempotent producer reports the records of a
        # request whose answer it never got (a broker killed mid-request) as delivered, offset unknown, once a later
        # request to that partition succeeds: their sequence numbers prove them written ("implicit acks").
        self.acked_without_offset: dict[int, list[int]] = {}
        self.errors: list[str] = []
        self.send_errors: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name=f"writer-{name}", daemon=True)

    def on_ack(self, partition: int, offset: int | None, value: int) -> None:
        with self._lock:
            if offset is None:
                self.acked_without_offset.setdefault(partition, []).append(value)
            else:
                self.acked.setdefault(partition, []).append((offset, value))

    def on_error(self, name: str) -> None:
        with self._lock:
            self.errors.append(name)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            value = self.prefix * 10**9 + i
            try:
                self._send(value, i % PARTITIONS)
                i += 1
            except BufferError:
                time.sleep(0.05)
            except Exception as e:  # refused at once (e.g. librdkafka's local UNKNOWN_TOPIC while its metadata
                # lags a restart): nothing was sent, so the same value is tried again; the writer never dies
                with self._lock:
                    self.send_errors.append(f"{type(e).__name__}: {e}")
                time.sleep(0.1)
            if i % 50 == 0:
                time.sleep(0.005)
        self.sent = i
        self._flush()

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(300)
        assert not self.thread.is_alive(), f"writer {self.name} did not finish"


def confluent_writer(bootstrap: str) -> Writer:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 300000})
    w: Writer

    def cb(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            w.on_error(err.name())
        else:
            w.on_ack(msg.partition(), msg.offset(), int(msg.value()))

    def send(value: int, partition: int) -> None:
        p.produce(TOPIC, str(value).encode(), partition=partition, on_delivery=cb)
        p.poll(0)

    def flush() -> None:
        assert p.flush(300) == 0

    w = Writer("confluent", 1, send, flush)
    return w


def strom_writer(bootstrap: str) -> Writer:
    p = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                       "delivery.timeout.ms": 300000, "request.timeout.ms": 10000,
                       "key.serializer": "str", "value.serializer": "str"})
    w: Writer

    def send(value: int, partition: int) -> None:
        def cb(md, exc) -> None:  # type: ignore[no-untyped-def]
            if exc is not None:
                w.on_error(type(exc).__name__)
            else:
                w.on_ack(md.partition, md.offset, value)

        p.send(ProducerRecord(TOPIC, str(value), partition=partition), callback=cb)

    def flush() -> None:
        p.flush()
        p.close()

    w = Writer("strom", 2, send, flush)
    return w


class _ClientErrors(logging.Handler):
    """ERROR records of strom's clients in this process (e.g. "Uncaught error in request completion" from the
    network client running the producer's callbacks), printed with the summary: a writer whose records expire
    after delivery.timeout.ms leaves its cause here."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += f" {type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
        self.lines.append(text)


def test_acknowledged_writes_survive_kills_and_zookeeper_restart() -> None:
    rnd = random.Random(int(os.environ.get("STROM_JEPSEN_SEED", "20261123")))
    client_errors = _ClientErrors()
    strom_logger = logging.getLogger("strom")  # the sender, and the network client running its callbacks
    strom_logger.addHandler(client_errors)
    try:
        _run(rnd, client_errors)
    finally:
        strom_logger.removeHandler(client_errors)


def _run(rnd: random.Random, client_errors: _ClientErrors) -> None:
    with LocalCluster(3, overrides={"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}) as c:
        create_topic(c, TOPIC, partitions=PARTITIONS)
        writers = [confluent_writer(c.bootstrap), strom_writer(c.bootstrap)]
        for w in writers:
            w.start()
        log: list[str] = []
        zk_round = rnd.randrange(1, ROUNDS)
        for round_ in range(ROUNDS):
            time.sleep(1.0)
            admin_md = partition_meta(c, TOPIC, rnd.randrange(PARTITIONS))
            kind = rnd.choice(["leader", "controller", "two", "leader"])
            if kind == "leader":
                victims = [admin_md.leader]
            elif kind == "controller":
                from confluent_kafka.admin import AdminClient

                victims = [AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(timeout=10).controller_id]
            else:
                victims = rnd.sample(sorted(c.alive()), 2)
            steps: list[str] = []
            kill_round(c, rnd, victims, f" ({kind})", steps, restart_zookeeper=round_ == zk_round)
            log.extend(f"round {round_}: {step}" for step in steps)
        for w in writers:
            w.stop()
        # Everyone back in sync before the final read.
        wait_until(lambda: all(set(partition_meta(c, TOPIC, p).isrs) == {1, 2, 3} for p in range(PARTITIONS)), 180,
                   "ISR of 3 on every partition")
        replicas_agree(c, TOPIC, PARTITIONS, "; ".join(log))
        ends = {p: max((o for w in writers for o, _ in w.acked.get(p, [])), default=-1) + 1
                for p in range(PARTITIONS)}
        got = read_all(c.bootstrap, TOPIC, PARTITIONS, until=ends)
        summary = "; ".join(log)
        total_acked = 0
        for p in range(PARTITIONS):
            values = [v for _, v in got[p]]
            assert len(values) == len(set(values)), f"partition {p} has duplicates ({summary})"
            position = {v: i for i, v in enumerate(values)}
            for w in writers:
                acked = sorted(w.acked.get(p, []))
                without_offset = w.acked_without_offset.get(p, [])
                total_acked += len(acked) + len(without_offset)
                missing = [v for v in (*(v for _, v in acked), *without_offset) if v not in position]
                assert not missing, f"{w.name}: {len(missing)} acknowledged record(s) lost in partition {p}, " \
                                    f"e.g. {missing[:5]} ({summary})"
                # Acknowledged offsets are where the records are, and one writer's records keep their order.
                assert all(got[p][position[v]][0] == o for o, v in acked), f"{w.name}: offsets moved ({summary})"
                mine = [v for v in values if v // 10**9 == w.prefix]
                assert mine == sorted(mine), f"{w.name}: out of order in partition {p} ({summary})"
        assert total_acked > 1000, f"too little was acknowledged to judge anything: {total_acked} ({summary})"
        for w in writers:  # both clients wrote through the whole run, not just one of them
            assert sum(len(a) for a in w.acked.values()) > 200, f"{w.name} acknowledged little: {w.send_errors[:5]}"
        # Idempotent, acks=all, a delivery timeout longer than the run, never more than two of three brokers down:
        # every record is delivered in the end, none is failed back to the application. (A broker that answered
        # UNKNOWN_TOPIC_OR_PARTITION before its first UpdateMetadata once made librdkafka fail 89,430 records.)
        failed = [(w.name, len(w.errors), sorted(set(w.errors))) for w in writers if w.errors]
        assert not failed, f"records failed back to the producers: {failed} ({summary})"
        c.stop()
        for p in range(PARTITIONS):
            logs = replica_logs(c, TopicPartition(TOPIC, p))
            assert len(logs) == 3
            shortest = min(len(v) for v in logs.values())
            assert logs[1][:shortest] == logs[2][:shortest] == logs[3][:shortest], f"replicas of {p} diverge"
        no_offset = sum(len(vs) for w in writers for vs in w.acked_without_offset.values())
        print(f"{total_acked} acknowledged records checked ({no_offset} acknowledged without an offset); {summary}; "
              f"errors: {[(w.name, len(w.errors), sorted(set(w.errors))) for w in writers]}; "
              f"refused sends: {[(w.name, len(w.send_errors)) for w in writers]}; "
              f"client errors logged: {client_errors.lines[:10]}")
