"""Broker metrics against a real broker process: drive a known workload, scrape ``/metrics`` over HTTP
(``metrics.prometheus.listener``), and check that the series moved by exactly what was done."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from strom.admin import AdminClient, NewTopic
from strom.common.error_codes import ErrorCode as E
from strom.common.structs import TopicPartition
from strom.consumer import KafkaConsumer
from strom.producer import KafkaProducer
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.api_versions import ApiVersionsRequest
from strom.protocol.messages.fetch import FetchRequest
from strom.protocol.messages.produce import ProduceRequest
from strom.record.builder import MemoryRecordsBuilder
from strom.record.header import compute_crc
from strom.testing.broker_process import BrokerProcess, free_port
from strom.testing.cluster import wait_until
from strom.testing.raw_client import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Series:
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        text = r.read().decode()
    out: Series = {}
    for family in text_string_to_metric_families(text):  # prometheus-client's parser is the judge of the format
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(series: Series, name: str, **labels: str) -> float:
    return series.get((name, frozenset(labels.items())), 0.0)


def total(series: Series, name: str, **labels: str) -> float:
    """Sum of every series ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in series.items() if n == name and want <= ls)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("broker-metrics") / "data",
                      overrides={"group.initial.rebalance.delay.ms": "0",
                                 "metrics.prometheus.listener": f"http://127.0.0.1:{free_port()}"})
    b.start()
    b.metrics_url = b.overrides["metrics.prometheus.listener"] + "/metrics"  # type: ignore[attr-defined]
    yield b
    b.stop()
    b.cleanup()


def produce(bootstrap: str, topic: str, n: int, size: int = 100) -> None:
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5},
                             key_serializer="bytes", value_serializer="bytes")
    try:
        for i in range(n):
            producer.send(topic, value=b"%0*d" % (size, i), partition=0)
        producer.flush(30)
    finally:
        producer.close()


def test_produce_consume_and_lag_move_the_series(broker: BrokerProcess) -> None:
    url = broker.metrics_url  # type: ignore[attr-defined]
    with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic("metered", 1, 1)]).all().result(30)
    before = scrape(url)
    produce(broker.bootstrap, "metered", 1000, 100)
    after = scrape(url)

    # BrokerTopicMetrics: 1,000 records in; the bytes are the batches (100 B values plus record/batch overhead).
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic="metered") == 1000
    assert (value(after, "kafka_server_brokertopicmetrics_messagesin_total")
            - value(before, "kafka_server_brokertopicmetrics_messagesin_total")) == 1000
    bytes_in = value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic="metered")
    assert 100_000 < bytes_in < 100_000 + 1000 * 20 + 5_000, bytes_in
    # One partition per Produce request: the topic's produce-request count is the dispatcher's Produce count.
    produce_requests = (total(after, "kafka_network_requestmetrics_requests_total", request="Produce")
                        - total(before, "kafka_network_requestmetrics_requests_total", request="Produce"))
    assert produce_requests >= 1
    assert value(after, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic="metered") \
        == produce_requests
    assert (value(after, "kafka_network_requestmetrics_errors_total", request="Produce", error="NONE")
            - value(before, "kafka_network_requestmetrics_errors_total", request="Produce", error="NONE")) \
        == produce_requests
    assert value(after, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic="metered") == 0
    for q in ("0.50", "0.99"):
        assert value(after, "kafka_network_requestmetrics_totaltimems", request="Produce", quantile=q) > 0
        assert value(after, "kafka_network_requestmetrics_localtimems", request="Produce", quantile=q) > 0
    # Log gauges over the live log.
    assert value(after, "kafka_log_log_logendoffset", topic="metered", partition="0") == 1000
    assert value(after, "kafka_log_log_logstartoffset", topic="metered", partition="0") == 0
    assert value(after, "kafka_log_log_numlogsegments", topic="metered", partition="0") == 1
    assert value(after, "kafka_log_log_size", topic="metered", partition="0") == bytes_in

    # Consume 700 and commit: lag 300 (committed offset vs high watermark), offsets and bytes out recorded.
    consumer = KafkaConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "metered-group",
                              "enable.auto.commit": False, "max.poll.records": 100,
                              "auto.offset.reset": "earliest"},
                             key_deserializer="bytes", value_deserializer="bytes")
    tp = TopicPartition("metered", 0)
    try:
        consumer.assign([tp])
        consumed = 0
        while consumed < 700:
            consumed += len(list(consumer.poll(1000)))
        consumer.commit_sync({tp: 700})
        connected = scrape(url)
        assert value(connected, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT") >= 1
    finally:
        consumer.close()
    done = scrape(url)
    assert value(done, "kafka_consumergroup_lag", consumergroup="metered-group", topic="metered",
                 partition="0") == 300
    assert value(done, "kafka_consumergroup_current_offset", consumergroup="metered-group", topic="metered",
                 partition="0") == 700
    assert (value(done, "kafka_server_group_coordinator_metrics_offset_commit_count")
            - value(after, "kafka_server_group_coordinator_metrics_offset_commit_count")) == 1
    bytes_out = value(done, "kafka_server_brokertopicmetrics_bytesout_total", topic="metered")
    assert bytes_out >= consumed * 100
    assert value(done, "kafka_server_brokertopicmetrics_totalfetchrequests_total", topic="metered") >= 1
    assert value(done, "kafka_coordinator_group_groupmetadatamanager_numgroups") >= 1
    assert value(done, "kafka_server_socket_server_metrics_connection_creation_total", listener="PLAINTEXT") >= 2
    # A standalone broker leads every partition it has and is its own controller.
    partitions = value(done, "kafka_server_replicamanager_partitioncount")
    assert partitions >= 1 and value(done, "kafka_server_replicamanager_leadercount") == partitions
    assert value(done, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(done, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    # KIP-73's replication throttles: nothing throttled on a standalone broker
    assert value(done, "kafka_server_leaderreplication_byte_rate") == 0
    assert value(done, "kafka_server_followerreplication_byte_rate") == 0


def test_rejected_produce_and_long_poll_remote_time(broker: BrokerProcess) -> None:
    url = broker.metrics_url  # type: ignore[attr-defined]
    with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic("tiny", 1, 1, configs={"max.message.bytes": "1000"})]).all().result(30)
    producer = KafkaProducer({"bootstrap.servers": broker.bootstrap, "retries": 0},
                             key_serializer="bytes", value_serializer="bytes")
    try:
        with pytest.raises(Exception, match="(?i)too large|MESSAGE_TOO_LARGE"):
            producer.send("tiny", value=b"x" * 5000).get(30)
    finally:
        producer.close()
    s = scrape(url)
    assert value(s, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic="tiny") == 1
    assert value(s, "kafka_server_brokertopicmetrics_bytesrejected_total", topic="tiny") > 5000
    assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic="tiny") == 0
    assert value(s, "kafka_network_requestmetrics_errors_total", request="Produce", error="MESSAGE_TOO_LARGE") == 1

    # A fetch of an empty partition parks for max_wait_ms: that wait is RemoteTimeMs, not LocalTimeMs.
    fetch = FetchRequest(max_wait_ms=400, min_bytes=1, max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
        topic="tiny", partitions=[FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                              partition_max_bytes=1 << 20)])])
    with RawClient(broker.bootstrap, timeout=10) as c:
        for _ in range(3):
            part = c.request(ApiKey.FETCH, 11, fetch).responses[0].partitions[0]
            assert part.error_code == 0 and not part.records
    s = scrape(url)
    assert value(s, "kafka_network_requestmetrics_remotetimems", request="Fetch", quantile="0.99") >= 300
    assert value(s, "kafka_network_requestmetrics_localtimems", request="Fetch", quantile="0.50") < 300


