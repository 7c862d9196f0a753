"""Fetch sessions (KIP-227) with real clients against a strom broker: kafka-python and strom's consumer read many
partitions through incremental fetches; two consumers fighting over a one-slot session cache keep evicting each
other's session and both still read every record exactly once; confluent-kafka (librdkafka sends sessionless
fetches) still reads everything and opens no session. The broker's FetchSessionCache gauges and its Fetch error
counts (Prometheus endpoint) show what happened on the wire."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from strom.admin import AdminClient, NewTopic
from strom.common.structs import TopicPartition
from strom.consumer import KafkaConsumer
from strom.producer import KafkaProducer
from strom.testing.broker_process import BrokerProcess, free_port

pytestmark = [pytest.mark.interop, pytest.mark.timeout(240)]

PARTITIONS = 24
PER_PARTITION = 40


def _start(tmp_path_factory: pytest.TempPathFactory, name: str, **overrides: str) -> BrokerProcess:
    overrides.setdefault("metrics.prometheus.listener", f"http://127.0.0.1:{free_port()}")
    overrides.setdefault("group.initial.rebalance.delay.ms", "0")
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp(name) / "data", overrides=overrides)
    b.start()
    return b


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = _start(tmp_path_factory, "sessions-interop")
    yield b
    b.stop()
    b.cleanup()


def _metrics(b: BrokerProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(b.overrides["metrics.prometheus.listener"] + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _gauge(b: BrokerProcess, name: str) -> float:
    return _metrics(b).get((f"kafka_server_fetchsessioncache_{name}", frozenset()), 0.0)


def _fetch_errors(b: BrokerProcess, error: str) -> float:
    key = ("kafka_network_requestmetrics_errors_total", frozenset({("request", "Fetch"), ("error", error)}))
    return _metrics(b).get(key, 0.0)


def _create(b: BrokerProcess, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    try:
        # Created before any consumer asks (see _kafka_python_consumer for what kafka-python does otherwise).
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).all().result(30)
    finally:
        admin.close()


def _produce(b: BrokerProcess, topic: str, start: int, count: int) -> None:
    """``count`` records per partition, values ``b"<partition>-<i>"`` for i in ``start..start+count-1``."""
    p = KafkaProducer({"bootstrap.servers": b.bootstrap, "linger.ms": 2}, key_serializer="bytes",
                      value_serializer="bytes")
    try:
        for i in range(start, start + count):
            for part in range(PARTITIONS):
                p.send(topic, value=b"%d-%d" % (part, i), partition=part)
        p.flush(30)
    finally:
        p.close()


def _check_exactly_once(got: list[tuple[int, int, bytes]], per_partition: int) -> None:
    """Every partition read at offsets 0..n-1 once, in order, each with the value written there."""
    by_partition: dict[int, list[tuple[int, bytes]]] = {}
    for part, offset, value in got:
        by_partition.setdefault(part, []).append((offset, value))
    assert sorted(by_partition) == list(range(PARTITIONS))
    for part, records in by_partition.items():
        assert records == [(i, b"%d-%d" % (part, i)) for i in range(per_partition)], part


def _drain(polls: list[Callable[[], list[tuple[int, int, bytes]]]], results: list[list[tuple[int, int, bytes]]],
           want: int, on_progress: Callable[[], None] | None = None, timeout_s: float = 90) -> None:
    """Alternate the consumers' polls until each has ``want`` records (or the deadline: the asserts say what
    was missing)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(len(r) < want for r in results):
        for poll, out in zip(polls, results, strict=True):
            out.extend(poll())
        if on_progress is not None:
            on_progress()


def _kafka_python_consumer(b: BrokerProcess, topic: str, group: str | None) -> tuple[Any, Callable[[], Any]]:
    """A group member subscribed to ``topic``, or with ``group`` None every partition assigned by hand."""
    import kafka

    c = kafka.KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=group, auto_offset_reset="earliest",
                            enable_auto_commit=False, max_poll_records=50, fetch_max_wait_ms=100)
    if group is None:
        c.assign([kafka.TopicPartition(topic, p) for p in range(PARTITIONS)])
    else:
        c.subscribe([topic])
        # Metadata for the topic before the first join. Otherwise a leader that joins before its metadata arrives
        # assigns nothing, then rebalances when the metadata lands; and kafka-python 3.0.12 drops that second
        # rebalance's SyncGroup result when a short poll times out during it (need_rejoin() turns false once it
        # has assigned, so nothing awaits the finished join again): the member keeps no partitions for good.
        assert c.partitions_for_topic(topic) == set(range(PARTITIONS))

    def poll() -> list[tuple[int, int, bytes]]:
        return [(r.partition, r.offset, r.value) for rs in c.poll(timeout_ms=100).values() for r in rs]

    return c, poll


