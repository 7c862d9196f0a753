"""Client metrics (KIP-714) with librdkafka as the judge: a subscription set with ``strom configs --entity-type
client-metrics`` makes confluent-kafka clients that match it push their metrics, which the broker serves on its
Prometheus endpoint labelled by client; a client that does not match pushes nothing; a closed client's series go.
Without a metrics endpoint the broker does not offer the telemetry APIs."""

from __future__ import annotations

import gc
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer

from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.api_versions import ApiVersionsRequest
from strom.protocol.messages.get_telemetry_subscriptions import GetTelemetrySubscriptionsRequest
from strom.testing.broker_process import BrokerProcess, free_port
from strom.testing.cluster import wait_until
from strom.testing.raw_client import RawClient
from tests.integration.test_broker_metrics import Series, scrape

pytestmark = [pytest.mark.interop, pytest.mark.timeout(180)]

CLI = [sys.executable, "-m", "strom.cli.main"]


def configs(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "configs", "--bootstrap-server", bootstrap, "--entity-type", "client-metrics",
                           *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.fixture
def metrics_broker(tmp_path) -> Iterator[BrokerProcess]:  # type: ignore[no-untyped-def]
    b = BrokerProcess(data_dir=tmp_path / "data",
                      overrides={"metrics.prometheus.listener": f"http://127.0.0.1:{free_port()}"})
    b.start()
    b.metrics_url = b.overrides["metrics.prometheus.listener"] + "/metrics"  # type: ignore[attr-defined]
    yield b
    b.stop()
    b.cleanup()


def _client_series(series: Series, client_id: str) -> dict[str, dict[str, str]]:
    """Pushed series of one client: name -> labels."""
    return {name: dict(labels) for (name, labels), _v in series.items()
            if name.startswith("org_apache_kafka_") and ("client_id", client_id) in labels}


def test_confluent_kafka_pushes_the_metrics_it_is_subscribed_to(metrics_broker: BrokerProcess) -> None:
    b = metrics_broker
    url = b.metrics_url  # type: ignore[attr-defined]
    r = configs(b.bootstrap, "--entity-name", "producers", "--alter", "--add-config",
                "metrics=[org.apache.kafka.producer.],interval.ms=500,match=[client_id=tele-.*]")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Completed updating config for client-metric producers."
    r = configs(b.bootstrap, "--entity-name", "producers", "--describe")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "Dynamic configs for client-metric producers are:",
        "  interval.ms=500 sensitive=false synonyms={}",
        "  match=client_id=tele-.* sensitive=false synonyms={}",
        "  metrics=org.apache.kafka.producer. sensitive=false synonyms={}"]

    producers = [Producer({"bootstrap.servers": b.bootstrap, "client.id": "tele-p", "linger.ms": 0})]
    p = producers[0]
    c = Consumer({"bootstrap.servers": b.bootstrap, "client.id": "other-c", "group.id": "g-tele"})
    try:
        c.subscribe(["tele"])
        for i in range(50):
            p.produce("tele", b"v%d" % i)
            p.poll(0)
        assert p.flush(30) == 0
        pushed: dict[str, dict[str, str]] = {}

        def producer_pushed() -> bool:
            nonlocal pushed
            producers[0].poll(0.1)
            c.poll(0.1)
            pushed = _client_series(scrape(url), "tele-p")
            return any(n.startswith("org_apache_kafka_producer_") for n in pushed)

        wait_until(producer_pushed, 30, "the producer's pushed metrics on the broker's /metrics")
        labels = next(iter(pushed.values()))
        assert labels["client_software_name"] == "confluent-kafka-python"
        uuid.UUID(labels["client_instance_id"])  # the instance id the broker gave it
        assert all(n.startswith("org_apache_kafka_producer_") for n in pushed), sorted(pushed)
        latency = pushed.get("org_apache_kafka_producer_node_request_latency_avg")
        assert latency is not None and latency["node_id"] == "1", sorted(pushed)
        # The consumer (client id other-c) matches no subscription: it was asked for nothing, so it pushed nothing.
        for _ in range(10):
            c.poll(0.1)
        series = scrape(url)
        assert _client_series(series, "other-c") == {}
        assert series[("kafka_server_client_metrics_instance_count", frozenset())] >= 2.0  # both asked
    finally:
        c.close()
    # A producer's destruction sends its last push, "terminating": the broker forgets it and its series go.
    del p
    producers.clear()
    gc.collect()
    wait_until(lambda: not _client_series(scrape(url), "tele-p"), 30, "the closed producer's series to go")