def test_batches_the_validator_refuses_count_in_kafkas_validation_meters(broker: BrokerProcess) -> None:
    """Kafka's all-topics meters of refused batches: a CRC that does not match, a record count that does not match
    the offsets and a producer id without a sequence, a record without a key on a compacted topic. One batch each
    here; the per-topic series do not have them (Kafka marks the all-topics ones). (A magic byte other than 2 is
    refused by the Produce handler before the validator, as Kafka's ProduceRequest does: not counted, as in Kafka.)"""
    with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic("vm-delete", 1, 1), NewTopic("vm-compact", 1, 1, configs={
            "cleanup.policy": "compact"})]).all().result(30)

    def batch(**kw: object) -> bytearray:
        b = MemoryRecordsBuilder(**kw)  # type: ignore[arg-type]
        b.append(1_700_000_000_000, None, b"v")
        return bytearray(b.build())

    bad_crc = batch()
    bad_crc[-1] ^= 1
    bad_count = batch()
    bad_count[60] = 2  # recordsCount 2, lastOffsetDelta 0
    bad_count[17:21] = compute_crc(bad_count, 0, len(bad_count)).to_bytes(4, "big")
    no_sequence = batch(producer_id=9, producer_epoch=0)
    sent = [("vm-delete", bad_crc, E.CORRUPT_MESSAGE), ("vm-delete", bad_count, E.INVALID_RECORD),
            ("vm-delete", no_sequence, E.INVALID_RECORD),
            ("vm-compact", batch(), E.INVALID_RECORD)]
    with RawClient(broker.bootstrap) as c:
        for topic, records, code in sent:
            r = c.request(ApiKey.PRODUCE, 9, ProduceRequest(acks=1, timeout_ms=5000, topic_data=[
                ProduceRequest.TopicProduceData(name=topic, partition_data=[
                    ProduceRequest.PartitionProduceData(index=0, records=bytes(records))])]))
            assert r.responses[0].partition_responses[0].error_code == code
    s = scrape(broker.metrics_url)  # type: ignore[attr-defined]
    assert [value(s, f"kafka_server_brokertopicmetrics_{m}_total") for m in (
        "invalidmessagecrcrecords", "invalidoffsetorsequencerecords", "nokeycompactedtopicrecords")] == [1, 2, 1]
    assert value(s, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic="vm-delete") == 3
    assert not [n for (n, labels) in s if "nokeycompacted" in n and labels]  # all topics only