def _strom_consumer(b: BrokerProcess, topic: str, group: str | None) -> tuple[KafkaConsumer, Callable[[], Any]]:
    configs: dict[str, Any] = {"bootstrap.servers": b.bootstrap, "auto.offset.reset": "earliest",
                               "enable.auto.commit": False, "max.poll.records": 50, "fetch.max.wait.ms": 100}
    if group is not None:
        configs["group.id"] = group
    c = KafkaConsumer(configs, key_deserializer="bytes", value_deserializer="bytes")
    if group is None:
        c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    else:
        c.subscribe([topic])

    def poll() -> list[tuple[int, int, bytes]]:
        return [(r.partition, r.offset, r.value) for r in c.poll(0.1)]

    return c, poll


def _incremental_epoch(consumer: Any) -> int:
    """The highest session epoch the client's FetchSessionHandlers reached (> 1: incremental fetches were
    accepted by the broker)."""
    fetcher = consumer._fetcher
    handlers = fetcher._session_handlers
    assert handlers, "the client kept no fetch session handler"
    return max(h.next_metadata.epoch for h in handlers.values())


@pytest.mark.parametrize("client", ["kafka-python", "strom"])
def test_many_partitions_through_incremental_fetches(broker: BrokerProcess, client: str) -> None:
    topic = f"inc-{client}"
    _create(broker, topic)
    _produce(broker, topic, 0, PER_PARTITION // 2)
    make = _kafka_python_consumer if client == "kafka-python" else _strom_consumer
    consumer, poll = make(broker, topic, f"g-{client}")
    try:
        got: list[tuple[int, int, bytes]] = []
        produced_rest = False

        def more() -> None:  # the second half arrives while the session is open
            nonlocal produced_rest
            if not produced_rest and got:
                _produce(broker, topic, PER_PARTITION // 2, PER_PARTITION - PER_PARTITION // 2)
                produced_rest = True

        _drain([poll], [got], PARTITIONS * PER_PARTITION, more)
        _check_exactly_once(got, PER_PARTITION)
        assert _incremental_epoch(consumer) > 1
        assert _gauge(broker, "numincrementalfetchsessions") >= 1
    finally:
        consumer.close()


def test_evicted_sessions_recover_without_loss_or_duplicates(tmp_path_factory: pytest.TempPathFactory) -> None:
    """One slot and no protection: each consumer's full fetch evicts the other's idle session, whose next
    incremental fetch gets FETCH_SESSION_ID_NOT_FOUND and starts over with a full fetch."""
    b = _start(tmp_path_factory, "one-slot", **{"max.incremental.fetch.session.cache.slots": "1",
                                                 "min.incremental.fetch.session.eviction.ms": "0"})
    try:
        _create(b, "evict")
        _produce(b, "evict", 0, PER_PARTITION // 2)
        # Assigned by hand: no group coordination in the way of what is tested here.
        kp, kp_poll = _kafka_python_consumer(b, "evict", None)
        st, st_poll = _strom_consumer(b, "evict", None)
        try:
            results: list[list[tuple[int, int, bytes]]] = [[], []]
            produced_rest = False

            def more() -> None:
                nonlocal produced_rest
                if not produced_rest and all(results):
                    _produce(b, "evict", PER_PARTITION // 2, PER_PARTITION - PER_PARTITION // 2)
                    produced_rest = True

            _drain([kp_poll, st_poll], results, PARTITIONS * PER_PARTITION, more)
            for got in results:
                _check_exactly_once(got, PER_PARTITION)
            assert _gauge(b, "incrementalfetchsessionevictions_total") >= 2
            assert _fetch_errors(b, "FETCH_SESSION_ID_NOT_FOUND") >= 2
            assert _gauge(b, "numincrementalfetchsessions") == 1
        finally:
            kp.close()
            st.close()
    finally:
        b.stop()
        b.cleanup()


def test_confluent_kafka_fetches_sessionless(broker: BrokerProcess) -> None:
    import confluent_kafka as ck

    _create(broker, "rdkafka")
    _produce(broker, "rdkafka", 0, PER_PARTITION)
    sessions_before = _gauge(broker, "numincrementalfetchsessions")
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-rdkafka",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["rdkafka"])
    got: list[tuple[int, int, bytes]] = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < PARTITIONS * PER_PARTITION and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append((m.partition(), m.offset(), m.value()))
        assert _gauge(broker, "numincrementalfetchsessions") == sessions_before
    finally:
        c.close()
    _check_exactly_once(got, PER_PARTITION)


def test_strom_consumer_close_ends_its_session(broker: BrokerProcess) -> None:
    _create(broker, "closing")
    _produce(broker, "closing", 0, 2)
    before = _gauge(broker, "numincrementalfetchsessions")
    consumer, poll = _strom_consumer(broker, "closing", "g-closing")
    got: list[tuple[int, int, bytes]] = []
    _drain([poll], [got], PARTITIONS * 2)
    assert _gauge(broker, "numincrementalfetchsessions") == before + 1
    consumer.close()
    assert _gauge(broker, "numincrementalfetchsessions") == before
    assert sorted(p for p, _o, _v in got) == sorted(list(range(PARTITIONS)) * 2)
