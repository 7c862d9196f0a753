"""confluent-kafka (librdkafka) transactions against a strom broker subprocess: commit, abort, fencing of a zombie,
consume-transform-produce with send_offsets_to_transaction; read_committed vs read_uncommitted consumers; a
kill -9 inside an open transaction."""

from __future__ import annotations

import time
import uuid

import pytest

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]


def _create(bootstrap: str, *topics: tuple[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, num_partitions=n, replication_factor=1) for t, n in topics]).values():
        f.result(30)


def _producer(bootstrap: str, tid: str, **extra: object) -> ck.Producer:
    conf = {"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5}
    conf.update(extra)
    return ck.Producer(conf)


def _read_all(bootstrap: str, topic: str, isolation: str, expect: int | None = None, *,
              settle_s: float = 1.5, timeout_s: float = 30) -> list[bytes]:
    """Every value of ``topic`` from the beginning, as a consumer at ``isolation`` sees it; stops when ``expect``
    values arrived (or, without it, when nothing new came for ``settle_s``)."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": isolation})
    c.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    last_new = time.monotonic()
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m.value())
                last_new = time.monotonic()
            if expect is not None and len(out) >= expect:
                break
            if expect is None and out and time.monotonic() - last_new > settle_s:
                break
    finally:
        c.close()
    return out


def _end_offsets(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[int]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{uuid.uuid4()}",
                     "isolation.level": isolation})
    try:
        return [c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        c.close()


def test_commit_and_abort_visibility(broker) -> None:  # type: ignore[no-untyped-def]
    _create(broker.bootstrap, ("txn-ck", 3))
    p = _producer(broker.bootstrap, "ck-tx-1")
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(30):
        p.produce("txn-ck", value=b"c1-%03d" % i, partition=i % 3)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(30):
        p.produce("txn-ck", value=b"a-%03d" % i, partition=i % 3)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(30):
        p.produce("txn-ck", value=b"c2-%03d" % i, partition=i % 3)
    p.commit_transaction(30)

    committed = _read_all(broker.bootstrap, "txn-ck", "read_committed", expect=60)
    assert sorted(committed) == sorted([b"c1-%03d" % i for i in range(30)] + [b"c2-%03d" % i for i in range(30)])
    # Within each partition the committed records keep their order.
    for part in range(3):
        mine = [v for v in committed if int(v[-3:]) % 3 == part]
        assert mine == sorted(mine, key=lambda v: (v[:2] != b"c1", v))
    uncommitted = _read_all(broker.bootstrap, "txn-ck", "read_uncommitted", expect=90)
    assert len(uncommitted) == 90 and sum(v.startswith(b"a-") for v in uncommitted) == 30


def test_open_transaction_holds_back_read_committed(broker) -> None:  # type: ignore[no-untyped-def]
    _create(broker.bootstrap, ("txn-lso", 1))
    p = _producer(broker.bootstrap, "ck-tx-lso")
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(5):
        p.produce("txn-lso", value=b"open-%d" % i, partition=0)
    p.flush(30)
    # The records are written (the high watermark passed them) but not stable (the LSO stays before them).
    assert _end_offsets(broker.bootstrap, "txn-lso", 1, "read_uncommitted") == [5]
    assert _end_offsets(broker.bootstrap, "txn-lso", 1, "read_committed") == [0]
    p.commit_transaction(30)
    assert _end_offsets(broker.bootstrap, "txn-lso", 1, "read_committed") == [6]  # 5 records + the marker
    assert _read_all(broker.bootstrap, "txn-lso", "read_committed", expect=5) == [b"open-%d" % i for i in range(5)]


def test_zombie_producer_is_fenced(broker) -> None:  # type: ignore[no-untyped-def]
    _create(broker.bootstrap, ("txn-fence", 1))
    zombie = _producer(broker.bootstrap, "ck-tx-fence")
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce("txn-fence", value=b"zombie", partition=0)
    zombie.flush(30)
    successor = _producer(broker.bootstrap, "ck-tx-fence")
    successor.init_transactions(30)  # aborts the zombie's open transaction and fences it
    successor.begin_transaction()
    successor.produce("txn-fence", value=b"successor", partition=0)
    successor.commit_transaction(30)
    with pytest.raises(ck.KafkaException) as ei:
        zombie.produce("txn-fence", value=b"zombie-2", partition=0)
        zombie.commit_transaction(30)
    err = ei.value.args[0]
    assert err.fatal() or err.code() in (ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED,
                                         ck.KafkaError.INVALID_PRODUCER_EPOCH)
    assert _read_all(broker.bootstrap, "txn-fence", "read_committed") == [b"successor"]


def test_consume_transform_produce_exactly_once(broker) -> None:  # type: ignore[no-untyped-def]
    _create(broker.bootstrap, ("eos-in", 2), ("eos-out", 2))
    src = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(200):
        src.produce("eos-in", value=b"%d" % i, partition=i % 2)
    src.flush(30)

    def run(batches_to_abort: set[int], stop_after: int | None) -> int:
        consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "eos-group",
                                "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                "isolation.level": "read_committed"})
        consumer.subscribe(["eos-in"])
        producer = _producer(broker.bootstrap, "ck-eos")
        producer.init_transactions(30)
        done = 0
        batch_no = 0
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline:
                msgs = consumer.consume(50, 1.0)
                msgs = [m for m in msgs if m.error() is None]
                if not msgs:
                    if done and stop_after is None:
                        break
                    continue
                producer.begin_transaction()
                for m in msgs:
                    producer.produce("eos-out", value=b"x" + m.value(), partition=m.partition())
                producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                     consumer.consumer_group_metadata(), 30)
                if batch_no in batches_to_abort:
                    producer.abort_transaction(30)
                    # Rewind to the committed offsets: the aborted batch is processed again.
                    committed = consumer.committed(consumer.assignment(), 10)
                    for tp in committed:
                        consumer.seek(ck.TopicPartition(tp.topic, tp.partition,
                                                        tp.offset if tp.offset >= 0 else ck.OFFSET_BEGINNING))
                else:
                    producer.commit_transaction(30)
                    done += len(msgs)
                batch_no += 1
                if stop_after is not None and batch_no >= stop_after:
                    break
        finally:
            consumer.close()
        return done

    first = run({1}, stop_after=3)
    second = run(set(), stop_after=None)
    assert first + second == 200
    out = _read_all(broker.bootstrap, "eos-out", "read_committed", expect=200)
    assert sorted(out) == sorted(b"x%d" % i for i in range(200))


def test_kill_minus_9_inside_a_transaction(fresh_broker) -> None:  # type: ignore[no-untyped-def]
    b = fresh_broker
    b.overrides.update({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    b.start()
    _create(b.bootstrap, ("txn-crash", 1))
    p = _producer(b.bootstrap, "ck-crash", **{"transaction.timeout.ms": 3000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("txn-crash", value=b"committed", partition=0)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(10):
        p.produce("txn-crash", value=b"left-open-%d" % i, partition=0)
    p.flush(30)
    b.kill()
    b.start()
    # The open transaction outlives its timeout after the restart: the coordinator aborts it, the LSO moves on.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if _end_offsets(b.bootstrap, "txn-crash", 1, "read_committed") == [13]:
            break
        time.sleep(0.2)
    assert _end_offsets(b.bootstrap, "txn-crash", 1, "read_committed") == [13]
    q = _producer(b.bootstrap, "ck-crash-2")
    q.init_transactions(30)
    q.begin_transaction()
    q.produce("txn-crash", value=b"after", partition=0)
    q.commit_transaction(30)
    assert _read_all(b.bootstrap, "txn-crash", "read_committed", expect=2) == [b"committed", b"after"]
    assert len(_read_all(b.bootstrap, "txn-crash", "read_uncommitted", expect=12)) == 12


def test_compaction_of_a_transactional_topic(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A compacted topic written by transactions, cleaned by the broker's cleaner thread: an aborted write never
    counts as a key's latest value (the committed one survives for both isolation levels) and is removed; a
    superseded committed value is removed; what read_committed sees is the latest committed value per key."""
    from strom.broker_process import BrokerProcess

    b = BrokerProcess(data_dir=tmp_path / "data", overrides={"log.cleaner.backoff.ms": "100"})
    b.start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("txn-compacted", 1, 1, config={
            "cleanup.policy": "compact", "segment.ms": "200", "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "100"})])["txn-compacted"].result(30)
        p = _producer(b.bootstrap, "compactor")
        p.init_transactions(30)
        for values, commit in (([(b"k1", b"v1"), (b"k2", b"v1")], True), ([(b"k1", b"aborted")], False),
                               ([(b"k2", b"v2")], True)):
            p.begin_transaction()
            for k, v in values:
                p.produce("txn-compacted", v, k, partition=0)
            assert p.flush(30) == 0  # written before the abort (librdkafka drops what it has not sent yet)
            p.commit_transaction(30) if commit else p.abort_transaction(30)
        plain = ck.Producer({"bootstrap.servers": b.bootstrap})
        # Writes later than segment.ms roll the segment, so the transactional data becomes cleanable. (The
        # cleaner may already have been at work: nothing is asserted of the log before it.)
        deadline = time.monotonic() + 60
        while True:
            time.sleep(0.3)
            plain.produce("txn-compacted", b"filler", b"k9", partition=0)
            plain.flush(10)
            seen = _read_all(b.bootstrap, "txn-compacted", "read_uncommitted", settle_s=0.5)
            if b"aborted" not in seen and seen.count(b"v1") == 1:
                break
            assert time.monotonic() < deadline, f"not cleaned: {seen}"
        committed = _read_all(b.bootstrap, "txn-compacted", "read_committed", settle_s=0.5)
        assert committed[:2] == [b"v1", b"v2"] and set(committed[2:]) <= {b"filler"}
        p.flush(10)
    finally:
        b.stop()
        b.cleanup()
