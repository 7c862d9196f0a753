"""KafkaProducer facade over a MockClient (the real Sender thread runs; no sockets)."""

from __future__ import annotations

import threading
import time as _time
from typing import Any

import pytest

from strom.common.error_codes import InvalidTopicExceptionError, MessageTooLargeError
from strom.common.errors import ConfigError, IllegalStateError, KafkaError, KafkaTimeoutError
from strom.common.serialization import SerializationError
from strom.common.structs import TopicPartition
from strom.common.time import SystemTime
from strom.metrics import metric_values
from strom.producer import KafkaProducer, ProducerRecord, RecordTooLargeError
from strom.producer.internals.producer_metadata import ProducerMetadata
from strom.producer.kafka_producer import NETWORK_THREAD_PREFIX
from strom.protocol.messages import InitProducerIdRequest, ProduceRequest
from strom.testing.mock_client import MockClient, metadata_update_with
from strom.testing.mock_time import MockTime

from .sender_support import init_producer_id_response, produce_response, request_partitions

pytestmark = [pytest.mark.component, pytest.mark.timeout(60)]

BASE = {"bootstrap.servers": "localhost:9092", "key.serializer": "bytes", "value.serializer": "bytes"}


def eventually(condition: Any, timeout: float = 10.0) -> None:
    deadline = _time.monotonic() + timeout
    while not condition():
        if _time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        _time.sleep(0.002)


class ThreadedMockTime(MockTime):
    """MockTime whose condition waits really wait a little for a notification (the Sender thread answers
    metadata requests concurrently) and only advance the clock when none came."""

    def wait_on(self, cond: threading.Condition, timeout_ms: int) -> None:
        if not cond.wait(0.05):
            self.sleep(min(max(0, timeout_ms), 500))


class Setup:
    def __init__(self, topics: dict[str, int] | None = None, clock: Any = None, **config: Any) -> None:
        self.time = clock or ThreadedMockTime()
        self.metadata = ProducerMetadata(100, 300_000, 300_000, self.time)
        self.client = MockClient(self.time, self.metadata, max_real_poll_ms=5)
        if topics is not None:
            self.client.default_metadata_response = metadata_update_with(1, topics)
        cfg = {**BASE, "enable.idempotence": False, **config}
        self.producer = KafkaProducer(cfg, time=self.time, client=self.client, metadata=self.metadata)

    def respond_all(self, offset: int = 0, error: int = 0) -> int:
        """Answer every pending produce request (partition → ``offset``); returns how many."""
        n = 0
        for request in list(self.client.requests):
            if isinstance(request.request, ProduceRequest):
                parts = request_partitions(request.request)
                self.client.respond_to_request(request, produce_response(dict.fromkeys(parts, offset), error=error))
                n += 1
        if n:
            self.client.wakeup()
        return n

    def close(self) -> None:
        self.producer.close(0)


@pytest.fixture
def setup():  # type: ignore[no-untyped-def]
    s = Setup({"t": 2})
    yield s
    s.close()


def test_required_configs() -> None:
    """§18 item 1: bootstrap.servers, key.serializer and value.serializer are required; no thread starts."""
    before = set(threading.enumerate())
    for missing in BASE:
        cfg = {k: v for k, v in BASE.items() if k != missing}
        with pytest.raises(ConfigError, match=missing.replace(".", r"\.")):
            KafkaProducer({**cfg, "client.id": "required-configs"})
    left_behind = [t.name for t in set(threading.enumerate()) - before if t.name.startswith(NETWORK_THREAD_PREFIX)]
    assert left_behind == []