def test_subscriptions_are_validated_and_survive_a_restart(fresh_broker: BrokerProcess) -> None:
    b = fresh_broker
    b.start()
    r = configs(b.bootstrap, "--entity-name", "s", "--alter", "--add-config", "interval.ms=5")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip() == "Error while executing config command: INVALID_REQUEST: Invalid value 5 for " \
        "interval.ms, interval must be between 100 and 3600000"
    r = configs(b.bootstrap, "--entity-name", "s", "--alter", "--add-config", "match=[colour=red]")
    assert r.returncode == 1 and "INVALID_CONFIG: Invalid client matching key colour" in r.stderr
    r = configs(b.bootstrap, "--describe")
    assert r.returncode == 2 and "An entity name must be specified" in r.stderr
    assert configs(b.bootstrap, "--entity-name", "s", "--alter", "--add-config",
                   "metrics=[org.apache.kafka.],interval.ms=1000").returncode == 0
    b.stop()
    b.start()
    r = configs(b.bootstrap, "--entity-name", "s", "--describe")
    assert r.returncode == 0 and "  interval.ms=1000 sensitive=false synonyms={}" in r.stdout.splitlines(), r.stdout
    assert configs(b.bootstrap, "--entity-name", "s", "--alter", "--delete-config",
                   "metrics,interval.ms").returncode == 0
    r = configs(b.bootstrap, "--entity-name", "s", "--describe")
    assert r.returncode == 0 and r.stdout.splitlines() == ["Dynamic configs for client-metric s are:"]
    b.stop()


def test_without_a_metrics_endpoint_the_telemetry_apis_are_not_offered(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as rc:
        keys = {k.api_key for k in rc.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
            client_software_name="t", client_software_version="1")).api_keys}
        assert ApiKey.PRODUCE in keys and ApiKey.GET_TELEMETRY_SUBSCRIPTIONS not in keys
        assert ApiKey.PUSH_TELEMETRY not in keys
        r = rc.request(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, GetTelemetrySubscriptionsRequest())
        assert r.error_code == ErrorCode.UNSUPPORTED_VERSION


def test_strom_clients_push_their_metrics_and_a_last_one_on_close(metrics_broker: BrokerProcess) -> None:
    """strom's producer, consumer and admin client push as Java's clients do (``enable.metrics.push``, default on),
    each telling its instance id through ``client_instance_id()``."""
    from strom import KafkaConsumer, KafkaProducer
    from strom.admin import AdminClient
    from strom.common.errors import IllegalStateError

    b = metrics_broker
    url = b.metrics_url  # type: ignore[attr-defined]
    assert configs(b.bootstrap, "--entity-name", "strom-clients", "--alter", "--add-config",
                   "metrics=[org.apache.kafka.],interval.ms=300,match=[client_software_name=strom]").returncode == 0
    common = {"bootstrap.servers": b.bootstrap}
    producer = KafkaProducer({**common, "client.id": "s-prod", "key.serializer": "bytes", "value.serializer": "bytes"})
    consumer = KafkaConsumer({**common, "client.id": "s-cons", "group.id": "s-g", "auto.offset.reset": "earliest",
                              "key.deserializer": "bytes", "value.deserializer": "bytes"})
    admin = AdminClient({**common, "client.id": "s-admin"})
    quiet = KafkaProducer({**common, "client.id": "s-quiet", "enable.metrics.push": False,
                           "key.serializer": "bytes", "value.serializer": "bytes"})
    try:
        with pytest.raises(IllegalStateError, match="enable.metrics.push"):
            quiet.client_instance_id(1)
        for i in range(20):
            producer.send("s-tele", b"%d" % i)
        producer.flush()
        consumer.subscribe(["s-tele"])
        ids = {"s-prod": producer.client_instance_id(10), "s-cons": consumer.client_instance_id(10),
               "s-admin": admin.client_instance_id(10)}
        assert len(set(ids.values())) == 3
        expected = {"s-prod": "org_apache_kafka_producer_record_send_total",
                    "s-cons": "org_apache_kafka_consumer_fetch_manager_records_consumed_total",
                    "s-admin": "org_apache_kafka_admin_client_connection_count"}
        found: dict[str, dict[str, str]] = {}
        records = 0

        def all_pushed() -> bool:
            nonlocal records
            records += consumer.poll(0.1).count()
            series = scrape(url)
            for client_id, name in expected.items():
                labels = _client_series(series, client_id).get(name)
                if labels is not None:
                    found[client_id] = labels
            # (the consumer's count is pushed as deltas, added up by the broker)
            return len(found) == 3 and series.get((expected["s-cons"], frozenset(found["s-cons"].items()))) == 20.0

        wait_until(all_pushed, 30, f"the strom clients' pushed metrics (found {sorted(found)})")
        assert records == 20
        for client_id, labels in found.items():
            assert labels["client_instance_id"] == str(ids[client_id])
            assert labels["client_software_name"] == "strom"
        assert _client_series(scrape(url), "s-quiet") == {}
    finally:
        producer.close()
        consumer.close()
        admin.close()
        quiet.close()
    # Each close sent a terminating push: the broker forgot the instances and their series.
    series = scrape(url)
    assert {c: _client_series(series, c) for c in expected} == {c: {} for c in expected}


