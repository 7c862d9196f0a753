"""The clients' bulk paths against a strom broker subprocess: ``KafkaProducer.send_many`` (ordering,
partitioning, idempotent retries through a connection-killing proxy, transactions) and
``KafkaConsumer.poll_arrow`` (the same records, positions, commits, seek, pause/resume and read_committed
filtering as ``poll``)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from strom.broker_process import BrokerProcess, free_port
from strom.common.error_codes import MessageTooLargeError
from strom.common.structs import TopicPartition
from strom.consumer import KafkaConsumer
from strom.metrics import metric_values
from strom.producer import KafkaProducer
from strom.producer.partitioner import key_partition

from .producer_support import ChaosProxy, create_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("bulk") / "data",
                      overrides={"group.initial.rebalance.delay.ms": "0", "transaction.max.timeout.ms": "120000"})
    b.start()
    yield b
    b.stop()
    b.cleanup()


def producer(bootstrap: str, **configs: Any) -> KafkaProducer:
    return KafkaProducer({"bootstrap.servers": bootstrap, "key.serializer": "bytes", "value.serializer": "bytes",
                          "linger.ms": 5, **configs})


def consumer(bootstrap: str, **configs: Any) -> KafkaConsumer:
    return KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": None, "auto.offset.reset": "earliest",
                          "enable.auto.commit": False, "key.deserializer": "bytes", "value.deserializer": "bytes",
                          **configs})


def read_all(bootstrap: str, topic: str, partitions: int, n: int, timeout: float = 30.0,
             **configs: Any) -> dict[int, list[Any]]:
    """Every record of ``topic`` through ``poll()``, by partition, in order."""
    out: dict[int, list[Any]] = defaultdict(list)
    with consumer(bootstrap, **configs) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        got = 0
        while got < n and time.monotonic() < deadline:
            for r in c.poll(0.2):
                out[r.partition].append(r)
                got += 1
        for r in c.poll(0.3):  # nothing more
            out[r.partition].append(r)
    return out


def read_arrow(c: KafkaConsumer, n: int, timeout: float = 30.0, **kwargs: Any) -> pa.Table:
    tables = []
    got = 0
    deadline = time.monotonic() + timeout
    while got < n and time.monotonic() < deadline:
        t = c.poll_arrow(0.2, **kwargs)
        if t.num_rows:
            tables.append(t)
            got += t.num_rows
    return pa.concat_tables(tables) if tables else c.poll_arrow(0)


# ------------------------------------------------------------------------------------------ send_many


def test_send_many_order_partitions_and_futures(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    create_topics(b, {"bulk-order": 3})
    with producer(b, **{"batch.size": 4096}) as p:
        first = p.send("bulk-order", b"before", partition=1).get(30)
        values = [b"v-%05d" % i for i in range(3000)]
        futures = p.send_many("bulk-order", values, partition=1)
        keys = [b"key-%d" % (i % 17) for i in range(1000)]
        keyed = p.send_many("bulk-order", [b"k-%04d" % i for i in range(1000)], keys)
        free = p.send_many("bulk-order", [b"f-%04d" % i for i in range(2000)])  # sticky, spread over batches
        p.flush()
        assert len(futures) >= 3000 * 11 // 4096  # one future per batch segment, batches of ~4 KiB
        last = futures[-1].get(10)
        assert (last.partition, last.offset) == (1, first.offset + 3000)
        assert all(f.exception(10) is None for f in keyed + free)
    by_partition = read_all(b, "bulk-order", 3, 6001)
    assert sum(map(len, by_partition.values())) == 6001
    p1 = [r.value for r in by_partition[1] if r.value == b"before" or r.value.startswith(b"v-")]
    assert p1 == [b"before", *values]  # in order, after the record sent before the call
    for part, records in by_partition.items():
        ks = [r for r in records if r.value.startswith(b"k-")]
        assert all(key_partition(r.key, 3) == part for r in ks)  # murmur2, as send() places keyed records
        assert [r.value for r in ks] == sorted(r.value for r in ks)  # per-partition order kept
        fs = [r.value for r in records if r.value.startswith(b"f-")]
        assert fs == sorted(fs)
    assert len({p for p, rs in by_partition.items() if any(r.value.startswith(b"f-") for r in rs)}) > 1


@pytest.mark.parametrize("keyed", [False, True])
def test_send_many_larger_than_buffer_memory_wakes_the_sender(broker: BrokerProcess, keyed: bool) -> None:
    """A call holding many times ``buffer.memory`` blocks for memory between batches: the sender must have been
    woken for each full batch (with ``linger.ms`` far above ``max.block.ms`` nothing else would send them, and
    the call failed with a buffer-allocation timeout after sending nothing)."""
    b = broker.bootstrap
    topic = f"bulk-memory-{keyed}"
    create_topics(b, {topic: 2})
    n = 6000  # 6,000 x ~1 KiB: 12x buffer.memory
    values = [b"%06d" % i + bytes(1000) for i in range(n)]
    keys = [b"k%d" % (i % 10) for i in range(n)] if keyed else None
    with producer(b, **{"batch.size": 65536, "buffer.memory": 524288, "linger.ms": 600_000,
                        "max.block.ms": 20_000}) as p:
        futures = p.send_many(topic, values, keys, partition=None if keyed else 1)
        p.flush()
        assert all(f.exception(10) is None for f in futures)
    records = read_all(b, topic, 2, n)
    got = [r.value[:6] for part in sorted(records) for r in records[part]]
    assert sorted(got) == [b"%06d" % i for i in range(n)]
    for part in records:  # per partition in the order sent
        assert [r.value for r in records[part]] == sorted(r.value for r in records[part])


def test_send_many_inputs_and_errors(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    create_topics(b, {"bulk-inputs": 1})
    calls: list[tuple[Any, Any]] = []
    with producer(b, **{"max.request.size": 10_000}) as p:
        table = pa.table({"key": pa.array(["a", None, "c"]), "value": pa.array([b"1", None, b"3"])})
        p.send_many("bulk-inputs", table, partition=0)
        p.send_many("bulk-inputs", pa.chunked_array([["x", "y"], ["z"]]), partition=0)
        futures = p.send_many("bulk-inputs", [b"ok", b"z" * 20_000], partition=0,
                              callback=lambda m, e: calls.append((m, e)))
        assert len(futures) == 1 and isinstance(futures[0].exception(5), MessageTooLargeError)
        assert calls and isinstance(calls[0][1], MessageTooLargeError)  # nothing of that call was sent
        with pytest.raises(ValueError, match="keys"):
            p.send_many("bulk-inputs", [b"a"], [b"k1", b"k2"])
        p.flush()
    with KafkaProducer({"bootstrap.servers": b, "key.serializer": "string", "value.serializer": "string"}) as p:
        p.send_many("bulk-inputs", ["s1", "s2"], ["k", "k"], partition=0)
        p.flush()
    records = read_all(b, "bulk-inputs", 1, 7)[0]
    assert [(r.key, r.value) for r in records] == [
        (b"a", b"1"), (None, None), (b"c", b"3"), (None, b"x"), (None, b"y"), (None, b"z"), (b"k", b"s1"),
        (b"k", b"s2")][:len(records)]
    assert len(records) == 8


def test_send_many_with_interceptors_goes_record_by_record(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    create_topics(b, {"bulk-icpt": 1})
    seen: list[bytes] = []

    class Tag:
        def on_send(self, record: Any) -> Any:
            seen.append(record.value)
            return record

        def on_acknowledgement(self, metadata: Any, exception: Any) -> None:
            pass

        def close(self) -> None:
            pass

    with producer(b, **{"interceptor.classes": [Tag()]}) as p:
        futures = p.send_many("bulk-icpt", [b"1", b"2", b"3"])
        assert [f.get(10).offset for f in futures] == [0, 1, 2]
    assert seen == [b"1", b"2", b"3"]


def test_send_many_idempotent_through_killed_connections(tmp_path: Any) -> None:
    """Connections die right after requests were forwarded; the idempotent producer retries bulk batches with
    the same sequence numbers and the broker drops the duplicates: every record once, in order."""
    proxy_port = free_port()
    broker = BrokerProcess(data_dir=tmp_path / "data",
                           overrides={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}"})
    broker.start()
    proxy = None
    try:
        proxy = ChaosProxy(("127.0.0.1", broker.port), kill_every_bytes=48 * 1024, max_kills=0, port=proxy_port)
        bootstrap = f"127.0.0.1:{proxy_port}"
        create_topics(bootstrap, {"bulk-chaos": 3})
        with producer(bootstrap, **{"batch.size": 4096, "retry.backoff.ms": 20, "reconnect.backoff.ms": 10,
                                    "reconnect.backoff.max.ms": 100, "request.timeout.ms": 10_000}) as p:
            p.send("bulk-chaos", b"warm-up", partition=0).get(30)
            proxy.max_kills = 8
            futures = []
            for round_ in range(20):
                for part in range(3):
                    futures += p.send_many("bulk-chaos", [b"%d:%d:%04d" % (part, round_, i) for i in range(300)],
                                           partition=part)
            p.flush(90)
            assert all(f.exception(30) is None for f in futures)
            assert proxy.kills >= 3, proxy.kills
            assert metric_values(p.metrics(), "producer-metrics")["record-retry-total"] > 0
        proxy.max_kills = proxy.kills
        by_partition = read_all(bootstrap, "bulk-chaos", 3, 18_001, timeout=60)
        for part in range(3):
            got = [r.value for r in by_partition[part] if r.value != b"warm-up"]
            assert got == [b"%d:%d:%04d" % (part, r, i) for r in range(20) for i in range(300)], \
                f"partition {part}: lost, duplicated or reordered"
    finally:
        if proxy is not None:
            proxy.close()
        broker.stop()
        broker.cleanup()


def test_send_many_transactions_commit_abort(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    create_topics(b, {"bulk-txn": 2})
    with producer(b, **{"transactional.id": "bulk-txn-1"}) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send_many("bulk-txn", [b"c1-%04d" % i for i in range(500)])
        p.commit_transaction()
        p.begin_transaction()
        aborted = p.send_many("bulk-txn", [b"a-%04d" % i for i in range(500)])
        p.flush()
        assert all(f.get(10).offset >= 0 for f in aborted)  # written, then aborted
        p.abort_transaction()
        p.begin_transaction()
        p.send_many("bulk-txn", [b"c2-%04d" % i for i in range(300)], partition=1)
        p.commit_transaction()
    committed = read_all(b, "bulk-txn", 2, 800, **{"isolation.level": "read_committed"})
    values = sorted(r.value for rs in committed.values() for r in rs)
    assert values == sorted([b"c1-%04d" % i for i in range(500)] + [b"c2-%04d" % i for i in range(300)])
    uncommitted = read_all(b, "bulk-txn", 2, 1300)
    assert sum(map(len, uncommitted.values())) == 1300
    # the columnar path filters the same way
    with consumer(b, **{"isolation.level": "read_committed"}) as c:
        c.assign([TopicPartition("bulk-txn", 0), TopicPartition("bulk-txn", 1)])
        table = read_arrow(c, 800)
        assert sorted(table.column("value").to_pylist()) == values
        assert c.poll_arrow(0.5).num_rows == 0


# ------------------------------------------------------------------------------------------ poll_arrow


def _mixed_topic(b: str, topic: str) -> None:
    """Bulk batches, headers, null keys and values, compressed batches and an aborted transaction."""
    create_topics(b, {topic: 2})
    with producer(b) as p:
        p.send_many(topic, [b"bulk-%04d" % i for i in range(700)], [b"k%d" % (i % 5) for i in range(700)],
                    partition=0)
        for i in range(30):
            p.send(topic, value=None if i % 7 == 0 else b"h-%d" % i, key=None if i % 3 else b"hk",
                   headers=[("n", b"%d" % i)] if i % 2 else None, partition=i % 2)
        p.flush()
    with producer(b, **{"compression.type": "gzip"}) as p:
        p.send_many(topic, [b"gz-%d" % i for i in range(200)], partition=1)
        p.flush()
    with producer(b, **{"transactional.id": f"{topic}-txn"}) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send_many(topic, [b"aborted-%d" % i for i in range(50)], partition=0)
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        p.send_many(topic, [b"committed-%d" % i for i in range(50)], partition=0)
        p.commit_transaction()
    with producer(b) as p:
        p.send_many(topic, [b"tail-%d" % i for i in range(20)], partition=0)
        p.flush()


def _rows(records: list[Any]) -> list[tuple[Any, ...]]:
    return [(r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, r.key, r.value,
             [(k, v) for k, v in r.headers]) for r in records]


def _table_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return [(r["topic"], r["partition"], r["offset"], r["timestamp"], r["timestamp_type"], r["key"], r["value"],
             [(h["key"], h["value"]) for h in r["headers"]]) for r in table.to_pylist()]


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_poll_arrow_returns_what_poll_returns(broker: BrokerProcess, isolation: str) -> None:
    b = broker.bootstrap
    topic = f"arrow-mixed-{isolation}"
    _mixed_topic(b, topic)
    expected = 700 + 30 + 200 + 50 + 20 + (50 if isolation == "read_uncommitted" else 0)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    by_poll = read_all(b, topic, 2, expected, **{"isolation.level": isolation})
    with consumer(b, **{"isolation.level": isolation}) as c:
        c.assign(tps)
        table = read_arrow(c, expected, max_records=97)
        positions = {tp: c.position(tp) for tp in tps}
    rows = _table_rows(table)
    assert len(rows) == expected
    for part in (0, 1):
        assert [r for r in rows if r[1] == part] == _rows(by_poll[part])
    with consumer(b, **{"isolation.level": isolation}) as c:
        c.assign(tps)
        while sum(map(len, [c.poll(0.3)])) or any(c.position(tp) < positions[tp] for tp in tps):
            pass
        assert {tp: c.position(tp) for tp in tps} == positions  # poll ends where poll_arrow ended
    if isolation == "read_committed":
        assert not any(v.startswith(b"aborted") for v in table.column("value").to_pylist() if v)


def test_poll_arrow_positions_commit_seek_pause(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    create_topics(b, {"arrow-pos": 2})
    with producer(b) as p:
        for part in (0, 1):
            p.send_many("arrow-pos", [b"%d-%03d" % (part, i) for i in range(300)], partition=part)
        p.flush()
    tp0, tp1 = TopicPartition("arrow-pos", 0), TopicPartition("arrow-pos", 1)
    with consumer(b, **{"group.id": "arrow-pos-group"}) as c:
        c.assign([tp0, tp1])
        c.pause([tp1])
        table = read_arrow(c, 7, max_records=7)
        assert table.num_rows == 7 and set(table.column("partition").to_pylist()) == {0}
        assert table.column("offset").to_pylist() == list(range(7))
        assert c.position(tp0) == 7
        c.commit_sync()
        assert c.committed(tp0).offset == 7
        # poll continues exactly where poll_arrow stopped (in the middle of a fetched batch), and back
        assert [r.offset for r in c.poll(5.0).records(tp0)][:3] == [7, 8, 9]
        c.seek(tp0, 3)
        t = read_arrow(c, 1, max_records=2)
        assert t.column("offset").to_pylist() == [3, 4] and c.position(tp0) == 5
        c.seek(tp0, 300)
        assert c.poll_arrow(0.5).num_rows == 0  # tp1 is still paused
        c.resume([tp1])
        rest = read_arrow(c, 300)
        assert rest.column("value").to_pylist() == [b"1-%03d" % i for i in range(300)]
        assert c.position(tp1) == 300
    with consumer(b, **{"group.id": "arrow-pos-group"}) as c:
        assert c.committed(tp0).offset == 7


def test_poll_arrow_refuses_interceptors(broker: BrokerProcess) -> None:
    class Noop:
        def on_consume(self, records: Any) -> Any:
            return records

        def on_commit(self, offsets: Any) -> None:
            pass

        def close(self) -> None:
            pass

    with consumer(broker.bootstrap, **{"interceptor.classes": [Noop()]}) as c:
        c.assign([TopicPartition("arrow-pos-none", 0)])
        from strom.common.errors import IllegalStateError

        with pytest.raises(IllegalStateError, match="interceptors"):
            c.poll_arrow(0)