def test_construction_failure_closes_and_wraps(monkeypatch: pytest.MonkeyPatch) -> None:
    """§18 item 2: a failure during construction closes what was built (zero timeout) and raises
    KafkaError("Failed to construct kafka producer") with the cause."""
    import strom.producer.kafka_producer as kp

    def broken_sender(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("sender exploded")

    monkeypatch.setattr(kp, "Sender", broken_sender)
    clock = MockTime()
    metadata = ProducerMetadata(100, 300_000, 300_000, clock)
    client = MockClient(clock, metadata)
    with pytest.raises(KafkaError, match="^Failed to construct kafka producer$") as e:
        KafkaProducer({**BASE, "client.id": "broken"}, time=clock, client=client, metadata=metadata)
    assert isinstance(e.value.__cause__, RuntimeError)
    assert client.closed and metadata.is_closed()


def test_thread_name_daemon_and_client_id_sequence() -> None:
    """§18 item 3: a daemon Sender thread named "kafka-producer-network-thread | <client.id>" starts in the
    constructor; without client.id the ids are producer-N with N increasing."""
    a, b = Setup(), Setup()
    try:
        ids = [a.producer.client_id, b.producer.client_id]
        assert all(i.startswith("producer-") for i in ids)
        assert int(ids[1].split("-")[1]) > int(ids[0].split("-")[1])
        threads = {t.name: t for t in threading.enumerate()}
        thread = threads[f"kafka-producer-network-thread | {ids[0]}"]
        assert thread.daemon and thread.is_alive()
    finally:
        a.close()
        b.close()


def test_construction_does_no_network_io() -> None:
    """§18 item 4: construction only seeds metadata with the bootstrap addresses; all network work (polls)
    happens on the Sender thread."""
    clock = ThreadedMockTime()
    metadata = ProducerMetadata(100, 300_000, 300_000, clock)
    client = MockClient(clock, metadata, max_real_poll_ms=5)
    threads: list[str] = []
    original = client.poll

    def recording_poll(timeout_ms: int, now: int) -> Any:
        threads.append(threading.current_thread().name)
        return original(timeout_ms, now)

    client.poll = recording_poll  # type: ignore[method-assign]
    producer = KafkaProducer({**BASE, "bootstrap.servers": "h1:1,h2:2", "client.id": "io"}, time=clock,
                             client=client, metadata=metadata)
    try:
        eventually(lambda: threads)
        assert set(threads) == {f"{NETWORK_THREAD_PREFIX} | io"}
        assert {n.node_id for n in metadata.fetch().nodes} == {-1, -2}
    finally:
        producer.close(0)


def test_send_returns_future_and_runs_callback_once(setup: Setup) -> None:
    """§18 items 8, 9, 15: send returns a future whose get() blocks until acknowledged and yields partition
    and offset; the callback runs once with (metadata, None); a record without timestamp gets now."""
    calls: list[Any] = []
    setup.time.sleep(1_234_567)  # the mock clock is far from 0 and from the wall clock
    before = setup.time.milliseconds()
    future = setup.producer.send(ProducerRecord("t", b"v", partition=1), lambda md, e: calls.append((md, e)))
    after = setup.time.milliseconds()  # the Sender thread may advance the mock clock meanwhile
    eventually(lambda: setup.respond_all(offset=41))
    md = future.get(10)
    assert (md.topic, md.partition, md.offset) == ("t", 1, 41)
    assert before <= md.timestamp <= after
    eventually(lambda: calls)
    assert calls == [(md, None)]


def test_send_convenience_forms(setup: Setup) -> None:
    """§18 item 8 (convenience forms): send(topic, value) and send(topic, value=..., key=..., partition=...) build the ProducerRecord."""
    f1 = setup.producer.send("t", b"a", partition=0)
    f2 = setup.producer.send("t", value=b"b", key=b"k", partition=0, headers={"h": b"1"})
    eventually(lambda: setup.respond_all(offset=0))
    eventually(lambda: f1.done() and f2.done())
    assert f1.get().offset == 0 and f2.get().offset == 1


def test_api_errors_go_to_future_and_callback(setup: Setup) -> None:
    """§18 items 12, 17: RecordTooLarge (max.request.size checked before buffer.memory) is not raised: the
    callback gets (None, e) and the returned future fails; the interceptors hear about it."""
    calls: list[Any] = []
    future = setup.producer.send(ProducerRecord("t", b"x" * (2 * 1024 * 1024)), lambda md, e: calls.append((md, e)))
    with pytest.raises(RecordTooLargeError, match=r"^\[Error 10\] MESSAGE_TOO_LARGE: The message is \d+ bytes when "
                                                  r"serialized which is larger than 1048576, which is the value of "
                                                  r"the max.request.size configuration\.$"):
        future.get()
    assert calls[0][0] is None and isinstance(calls[0][1], MessageTooLargeError)
    s = Setup({"t": 2}, **{"max.request.size": 10_000_000, "buffer.memory": 100_000})
    try:
        f = s.producer.send(ProducerRecord("t", b"x" * 200_000))
        with pytest.raises(RecordTooLargeError, match="larger than the total memory buffer you have configured "
                                                      "with the buffer.memory configuration"):
            f.get()
    finally:
        s.close()


def test_serialization_errors_are_raised(setup: Setup) -> None:
    """§18 items 12, 14: a serializer type mismatch raises SerializationException "Can't convert key of class
    X to class Y specified in key.serializer" (value analogously)."""
    s = Setup({"t": 1}, **{"key.serializer": "string", "value.serializer": "string"})
    try:
        with pytest.raises(SerializationError, match="^Can't convert key of class int to class StringSerializer "
                                                      "specified in key.serializer$"):
            s.producer.send(ProducerRecord("t", "v", key=5))
        with pytest.raises(SerializationError, match="^Can't convert value of class bytes to class "
                                                      "StringSerializer specified in value.serializer$"):
            s.producer.send(ProducerRecord("t", b"v"))
    finally:
        s.close()


def test_bytes_serializer_records_on_the_fast_path_and_off_it() -> None:
    """With the pass-through ``bytes`` serializers, ``send`` uses bytes and None keys/values as they are (no
    serializer call) and still converts a bytearray or memoryview and refuses other types with Kafka's message."""
    s = Setup({"t": 1}, **{"key.serializer": "bytes", "value.serializer": "bytes"})
    try:
        futures = [s.producer.send("t", b"v1", key=b"k1"), s.producer.send("t", None, key=None),
                   s.producer.send("t", bytearray(b"v3"), key=memoryview(b"k3")),
                   s.producer.send(ProducerRecord("t", b"v4", key=b"k4"))]
        with pytest.raises(SerializationError, match="^Can't convert value of class str to class "
                                                      "ByteArraySerializer specified in value.serializer$"):
            s.producer.send("t", "text")
        with pytest.raises(SerializationError, match="^Can't convert key of class int to class "
                                                      "ByteArraySerializer specified in key.serializer$"):
            s.producer.send("t", b"v", key=7)
        eventually(lambda: s.client.requests)
        from strom.record.records import MemoryRecords
        request = next(r.request for r in s.client.requests if isinstance(r.request, ProduceRequest))
        got = [(r.key, r.value) for r in MemoryRecords(request_partitions(request)[TopicPartition("t", 0)]).records()]
        assert got == [(b"k1", b"v1"), (None, None), (b"k3", b"v3"), (b"k4", b"v4")]
        s.respond_all(offset=0)
        assert [f.get(10).serialized_value_size for f in futures] == [2, -1, 2, 2]
    finally:
        s.close()


def test_headers_on_the_fast_path_and_off_it() -> None:
    """Headers given as a list or tuple of pairs (bytes serializers, no interceptors: no ``ProducerRecord`` is
    made) reach the batch as headers given any other way, are checked the same way, and count in the size
    check."""
    s = Setup({"t": 1}, **{"key.serializer": "bytes", "value.serializer": "bytes", "max.request.size": 2000})
    try:
        sends = [
            ("list", [("a", b"1"), ("b", None)]),
            ("tuple", (("a", b"1"), ("b", None))),
            ("converted", [("s", "text"), ("ba", bytearray(b"x")), ("\u043a", b"")]),
            ("mapping", {"a": b"1", "b": None}),
            ("record", None),
            ("none", None),
        ]
        futures = []
        for name, headers in sends:
            if name == "record":
                futures.append(s.producer.send(ProducerRecord("t", b"v", headers=[("a", b"1"), ("b", None)])))
            else:
                futures.append(s.producer.send("t", name.encode(), headers=headers))
        for bad, message in [([(1, b"x")], "header key must be a str"), ([("k", 5)], "header value must be bytes"),
                             ([("k",)], "not enough values to unpack")]:
            with pytest.raises((TypeError, ValueError), match=message):
                s.producer.send("t", b"v", headers=bad)
        too_large = s.producer.send("t", b"v", headers=[("big", b"x" * 2000)])
        with pytest.raises(RecordTooLargeError):
            too_large.get(10)
        eventually(lambda: s.client.requests)
        from strom.record.records import MemoryRecords
        request = next(r.request for r in s.client.requests if isinstance(r.request, ProduceRequest))
        got = [r.headers for r in MemoryRecords(request_partitions(request)[TopicPartition("t", 0)]).records()]
        assert got == [(("a", b"1"), ("b", None))] * 2 + [(("s", b"text"), ("ba", b"x"), ("\u043a", b""))] + \
            [(("a", b"1"), ("b", None))] * 2 + [()]
        s.respond_all(offset=0)
        assert all(f.get(10).offset >= 0 for f in futures)
    finally:
        s.close()


def test_send_after_close_raises(setup: Setup) -> None:
    """§18 item 13: send on a closed producer fails (IllegalStateException in Kafka)."""
    setup.producer.close()
    with pytest.raises(IllegalStateError, match="^Cannot perform operation after producer has been closed$"):
        setup.producer.send(ProducerRecord("t", b"v"))


def test_headers_become_read_only(setup: Setup) -> None:
    """§18 item 16: after partitioning the record's headers are read-only."""
    record = ProducerRecord("t", b"v", headers=[("a", b"1")])
    setup.producer.send(record)
    with pytest.raises(IllegalStateError):
        record.headers.add("b", b"2")


def test_unknown_topic_times_out_with_kafka_message() -> None:
    """§18 item 19: a topic still unknown after max.block.ms fails with "Topic <t> not present in metadata
    after <ms> ms."."""
    s = Setup({"t": 1}, **{"max.block.ms": 2000})
    try:
        with pytest.raises(KafkaTimeoutError, match=r"^Topic missing not present in metadata after 2000 ms\.$"):
            s.producer.send(ProducerRecord("missing", b"v")).get()
    finally:
        s.close()


class _AnswerAtDeadline(ProducerMetadata):
    """Every metadata wait ends with an update arriving just as the remaining budget runs out."""

    def await_update(self, last_version: int, timeout_ms: int) -> None:
        self.time.sleep(timeout_ms)
        with self._lock:
            self._update_version += 1


def test_partition_out_of_range_times_out_with_kafka_message() -> None:
    """§18 item 20: an explicit partition beyond the known count keeps the caller re-requesting metadata until
    max.block.ms, then fails with "Partition <p> of topic <t> with partition count <n> is not present in
    metadata after <ms> ms."."""
    clock = MockTime()
    metadata = _AnswerAtDeadline(100, 300_000, 300_000, clock)
    client = MockClient(clock, metadata, max_real_poll_ms=5)
    producer = KafkaProducer({**BASE, "enable.idempotence": False, "max.block.ms": 1000}, time=clock,
                             client=client, metadata=metadata)
    try:
        metadata.add("t", clock.milliseconds())
        metadata.update(metadata.request_version, metadata_update_with(1, {"t": 2}), False, clock.milliseconds())
        client.default_metadata_response = metadata_update_with(1, {"t": 2})
        with pytest.raises(KafkaTimeoutError, match=r"^Partition 5 of topic t with partition count 2 is not present "
                                                    r"in metadata after 1000 ms\.$"):
            producer.send(ProducerRecord("t", b"v", partition=5)).get()
    finally:
        producer.close(0)


def test_invalid_topic_fails(setup: Setup) -> None:
    """§18 item 21: a topic reported invalid by metadata fails with InvalidTopicException."""
    setup.client.default_metadata_response = metadata_update_with(1, {"t": 2}, topic_errors={"bad topic": 17})
    with pytest.raises(InvalidTopicExceptionError):
        setup.producer.send(ProducerRecord("bad topic", b"v")).get(10)


class _WaitRecordingTime(SystemTime):
    """The system clock, recording which threads waited on a condition through it."""

    def __init__(self) -> None:
        self.waiting_threads: set[str] = set()

    def wait_on(self, cond: threading.Condition, timeout_ms: int) -> None:
        self.waiting_threads.add(threading.current_thread().name)
        super().wait_on(cond, timeout_ms)


def test_first_send_blocks_until_metadata_arrives() -> None:
    """§18 item 18: the first send to an unknown topic blocks the caller until the Sender has fetched the
    topic's metadata, then returns."""
    clock = _WaitRecordingTime()
    metadata = ProducerMetadata(100, 300_000, 300_000, clock)
    client = MockClient(clock, metadata, max_real_poll_ms=5)
    producer = KafkaProducer({**BASE, "enable.idempotence": False}, time=clock, client=client,
                             metadata=metadata)
    try:
        result: list[Any] = []
        thread = threading.Thread(target=lambda: result.append(producer.send(ProducerRecord("late", b"v"))),
                                  name="caller")
        thread.start()
        eventually(lambda: "caller" in clock.waiting_threads)  # the caller blocks on the metadata condition
        assert thread.is_alive() and not result
        client.default_metadata_response = metadata_update_with(1, {"late": 1})
        metadata.request_update()
        client.wakeup()
        thread.join(10)
        assert result and not result[0].done()
    finally:
        producer.close(0)


class _Interceptor:
    def __init__(self, tag: str, fail: bool = False) -> None:
        self.tag = tag
        self.fail = fail
        self.acks: list[Any] = []

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        if self.fail:
            raise RuntimeError("interceptor bug")
        return ProducerRecord(record.topic, record.value + self.tag.encode(), record.key, record.partition)

    def on_acknowledgement(self, metadata: Any, exception: BaseException | None) -> None:
        self.acks.append((metadata, exception))

    def close(self) -> None:
        pass


def test_interceptors_chain_and_errors() -> None:
    """§18 items 10, 11: on_send runs in order, each on the previous result; a failing one is skipped; send
    errors reach on_acknowledgement with a placeholder metadata carrying the partition."""
    first, broken, second = _Interceptor("1"), _Interceptor("x", fail=True), _Interceptor("2")
    s = Setup({"t": 1}, **{"interceptor.classes": [first, broken, second]})
    try:
        f = s.producer.send(ProducerRecord("t", b"v", partition=0))
        eventually(lambda: s.client.requests)
        request = s.client.requests[0].request
        from strom.record.records import MemoryRecords
        values = [r.value for r in MemoryRecords(request_partitions(request)[TopicPartition("t", 0)]).records()]
        assert values == [b"v12"]
        s.respond_all(offset=3)
        f.get(10)
        eventually(lambda: len(second.acks) == 1)
        assert second.acks[0][0].offset == 3
        s.producer.send(ProducerRecord("t", b"y" * 2_000_000, partition=0))
        assert first.acks[-1][0].partition == 0 and isinstance(first.acks[-1][1], MessageTooLargeError)
    finally:
        s.close()


def test_sticky_partitioner_switches_on_new_batch() -> None:
    """§18 item 34: key-less records stick to one partition until a new batch is needed for it; then the
    partitioner moves on and the record goes to the newly chosen partition."""
    s = Setup({"t": 4}, **{"batch.size": 300, "linger.ms": 60_000})
    try:
        futures = [s.producer.send(ProducerRecord("t", b"x" * 100)) for _ in range(12)]
        runs: list[list[Any]] = []
        for f in futures:
            if runs and runs[-1][0].result_holder.topic_partition == f.result_holder.topic_partition:
                runs[-1].append(f)
            else:
                runs.append([f])
        assert len(runs) >= 4  # switched partition several times
        for run in runs:  # a switch happens only when the partition needs a new batch
            assert len({id(f.result_holder) for f in run}) == 1
            assert len(run) == 2  # two 100-byte records fill a 300-byte batch
    finally:
        s.close()


def test_records_of_a_partition_keep_send_order() -> None:
    """§18 item 38: per partition, batches are appended at the tail and the Sender takes from the head, so the
    records of one partition reach the broker, get their offsets and complete their callbacks in send order
    (several batches per partition, several requests, two partitions interleaved)."""
    from strom.record.records import MemoryRecords
    s = Setup({"t": 2}, **{"batch.size": 256})
    sent: dict[int, list[bytes]] = {0: [], 1: []}
    on_wire: dict[int, list[bytes]] = {0: [], 1: []}
    acked: dict[int, list[tuple[bytes, int]]] = {0: [], 1: []}
    next_offset = {0: 100, 1: 200}
    try:
        futures = []
        for i in range(40):
            p, value = i % 2, b"%03d" % i + b"." * 60  # three records fill a 256-byte batch
            sent[p].append(value)
            futures.append(s.producer.send(ProducerRecord("t", value, partition=p),
                                           lambda md, e, v=value: acked[md.partition].append((v, md.offset))))

        def answer_like_a_broker() -> bool:
            for request in [r for r in list(s.client.requests) if isinstance(r.request, ProduceRequest)]:
                offsets = {}
                for tp, raw in request_partitions(request.request).items():
                    values = [r.value for r in MemoryRecords(raw).records()]
                    on_wire[tp.partition].extend(values)
                    offsets[tp] = next_offset[tp.partition]
                    next_offset[tp.partition] += len(values)
                s.client.respond_to_request(request, produce_response(offsets))
                s.client.wakeup()
            return sum(map(len, acked.values())) == len(futures)

        eventually(answer_like_a_broker)
        assert all(f.exception() is None for f in futures)
        for p, base in ((0, 100), (1, 200)):
            assert on_wire[p] == sent[p]
            assert acked[p] == [(v, base + i) for i, v in enumerate(sent[p])]
    finally:
        s.close()


def test_flush_waits_for_completion(setup: Setup) -> None:
    """§18 item 72: flush() makes lingering records sendable and waits until they complete."""
    s = Setup({"t": 1}, **{"linger.ms": 600_000})
    try:
        f = s.producer.send(ProducerRecord("t", b"v"))
        responder = threading.Thread(target=lambda: eventually(lambda: s.respond_all(offset=7)))
        responder.start()
        s.producer.flush(10)
        assert f.done() and f.get().offset == 7
        responder.join(10)
        assert metric_values(s.producer.metrics(), "producer-metrics")["flush-time-ns-total"] >= 0
    finally:
        s.close()


def test_graceful_close_completes_pending_records() -> None:
    """§18 item 70: close() sends and acknowledges every accepted record before returning."""
    s = Setup({"t": 2})
    futures = [s.producer.send(ProducerRecord("t", b"v", partition=p)) for p in (0, 1, 0)]

    def respond_until_done() -> None:
        deadline = _time.monotonic() + 20
        while not all(f.done() for f in futures) and _time.monotonic() < deadline:
            s.respond_all(offset=0)
            _time.sleep(0.002)

    responder = threading.Thread(target=respond_until_done)
    responder.start()
    s.producer.close()
    responder.join(20)
    assert all(f.exception() is None for f in futures)
    assert s.client.closed


def test_forced_close_fails_pending_records() -> None:
    """§18 item 71: close(0) aborts incomplete batches; futures and callbacks fail at once."""
    s = Setup({"t": 1}, **{"linger.ms": 600_000})
    calls: list[Any] = []
    future = s.producer.send(ProducerRecord("t", b"v"), lambda md, e: calls.append(e))
    s.producer.close(0)
    with pytest.raises(KafkaError, match="Producer is closed forcefully."):
        future.get(10)
    assert len(calls) == 1


def test_partitions_for_metrics_and_context_manager() -> None:
    """§18 items 18, 70: partitions_for waits for metadata; metrics() reports Kafka-named metrics; the producer is a context
    manager."""
    s = Setup({"t": 3})
    with s.producer as producer:
        infos = producer.partitions_for("t")
        assert [p.partition for p in infos] == [0, 1, 2]
        f = producer.send(ProducerRecord("t", b"v", partition=2))
        eventually(lambda: s.respond_all(offset=0))
        f.get(10)
        metrics = metric_values(producer.metrics(), "producer-metrics", client_id=producer.client_id)
        for name in ("record-send-rate", "record-error-rate", "request-latency-avg", "batch-size-avg",
                     "records-per-request-avg", "buffer-available-bytes", "buffer-total-bytes",
                     "bufferpool-wait-time-ns-total", "metadata-wait-time-ns-total", "requests-in-flight"):
            assert name in metrics, name
        assert metrics["buffer-available-bytes"] == 32 * 1024 * 1024
    assert not s.producer._sender.is_running()


def test_idempotent_by_default_gets_producer_id() -> None:
    """§12: idempotence is on by default: InitProducerId precedes the first produce request, whose batch
    carries the producer id."""
    clock = ThreadedMockTime()
    metadata = ProducerMetadata(100, 300_000, 300_000, clock)
    client = MockClient(clock, metadata, max_real_poll_ms=5)
    client.default_metadata_response = metadata_update_with(1, {"t": 1})
    client.prepare_response(init_producer_id_response(77, 0),
                            matcher=lambda r: isinstance(r, InitProducerIdRequest))
    producer = KafkaProducer(BASE, time=clock, client=client, metadata=metadata)
    try:
        f = producer.send(ProducerRecord("t", b"v"))
        eventually(lambda: any(isinstance(r.request, ProduceRequest) for r in client.requests))
        request = next(r.request for r in client.requests if isinstance(r.request, ProduceRequest))
        from strom.record.batch import RecordBatch
        batch = RecordBatch(request_partitions(request)[TopicPartition("t", 0)])
        assert (batch.producer_id, batch.base_sequence) == (77, 0)
        assert request.acks == -1
        client.respond_to_request(next(r for r in client.requests if isinstance(r.request, ProduceRequest)),
                                  produce_response(TopicPartition("t", 0), offset=0))
        client.wakeup()
        assert f.get(10).offset == 0
    finally:
        producer.close(0)


class _SlowAnswer(ProducerMetadata):
    """Metadata waits take 300 ms (mock time), then the topic is known."""

    def await_update(self, last_version: int, timeout_ms: int) -> None:
        self.time.sleep(300)
        self.update(self.request_version, metadata_update_with(1, {"t": 1}), False, self.time.milliseconds())


def test_allocation_budget_is_what_metadata_wait_left() -> None:
    """§18 item 22: with cached metadata the whole max.block.ms is the buffer allocation budget; otherwise the
    budget is max.block.ms minus the metadata wait."""
    clock = MockTime()
    metadata = _SlowAnswer(100, 300_000, 300_000, clock)
    client = MockClient(clock, metadata, max_real_poll_ms=5)
    client.default_metadata_response = metadata_update_with(1, {"t": 1})
    producer = KafkaProducer({**BASE, "enable.idempotence": False, "max.block.ms": 1000}, time=clock,
                             client=client, metadata=metadata)
    budgets: list[int] = []
    original = producer._accumulator.append

    def spy(*args: Any) -> Any:
        budgets.append(args[6])
        return original(*args)

    producer._accumulator.append = spy  # type: ignore[method-assign]
    try:
        producer.send(ProducerRecord("t", b"first"))  # waits 300 ms for metadata
        producer.send(ProducerRecord("t", b"second"))  # cached
        assert budgets[0] == 700 and budgets[-1] == 1000
    finally:
        producer.close(0)


def test_a_send_that_runs_out_of_buffer_memory_counts_as_buffer_exhausted() -> None:
    """Kafka's buffer-exhausted-rate/total: a send whose wait for buffer memory ran out (max.block.ms) fails with
    the pool's timeout and is counted once; sends that found memory are not."""
    s = Setup({"t": 1}, **{"buffer.memory": 4096, "batch.size": 4096, "max.block.ms": 200})
    try:
        first = s.producer.send(ProducerRecord("t", b"x" * 3000))  # takes the whole pool: the broker never answers
        values = metric_values(s.producer.metrics(), "producer-metrics")
        assert values["buffer-exhausted-total"] == 0
        second = s.producer.send(ProducerRecord("t", b"y" * 3000))
        with pytest.raises(KafkaTimeoutError, match="Failed to allocate memory within the configured max blocking "
                                                    "time 200 ms"):
            second.get(10)
        values = metric_values(s.producer.metrics(), "producer-metrics")
        assert values["buffer-exhausted-total"] == 1 and values["buffer-exhausted-rate"] > 0
        assert not first.is_done()
    finally:
        s.close()