def test_a_failed_acks_0_produce_closes_the_connection_and_counts_its_error(broker: BrokerProcess) -> None:
    """An acks=0 producer gets no response, so Kafka closes the connection when its produce fails (the client
    reconnects and refreshes its metadata); the request still counts, with its error. A produce that succeeds keeps
    the connection."""
    with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic("acks0", 1, 1, configs={"cleanup.policy": "compact"})]).all().result(30)

    def produce0(key: bytes | None) -> ProduceRequest:
        b = MemoryRecordsBuilder()
        b.append(1_700_000_000_000, key, b"v")
        return ProduceRequest(acks=0, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
            name="acks0", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=bytes(b.build()))])])

    before = value(scrape(broker.metrics_url), "kafka_network_requestmetrics_errors_total",  # type: ignore[attr-defined]
                   request="Produce", error="INVALID_RECORD")
    with RawClient(broker.bootstrap, timeout=10) as c:
        c.send(ApiKey.PRODUCE, 9, produce0(b"k"), expect_response=False)
        assert c.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t",
                                                                    client_software_version="1")).error_code == 0
        c.send(ApiKey.PRODUCE, 9, produce0(None), expect_response=False)  # no key on a compacted topic
        assert c.is_closed_by_peer(10)
    s = scrape(broker.metrics_url)  # type: ignore[attr-defined]
    assert value(s, "kafka_network_requestmetrics_errors_total", request="Produce", error="INVALID_RECORD") == \
        before + 1
    assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic="acks0") == 1


def test_bad_prometheus_listener_is_a_one_line_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    def run(*overrides: str) -> subprocess.CompletedProcess[str]:
        args = [sys.executable, "-m", "strom.cli.main", "broker", "--override", f"log.dirs={tmp_path / 'd'}",
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}"]
        for o in overrides:
            args += ["--override", o]
        return subprocess.run(args, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)

    for bad in ("127.0.0.1:9404", "https://127.0.0.1:9404", "http://127.0.0.1", "http://127.0.0.1:99999",
                "http://127.0.0.1:9404/metrics"):
        out = run(f"metrics.prometheus.listener={bad}")
        assert out.returncode == 2, (bad, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "metrics.prometheus.listener" in lines[0], (bad, out.stderr)
    out = run("metrics.recording.level=LOUD")
    assert out.returncode == 2 and "metrics.recording.level" in out.stderr and "Traceback" not in out.stderr
    out = run("metric.reporters=no.such.Reporter")
    assert out.returncode == 2 and "metric.reporters" in out.stderr and "Traceback" not in out.stderr
    # A metrics port that is taken stops the start with the reason, before any partition is opened.
    with BrokerProcess(data_dir=tmp_path / "other") as other:
        out = run(f"metrics.prometheus.listener=http://127.0.0.1:{other.port}")
        assert out.returncode == 1 and "Cannot start the broker" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr


class FileReporter:
    """A ``metric.reporters`` plug-in the broker process loads by class name; it appends the names it is told
    about to ``<log.dirs>/reported.txt`` so the test can read them from outside."""

    def configure(self, configs: dict[str, str]) -> None:
        self.path = configs["log.dirs"] + "/reported.txt"

    def _write(self, metrics: list) -> None:  # type: ignore[type-arg]
        with open(self.path, "a") as f:
            f.writelines(f"{m.metric_name().group} {m.metric_name().name}\n" for m in metrics)

    def init(self, metrics: list) -> None:  # type: ignore[type-arg]
        self._write(metrics)

    def metric_change(self, metric: object) -> None:
        self._write([metric])

    def metric_removal(self, metric: object) -> None:
        pass

    def close(self) -> None:
        pass


def test_metric_reporters_hear_of_the_broker_metrics(tmp_path) -> None:  # type: ignore[no-untyped-def]
    reported = tmp_path / "data" / "reported.txt"
    with BrokerProcess(data_dir=tmp_path / "data",
                       overrides={"metric.reporters": f"{__name__}.FileReporter"}) as b:
        produce(b.bootstrap, "reported", 10)
        wait_until(lambda: reported.exists() and "BrokerTopicMetrics MessagesInPerSec" in reported.read_text(),
                   30, "the reporter to hear of MessagesInPerSec")
        names = set(reported.read_text().splitlines())
    assert {"ReplicaManager LeaderCount", "RequestMetrics RequestsPerSec", "KafkaController ActiveControllerCount",
            "socket-server-metrics connection-count"} <= names