def client_metrics(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "client-metrics", "--bootstrap-server", bootstrap, *args], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_the_client_metrics_tool(broker: BrokerProcess) -> None:
    """``strom client-metrics`` (kafka-client-metrics.sh): alter keeps the keys it is not given, describe shows the
    subscription, delete removes it; mistakes are one line and exit 2 (or 1 for what the broker refuses)."""
    b = broker
    r = client_metrics(b.bootstrap, "--alter", "--name", "cm", "--metrics", "org.apache.kafka.producer., "
                       "org.apache.kafka.consumer.", "--interval", "2000")
    assert (r.returncode, r.stdout) == (0, "Altered client metrics config for cm.\n"), r.stderr
    assert client_metrics(b.bootstrap, "--alter", "--name", "cm", "--match", "client_id=app.*").returncode == 0
    r = client_metrics(b.bootstrap, "--describe", "--name", "cm")
    assert r.returncode == 0 and r.stdout.splitlines() == [
        "Client metrics configs for cm are:", "  interval.ms=2000", "  match=client_id=app.*",
        "  metrics=org.apache.kafka.producer.,org.apache.kafka.consumer."]
    # the same resource as configs --entity-type client-metrics sees
    assert "  interval.ms=2000 sensitive=false synonyms={}" in configs(
        b.bootstrap, "--entity-name", "cm", "--describe").stdout.splitlines()
    r = client_metrics(b.bootstrap, "--alter", "--generate-name", "--metrics", "*")
    assert r.returncode == 0
    generated = r.stdout.strip().removeprefix("Altered client metrics config for ").removesuffix(".")
    assert client_metrics(b.bootstrap, "--describe", "--name", generated).stdout.splitlines()[1:] == ["  metrics=*"]
    r = client_metrics(b.bootstrap, "--delete", "--name", "cm")
    assert (r.returncode, r.stdout) == (0, "Deleted client metrics config for cm.\n")
    assert client_metrics(b.bootstrap, "--describe", "--name", "cm").stdout.splitlines() == [
        "Client metrics configs for cm are:"]
    for bad, needle in ((["--list"], "ListClientMetricsResources"), (["--describe"], "ListClientMetricsResources"),
                        (["--alter", "--name", "x"], "at least one of --metrics"),
                        (["--delete", "--name", "x", "--metrics", "a"], "go with --alter"),
                        (["--alter", "--metrics", "a"], "--name"), (["--name", "x"], "exactly one action")):
        r = client_metrics(b.bootstrap, *bad)
        assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, (bad, r.stderr)
    r = client_metrics(b.bootstrap, "--alter", "--name", "x", "--interval", "1")
    assert r.returncode == 1 and r.stderr.strip() == "Error while executing client metrics command: " \
        "INVALID_REQUEST: Invalid value 1 for interval.ms, interval must be between 100 and 3600000"
