"""Restart, crash (kill -9) and retention against a real broker subprocess, using confluent-kafka as the client."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from strom.broker_process import BrokerProcess  # noqa: E402
from strom.common.error_codes import ErrorCode  # noqa: E402
from strom.protocol.api_keys import ApiKey  # noqa: E402
from strom.protocol.messages.fetch import FetchRequest  # noqa: E402
from strom.protocol.messages.list_offsets import ListOffsetsRequest  # noqa: E402
from strom.testing.raw_client import RawClient  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _create(b: BrokerProcess, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                  config=config or {})])[topic].result(15)


def _read_all(b: BrokerProcess, topic: str, partitions: int, expect: int,
              timeout: float = 60) -> dict[tuple[int, int], tuple[bytes | None, bytes]]:
    """Everything in the partitions, read up to each one's end offset (not just ``expect`` records: after a
    crash the log may also hold written-but-unacknowledged records, so a count alone could stop early)."""
    c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "unused", "enable.auto.commit": False,
                     "auto.offset.reset": "earliest"})
    ends = {p: c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    assert sum(ends.values()) >= expect, f"end offsets {ends} hold fewer than the {expect} records expected"
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
    out: dict[tuple[int, int], tuple[bytes | None, bytes]] = {}
    next_offset = dict.fromkeys(range(partitions), 0)
    deadline = time.monotonic() + timeout
    while any(next_offset[p] < ends[p] for p in ends) and time.monotonic() < deadline:
        for m in c.consume(5000, 0.5):
            if m.error():
                continue
            out[(m.partition(), m.offset())] = (m.key(), m.value())
            next_offset[m.partition()] = m.offset() + 1
    c.close()
    return out


def _produce(b: BrokerProcess, topic: str, n: int, **conf: object) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    acked: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    p = ck.Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 2, **conf})

    def cb(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            acked[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"value-%d" % i, on_delivery=cb)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    return acked


def test_restart_keeps_records_and_offsets(fresh_broker: BrokerProcess) -> None:
    b = fresh_broker.start()
    _create(b, "durable", 3)
    acked = _produce(b, "durable", 10_000, **{"compression.type": "lz4"})
    assert len(acked) == 10_000
    assert b.stop() == 0, "clean shutdown must exit 0"
    b.start()
    got = _read_all(b, "durable", 3, len(acked))
    assert got == acked
    # The log continues after the restart.
    more = _produce(b, "durable", 100)
    for (p, off) in more:
        assert off >= max(o for (pp, o) in acked if pp == p) + 1 if any(pp == p for (pp, _o) in acked) else off >= 0


def test_kill_9_during_produce_loses_nothing_acknowledged(fresh_broker: BrokerProcess) -> None:
    b = fresh_broker
    b.overrides["log.flush.interval.messages"] = "1"
    b.start()
    _create(b, "crash", 2)
    acked: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def loop() -> None:
        p = ck.Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 1,
                         "message.timeout.ms": 3000, "retries": 0})

        def cb(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is None:
                with lock:
                    acked[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

        i = 0
        while not stop.is_set():
            try:
                p.produce("crash", key=b"k%d" % i, value=b"crash-value-%d" % i, on_delivery=cb)
                i += 1
            except BufferError:
                pass
            p.poll(0.0005 if i % 50 == 0 else 0)
        p.flush(5)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while len(acked) < 3000 and time.monotonic() < deadline:
        time.sleep(0.05)
    b.kill()  # SIGKILL while the producer is still sending
    stop.set()
    t.join(30)
    with lock:
        snapshot = dict(acked)
    assert len(snapshot) >= 1000
    b.start()
    got = _read_all(b, "crash", 2, len(snapshot), timeout=60)
    missing = [k for k in snapshot if got.get(k) != snapshot[k]]
    assert not missing, f"{len(missing)} acknowledged records lost or altered, e.g. {missing[:3]}"
    # Offsets are dense per partition: nothing half-written is served.
    for p in (0, 1):
        offs = sorted(o for (pp, o) in got if pp == p)
        assert offs == list(range(len(offs)))


def test_torn_tail_is_truncated_on_restart(fresh_broker: BrokerProcess) -> None:
    b = fresh_broker.start()
    _create(b, "torn", 1)
    acked = _produce(b, "torn", 500)
    b.kill()
    seg = sorted((b.data_dir / "torn-0").glob("*.log"))[-1]
    with open(seg, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x01\xf4\x00\x00\x10\x00garbage-torn-write")
    b.start()
    assert _read_all(b, "torn", 1, 500) == acked
    more = _produce(b, "torn", 10)
    assert sorted(o for (_p, o) in more) == list(range(500, 510))


def test_retention_deletes_old_segments_and_consumers_reset(fresh_broker: BrokerProcess) -> None:
    b = fresh_broker
    b.overrides.update({"log.retention.check.interval.ms": "200"})
    b.start()
    _create(b, "retained", 1, {"segment.bytes": "20000", "retention.bytes": "60000"})
    p = ck.Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(400):
        p.produce("retained", value=b"%05d" % i + b"x" * 995)
        p.poll(0)
    assert p.flush(30) == 0
    part_dir = Path(b.data_dir) / "retained-0"
    deadline = time.monotonic() + 30
    with RawClient(b.bootstrap) as c:
        def earliest() -> int:
            req = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
                name="retained", partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0,
                                                                                    timestamp=-2)])])
            return c.request(ApiKey.LIST_OFFSETS, 5, req).topics[0].partitions[0].offset

        while earliest() == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        start = earliest()
        assert start > 0, "retention never deleted a segment"
        # The log start offset moves first; the segment files are renamed *.deleted off the event loop right after
        # (Kafka's asyncDeleteSegment), so their count is polled.
        while len(list(part_dir.glob("*.log"))) > 5 and time.monotonic() < deadline + 30:
            time.sleep(0.1)
        assert len(list(part_dir.glob("*.log"))) <= 5
        start = earliest()
        fetch = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
            topic="retained", partitions=[FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                                      partition_max_bytes=1 << 20)])])
        part = c.request(ApiKey.FETCH, 11, fetch).responses[0].partitions[0]
        assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert part.log_start_offset == start
    # A consumer that fell behind resets to the earliest retained offset and reads to the end.
    c2 = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "unused", "auto.offset.reset": "earliest"})
    c2.assign([ck.TopicPartition("retained", 0, 0)])
    offsets: list[int] = []
    deadline = time.monotonic() + 30
    while (not offsets or offsets[-1] < 399) and time.monotonic() < deadline:
        offsets += [m.offset() for m in c2.consume(1000, 0.5) if not m.error()]
    c2.close()
    assert offsets[0] == start and offsets[-1] == 399
