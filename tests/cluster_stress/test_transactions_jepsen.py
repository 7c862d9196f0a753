"""Transactions under failover, Jepsen-style (``make test-cluster``): a confluent-kafka (librdkafka) transactional
producer commits and aborts transactions of 1-12 records over three partitions in a loop while brokers, one or two
at a time, are kill -9'd and restarted; ``__transaction_state`` and the topic have replication 3 and
min.insync.replicas=2.

The judge is what the producer was told and what a read_committed consumer reads afterwards: every committed
transaction is there whole and once, no aborted one is visible, a transaction whose outcome the producer never
learned (an error during it) is there whole or not at all, and each partition holds the values in the order they
were sent.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CTP

from strom.testing.cluster import LocalCluster, wait_until
from tests.cluster.test_replication import create_topic, partition_meta

pytestmark = [pytest.mark.cluster, pytest.mark.stress, pytest.mark.timeout(900)]

ROUNDS = int(os.environ.get("STROM_JEPSEN_ROUNDS", "10"))
PARTITIONS = 3
TOPIC = "txn-jepsen"
PER_TXN = 1000  # value = transaction number * PER_TXN + index in the transaction


class TransactionalWriter:
    """One thread: transaction n holds values ``n * PER_TXN + i``; 30 % are aborted on purpose, once their records
    are written. ``outcome[n]`` is
    what the producer was told: committed, aborted, or unknown (an error in the middle: then the transaction is
    aborted, or the producer made again when the error is fatal, which fences the old one)."""

    def __init__(self, bootstrap: str, rnd: random.Random) -> None:
        self.bootstrap = bootstrap
        self.rnd = rnd
        self.outcome: dict[int, str] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="transactional-writer", daemon=True)

    def _producer(self) -> Producer:
        while True:
            p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "jepsen-txn", "acks": "all",
                          "linger.ms": 2, "message.timeout.ms": 60000, "transaction.timeout.ms": 60000})
            try:
                p.init_transactions(30)
                return p
            except KafkaException as e:
                self.errors.append(f"init_transactions: {e.args[0].name()}")
                time.sleep(0.5)

    def _run(self) -> None:
        p = self._producer()
        txn = 0
        while not self._stop.is_set():
            txn += 1
            try:
                p.begin_transaction()
                for i in range(self.rnd.randint(1, 12)):
                    p.produce(TOPIC, str(txn * PER_TXN + i).encode(), partition=i % PARTITIONS)
                    p.poll(0)
                if self.rnd.random() < 0.3:
                    p.flush(60)  # in the log before the abort (an abort purges what is still queued)
                    p.abort_transaction(60)
                    self.outcome[txn] = "aborted"
                else:
                    p.commit_transaction(60)
                    self.outcome[txn] = "committed"
            except KafkaException as e:
                err = e.args[0]
                self.errors.append(f"{err.name()} (fatal={err.fatal()}, abortable={err.txn_requires_abort()})")
                self.outcome[txn] = "unknown"
                if err.fatal():
                    p = self._producer()
                    continue
                try:
                    p.abort_transaction(60)
                except KafkaException as e2:
                    self.errors.append(f"abort after an error: {e2.args[0].name()}")
                    p = self._producer()
        p.flush(30)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(300)
        assert not self.thread.is_alive(), "the transactional writer did not finish"


def read_committed(bootstrap: str) -> list[tuple[int, int]]:
    """(partition, value) of everything a read_committed consumer sees, until 10 s pass without a record."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"txn-reader-{time.monotonic_ns()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        c.assign([CTP(TOPIC, p, 0) for p in range(PARTITIONS)])
        out: list[tuple[int, int]] = []
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < 10:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            out.append((m.partition(), int(m.value())))
            quiet_since = time.monotonic()
        return out
    finally:
        c.close()


def test_transactions_stay_atomic_through_broker_kills() -> None:
    rnd = random.Random(int(os.environ.get("STROM_JEPSEN_SEED", "20261123")))
    overrides = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false",
                 "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
                 "transaction.state.log.num.partitions": "3"}
    with LocalCluster(3, overrides=overrides) as c:
        create_topic(c, TOPIC, partitions=PARTITIONS)
        writer = TransactionalWriter(c.bootstrap, random.Random(rnd.random()))
        writer.start()
        log: list[str] = []
        for round_ in range(ROUNDS):
            time.sleep(1.5)
            victims = rnd.sample(sorted(c.alive()), rnd.choice([1, 1, 2]))
            log.append(f"round {round_}: kill -9 {victims}")
            for v in victims:
                c.brokers[v].kill()
            time.sleep(rnd.uniform(0.5, 2.0))
            for v in victims:
                c.brokers[v].start(timeout=120)
            c.wait_for_metadata(timeout_s=120)
        time.sleep(2)
        writer.stop()
        wait_until(lambda: all(set(partition_meta(c, TOPIC, p).isrs) == {1, 2, 3} for p in range(PARTITIONS)), 180,
                   "ISR of 3 on every partition")
        got = read_committed(c.bootstrap)
    summary = "; ".join(log)
    outcome = writer.outcome
    counts = Counter(outcome.values())
    assert counts["committed"] > 50 and counts["aborted"] > 10, f"too little to judge: {counts}, {writer.errors[:5]}"
    values = [v for _, v in got]
    assert len(values) == len(set(values)), f"{len(values) - len(set(values))} duplicate(s) ({summary})"
    seen: dict[int, set[int]] = {}
    for v in values:
        seen.setdefault(v // PER_TXN, set()).add(v % PER_TXN)
    for txn, told in outcome.items():
        present = seen.get(txn, set())
        if told == "aborted":
            assert not present, f"aborted transaction {txn} is visible: {sorted(present)} ({summary})"
        elif told == "committed":
            assert present, f"committed transaction {txn} is missing ({summary})"
        if present:  # whole: indexes 0..k-1, never a part of a transaction
            assert present == set(range(max(present) + 1)), \
                f"transaction {txn} ({told}) is visible in part: {sorted(present)} ({summary})"
    assert set(seen) <= set(outcome), f"values of transactions never begun: {sorted(set(seen) - set(outcome))}"
    for p in range(PARTITIONS):
        in_partition = [v for q, v in got if q == p]
        assert in_partition == sorted(in_partition), f"partition {p} is out of order ({summary})"
    print(f"{len(outcome)} transactions ({dict(counts)}), {len(values)} committed records read; {summary}; "
          f"producer errors: {Counter(writer.errors).most_common(6)}")
