"""Client quotas end to end on a real broker process (KIP-13/55/124/219/546): AlterClientQuotas and
DescribeClientQuotas through strom's AdminClient, then raw clients that ignore throttle_time_ms (so only the
broker's own throttling holds them back) and confluent-kafka as a judge of what the broker tells clients.

The byte-rate checks use the broker's accounting, not the test's clock: the topic uses LogAppendTime, so each batch
carries the time the broker appended it, and the bytes appended over any stretch of the run are compared with the
quota over that stretch."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.admin.admin_client import AdminClient
from strom.admin.client_quotas import ClientQuotaAlteration, ClientQuotaEntity, ClientQuotaFilter
from strom.admin.client_quotas import ClientQuotaFilterComponent as Component
from strom.admin.models import NewTopic
from strom.broker_process import BrokerProcess, free_port
from strom.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.common.error_codes import ClusterAuthorizationFailedError, ErrorCode, InvalidRequestError
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages import (
    ApiVersionsRequest,
    FetchRequest,
    MetadataRequest,
    ProduceRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from strom.record import MemoryRecords, MemoryRecordsBuilder
from strom.testing.raw_client import RawClient

QUOTA = 100 * 1024  # bytes per second
WINDOW_S = 1
SAMPLES = 2
BATCH_VALUE = 8 * 1024
BROKER_PROPS = {"quota.window.num": str(SAMPLES), "quota.window.size.seconds": str(WINDOW_S),
                "log.message.timestamp.type": "LogAppendTime", "num.partitions": "1"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("quotas") / "data", overrides=BROKER_PROPS)
    b.start()
    try:
        yield b
    finally:
        b.stop()
        b.cleanup()


def admin_for(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "default.api.timeout.ms": 20000})


def set_quota(bootstrap: str, entity: dict[str, str | None], **values: float | None) -> None:
    admin = admin_for(bootstrap)
    try:
        admin.alter_client_quotas([ClientQuotaAlteration(ClientQuotaEntity(entity), [
            ClientQuotaAlteration.Op(k, v) for k, v in values.items()])]).all().result(20)
    finally:
        admin.close(5)


def batch(value_size: int = BATCH_VALUE, n: int = 1) -> bytes:
    builder = MemoryRecordsBuilder()
    for i in range(n):
        builder.append(1_700_000_000_000, b"k%d" % i, b"v" * value_size)
    return builder.build()


def produce_request(topic: str, records: bytes, acks: int = 1) -> ProduceRequest:
    return ProduceRequest(acks=acks, timeout_ms=10000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)])])


def produce_for(bootstrap: str, client_id: str, topic: str, seconds: float) -> list[int]:
    """Produce 8 KiB batches back to back for ``seconds`` (a load generator, not a measurement), ignoring
    throttle_time_ms as an old client would: the throttle times the broker sent."""
    records = batch()
    throttles = []
    with RawClient(bootstrap, client_id=client_id) as c:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            resp = c.request(ApiKey.PRODUCE, 8, produce_request(topic, records))
            assert resp.responses[0].partition_responses[0].error_code == ErrorCode.NONE
            throttles.append(resp.throttle_time_ms)
    return throttles


def fetch_request(topic: str, offset: int, max_bytes: int = 64 << 20) -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
                        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
                            partition=0, fetch_offset=offset, partition_max_bytes=max_bytes)])])


def appended_batches(bootstrap: str, topic: str) -> list[tuple[int, int]]:
    """(broker append time ms, batch bytes) of every batch of partition 0, read by an unthrottled client."""
    out: list[tuple[int, int]] = []
    offset = 0
    with RawClient(bootstrap, client_id="quota-test-reader") as c:
        while True:
            resp = c.request(ApiKey.FETCH, 11, fetch_request(topic, offset))
            part = resp.responses[0].partitions[0]
            assert part.error_code == ErrorCode.NONE
            batches = list(MemoryRecords(bytes(part.records or b"")).batches())
            for b in batches:
                out.append((b.max_timestamp, b.size_in_bytes))
                offset = b.last_offset + 1
            if offset >= part.high_watermark:
                return out


def max_bytes_over_stretches(batches: list[tuple[int, int]], stretch_ms: int) -> float:
    """The most bytes appended in any ``stretch_ms`` (sliding over the append times), per second of stretch."""
    worst = 0
    j = 0
    total = 0
    for i in range(len(batches)):
        while j < len(batches) and batches[j][0] < batches[i][0] + stretch_ms:
            total += batches[j][1]
            j += 1
        worst = max(worst, total)
        total -= batches[i][1]
    return worst * 1000.0 / stretch_ms


def create_topic(bootstrap: str, name: str) -> None:
    admin = admin_for(bootstrap)
    try:
        admin.create_topics([NewTopic(name, 1, 1, configs={"message.timestamp.type": "LogAppendTime"})]).all().result(20)
    finally:
        admin.close(5)


def test_producer_over_its_byte_rate_is_throttled_and_held_to_it(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "q-prod")
    create_topic(broker.bootstrap, "q-free")
    set_quota(broker.bootstrap, {"client-id": "slow-producer"}, producer_byte_rate=QUOTA)
    free: list[int] = []
    other = threading.Thread(target=lambda: free.extend(produce_for(broker.bootstrap, "free", "q-free", 4.0)))
    other.start()
    throttles = produce_for(broker.bootstrap, "slow-producer", "q-prod", 6.0)
    other.join(30)
    assert sum(1 for t in throttles if t > 0) >= 3, throttles  # the broker told the client, more than once
    assert free and all(t == 0 for t in free)  # another client id is not throttled
    appended = appended_batches(broker.bootstrap, "q-prod")
    span_ms = appended[-1][0] - appended[0][0]
    assert span_ms >= 4000, span_ms
    # After the first window (the burst a fresh sensor allows), every 2-second stretch stays within 20 % of the
    # quota by the broker's own append times, and so does the whole run.
    steady = [b for b in appended if b[0] >= appended[0][0] + WINDOW_S * 1000]
    assert max_bytes_over_stretches(steady, SAMPLES * WINDOW_S * 1000) <= QUOTA * 1.2
    whole = sum(size for _, size in appended[1:]) * 1000.0 / span_ms
    assert whole <= QUOTA * 1.2, whole


def fetch_for(bootstrap: str, client_id: str, topic: str, end_offset: int, deadline_s: float,
              ) -> tuple[list[tuple[int, int]], int]:
    """Fetch from offset 0 with a raw client that ignores throttle_time_ms, until ``end_offset`` or the deadline:
    ([(throttle_time_ms, bytes) per response], offsets read)."""
    out: list[tuple[int, int]] = []
    offset = 0
    with RawClient(bootstrap, client_id=client_id) as c:
        end = time.monotonic() + deadline_s
        while offset < end_offset and time.monotonic() < end:
            resp = c.request(ApiKey.FETCH, 11, fetch_request(topic, offset))
            size = 0
            for t in resp.responses:
                for p in t.partitions:
                    assert p.error_code == ErrorCode.NONE
                    for b in MemoryRecords(bytes(p.records or b"")).batches():
                        size += b.size_in_bytes
                        offset = b.last_offset + 1
            out.append((resp.throttle_time_ms, size))
    return out, offset


def test_consumer_over_its_byte_rate_is_throttled_and_held_to_it(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "q-fetch")
    with RawClient(broker.bootstrap, client_id="filler") as c:
        for _ in range(100):  # 100 batches of 8 KiB, about 800 KiB
            resp = c.request(ApiKey.PRODUCE, 8, produce_request("q-fetch", batch()))
            assert resp.throttle_time_ms == 0
    end_offset = 100
    set_quota(broker.bootstrap, {"client-id": "slow-consumer"}, consumer_byte_rate=QUOTA)
    started = time.monotonic()
    responses, read = fetch_for(broker.bootstrap, "slow-consumer", "q-fetch", end_offset, 60.0)
    elapsed_s = time.monotonic() - started
    assert read == end_offset  # throttled, not starved: every record arrives
    throttled = [size for t, size in responses if t > 0]
    assert len(throttled) >= 3 and all(size == 0 for size in throttled)  # a throttled fetch carries no data
    # No answer carries more than one quota window's bytes (plus the one batch a fetch always may return) ...
    assert max(size for _, size in responses) <= QUOTA * (SAMPLES - 1) * WINDOW_S + len(batch())
    # ... and the whole read took long enough for its bytes to fit the quota (the first window's burst aside).
    total = sum(size for _, size in responses)
    assert total <= QUOTA * 1.2 * (elapsed_s + WINDOW_S), (total, elapsed_s)
    free, read_free = fetch_for(broker.bootstrap, "free-consumer", "q-fetch", end_offset, 60.0)
    assert read_free == end_offset and all(t == 0 for t, _ in free)


def test_confluent_kafka_reports_the_throttle(broker: BrokerProcess) -> None:
    from confluent_kafka import Producer

    set_quota(broker.bootstrap, {"client-id": "ck-throttled"}, producer_byte_rate=20 * 1024)
    events: list[tuple[str, int]] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "ck-throttled", "linger.ms": 5,
                         "throttle_cb": lambda e: events.append((e.broker_name, e.throttle_time))})
    try:
        deadline = time.monotonic() + 30
        while not any(t > 0 for _, t in events) and time.monotonic() < deadline:
            for _ in range(50):
                try:
                    producer.produce("q-ck", b"x" * 1024)
                except BufferError:
                    break
            producer.poll(0.1)
        assert any(t > 0 for _, t in events), events
    finally:
        producer.purge()
        producer.flush(10)


def test_request_percentage_throttles_any_api(broker: BrokerProcess) -> None:
    """request_percentage (KIP-124): the time the broker spends on a client's requests, as a percentage of one
    quota window, is bounded; a Metadata storm over 0.01 % is told to back off, for at most one window."""
    set_quota(broker.bootstrap, {"client-id": "busy"}, request_percentage=0.01)
    request = MetadataRequest(topics=None)
    with RawClient(broker.bootstrap, client_id="busy") as busy, RawClient(broker.bootstrap, client_id="idle") as idle:
        throttles: list[int] = []
        while len(throttles) < 30 and not any(throttles):  # until told to back off (then muted that long)
            throttles.append(busy.request(ApiKey.METADATA, 9, request).throttle_time_ms)
        assert any(t > 0 for t in throttles) and max(throttles) <= WINDOW_S * 1000, throttles
        assert all(idle.request(ApiKey.METADATA, 9, request).throttle_time_ms == 0 for _ in range(30))
        # ApiVersions is exempt, as in Kafka
        assert busy.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
            client_software_name="t", client_software_version="1")).throttle_time_ms == 0
    set_quota(broker.bootstrap, {"client-id": "busy"}, request_percentage=None)


def test_confluent_kafka_consumer_is_throttled_and_still_reads_everything(broker: BrokerProcess) -> None:
    """librdkafka sees the throttle of an emptied Fetch (throttle_cb and its statistics) and keeps consuming."""
    import json as _json

    from confluent_kafka import Consumer, TopicPartition

    create_topic(broker.bootstrap, "q-ck-fetch")
    with RawClient(broker.bootstrap, client_id="filler") as c:
        for _ in range(40):  # 40 x 8 KiB
            assert c.request(ApiKey.PRODUCE, 8, produce_request("q-ck-fetch", batch())).throttle_time_ms == 0
    set_quota(broker.bootstrap, {"client-id": "ck-consumer"}, consumer_byte_rate=50 * 1024)
    throttles: list[int] = []
    stats_throttle: list[float] = []

    def on_stats(text: str) -> None:
        for b in _json.loads(text).get("brokers", {}).values():
            if b.get("throttle", {}).get("max", 0) > 0:
                stats_throttle.append(b["throttle"]["max"])

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": "ck-consumer", "group.id": "ck-q",
                         "enable.auto.commit": False, "statistics.interval.ms": 200, "stats_cb": on_stats,
                         "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    try:
        consumer.assign([TopicPartition("q-ck-fetch", 0, 0)])
        got = 0
        deadline = time.monotonic() + 60
        while (got < 40 or not stats_throttle) and time.monotonic() < deadline:
            got += sum(1 for m in consumer.consume(100, 0.2) if m.error() is None)
        assert got == 40
        assert any(t > 0 for t in throttles), throttles
        assert stats_throttle  # librdkafka's per-broker throttle statistics saw it too
    finally:
        consumer.close()


def test_describe_filters_and_validation(broker: BrokerProcess) -> None:
    admin = admin_for(broker.bootstrap)
    try:
        alice_c1 = ClientQuotaEntity({"user": "alice", "client-id": "c1"})
        alice_default = ClientQuotaEntity({"user": "alice", "client-id": None})
        default_user = ClientQuotaEntity({"user": None})
        clients_c9 = ClientQuotaEntity({"client-id": "c9"})
        admin.alter_client_quotas([
            ClientQuotaAlteration(alice_c1, [ClientQuotaAlteration.Op("producer_byte_rate", 1024)]),
            ClientQuotaAlteration(alice_default, [ClientQuotaAlteration.Op("consumer_byte_rate", 2048)]),
            ClientQuotaAlteration(default_user, [ClientQuotaAlteration.Op("request_percentage", 50.5)]),
            ClientQuotaAlteration(clients_c9, [ClientQuotaAlteration.Op("producer_byte_rate", 4096)]),
        ]).all().result(20)
        everything = admin.describe_client_quotas().result(20)
        assert everything[alice_c1] == {"producer_byte_rate": 1024.0}
        assert everything[alice_default] == {"consumer_byte_rate": 2048.0}
        assert everything[default_user] == {"request_percentage": 50.5}
        assert everything[clients_c9] == {"producer_byte_rate": 4096.0}
        alice = admin.describe_client_quotas(ClientQuotaFilter.contains([Component.of_entity("user", "alice")])
                                             ).result(20)
        assert set(alice) == {alice_c1, alice_default}
        assert admin.describe_client_quotas(ClientQuotaFilter.contains_only(
            [Component.of_entity("user", "alice")])).result(20) == {}  # strict: no user-only entity for alice
        assert set(admin.describe_client_quotas(ClientQuotaFilter.contains_only(
            [Component.of_default_entity("user")])).result(20)) == {default_user}
        client_only = admin.describe_client_quotas(ClientQuotaFilter.contains_only(
            [Component.of_entity_type("client-id")])).result(20)
        assert clients_c9 in client_only and all(set(e.entries()) == {"client-id"} for e in client_only)
        # validate_only changes nothing; removing a key removes it
        admin.alter_client_quotas([ClientQuotaAlteration(clients_c9, [ClientQuotaAlteration.Op(
            "producer_byte_rate", 1)])], validate_only=True).all().result(20)
        admin.alter_client_quotas([ClientQuotaAlteration(alice_default, [ClientQuotaAlteration.Op(
            "consumer_byte_rate", None)])]).all().result(20)
        after = admin.describe_client_quotas().result(20)
        assert after[clients_c9] == {"producer_byte_rate": 4096.0} and alice_default not in after
        # bad input: one clear error per entry, nothing changed
        bad = [(clients_c9, "foo", 1.0, "Invalid configuration key foo"),
               (clients_c9, "producer_byte_rate", -1.0, "must be greater than 0"),
               (clients_c9, "producer_byte_rate", 1.5, "cannot be a fractional value"),
               (ClientQuotaEntity({"group": "g"}), "producer_byte_rate", 1.0, "Unhandled client quota entity type"),
               (ClientQuotaEntity({}), "producer_byte_rate", 1.0, "empty client quota entity")]
        for entity, key, value, message in bad:
            with pytest.raises(InvalidRequestError, match=message):
                admin.alter_client_quotas([ClientQuotaAlteration(entity, [ClientQuotaAlteration.Op(key, value)])]
                                          ).all().result(20)
        assert admin.describe_client_quotas().result(20)[clients_c9] == {"producer_byte_rate": 4096.0}
        with pytest.raises(InvalidRequestError, match="Custom entity type 'group' not supported"):
            admin.describe_client_quotas(ClientQuotaFilter.contains([Component.of_entity("group", "g")])).result(20)
        admin.alter_client_quotas([ClientQuotaAlteration(default_user, [ClientQuotaAlteration.Op(
            "request_percentage", None)])]).all().result(20)  # the other tests' clients are ANONYMOUS users
    finally:
        admin.close(5)


def strom_configs(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", "configs", "--bootstrap-server", broker.bootstrap,
                           *args], capture_output=True, text=True, timeout=120)


def test_configs_cli_manages_quotas_with_kafkas_syntax(broker: BrokerProcess) -> None:
    r = strom_configs(broker, "--alter", "--add-config", "producer_byte_rate=1024", "--entity-type", "clients",
                      "--entity-name", "cli-c1")
    assert r.returncode == 0 and r.stdout == "Completed updating config for client cli-c1.\n", r.stderr
    r = strom_configs(broker, "--describe", "--entity-type", "clients", "--entity-name", "cli-c1")
    assert r.stdout == "Quota configs for client-id 'cli-c1' are producer_byte_rate=1024.0\n", r.stderr
    r = strom_configs(broker, "--alter", "--add-config", "consumer_byte_rate=2097152,request_percentage=25.5",
                      "--entity-type", "users", "--entity-name", "cli-alice", "--entity-type", "clients",
                      "--entity-default")
    assert r.returncode == 0 and r.stdout == "Completed updating config for user cli-alice.\n", r.stderr
    r = strom_configs(broker, "--describe", "--user", "cli-alice", "--client-defaults")
    assert r.stdout == ("Quota configs for user-principal 'cli-alice', the default client-id are "
                        "consumer_byte_rate=2097152.0, request_percentage=25.5\n"), r.stderr
    r = strom_configs(broker, "--alter", "--add-config", "producer_byte_rate=10485760", "--entity-type", "users",
                      "--entity-default")
    assert r.returncode == 0 and r.stdout == "Completed updating default config for users in the cluster.\n"
    r = strom_configs(broker, "--describe", "--entity-type", "users", "--entity-default")
    assert r.stdout == "Quota configs for the default user-principal are producer_byte_rate=1.048576E7\n"
    listing = strom_configs(broker, "--describe", "--entity-type", "clients").stdout
    assert "Quota configs for client-id 'cli-c1' are producer_byte_rate=1024.0" in listing
    assert "cli-alice" not in listing  # strict: user+client entities are not client entities
    r = strom_configs(broker, "--alter", "--delete-config", "producer_byte_rate", "--entity-type", "clients",
                      "--entity-name", "cli-c1")
    assert r.returncode == 0
    assert strom_configs(broker, "--describe", "--client", "cli-c1").stdout == ""
    # bad input: one line, non-zero exit, nothing changed
    r = strom_configs(broker, "--alter", "--delete-config", "request_percentage", "--client", "cli-c1")
    assert r.returncode == 1 and r.stderr.strip().endswith("Invalid config(s): request_percentage")
    r = strom_configs(broker, "--alter", "--add-config", "retention.ms=5", "--client", "cli-c1")
    assert r.returncode == 2 and "Only quota configs can be added for 'clients'" in r.stderr
    r = strom_configs(broker, "--alter", "--add-config", "producer_byte_rate=-5", "--client", "cli-c1")
    assert r.returncode == 1 and "INVALID_REQUEST: Quota producer_byte_rate must be greater than 0" in r.stderr
    r = strom_configs(broker, "--alter", "--add-config", "producer_byte_rate=fast", "--client", "cli-c1")
    assert r.returncode == 2 and "Cannot parse quota configuration value for producer_byte_rate: fast" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    strom_configs(broker, "--alter", "--delete-config", "producer_byte_rate", "--user-defaults")


def test_quotas_survive_a_restart(tmp_path: Path) -> None:
    b = BrokerProcess(data_dir=tmp_path / "data", overrides=BROKER_PROPS)
    b.start()
    try:
        create_topic(b.bootstrap, "q-restart")
        set_quota(b.bootstrap, {"client-id": "kept"}, producer_byte_rate=10 * 1024)
        b.restart()
        admin = admin_for(b.bootstrap)
        try:
            assert admin.describe_client_quotas().result(20) == {
                ClientQuotaEntity({"client-id": "kept"}): {"producer_byte_rate": 10240.0}}
        finally:
            admin.close(5)
        # and it is enforced: 8 KiB batches against 10 KiB/s are throttled within a few requests
        with RawClient(b.bootstrap, client_id="kept") as c:
            throttles = [c.request(ApiKey.PRODUCE, 8, produce_request("q-restart", batch())).throttle_time_ms
                         for _ in range(4)]
        assert any(t > 0 for t in throttles), throttles
    finally:
        b.stop()
        b.cleanup()


JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required user_admin=\"admin-pw\" "
        "user_alice=\"alice-pw\" user_bob=\"bob-pw\";")


def sasl_raw(bootstrap: str, user: str, client_id: str) -> RawClient:
    c = RawClient(bootstrap, client_id=client_id, timeout=20)
    assert c.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
    auth = c.request(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{user}-pw".encode()))
    assert auth.error_code == 0, auth.error_message
    return c


def test_user_quotas_precedence_and_authorization(tmp_path: Path) -> None:
    port = free_port()
    b = BrokerProcess(data_dir=tmp_path / "data", port=port, overrides={
        **BROKER_PROPS, "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "security.inter.broker.protocol": "SASL_PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": JAAS, "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin"}).start(timeout=60)

    def admin(user: str) -> AdminClient:
        return AdminClient({"bootstrap.servers": b.bootstrap, "default.api.timeout.ms": 15000,
                            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
                            "sasl.password": f"{user}-pw"})

    def burst(user: str, client_id: str) -> list[int]:
        records = batch(64 * 1024)
        with sasl_raw(b.bootstrap, user, client_id) as c:
            throttles: list[int] = []
            while len(throttles) < 6 and not any(throttles):  # stop once throttled (muted that long after)
                throttles.append(c.request(ApiKey.PRODUCE, 8, produce_request("q-auth", records)).throttle_time_ms)
            return throttles

    root, alice = admin("admin"), admin("alice")
    try:
        root.create_topics([NewTopic("q-auth", 1, 1)]).all().result(20)
        root.create_acls([AclBinding(ResourcePattern(ResourceType.TOPIC, "q-auth", PatternType.LITERAL),
                                     AccessControlEntry(f"User:{u}", "*", AclOperation.WRITE,
                                                        AclPermissionType.ALLOW)) for u in ("alice", "bob")]
                         ).all().result(20)
        # alice may neither change nor read quotas without ALTER_CONFIGS / DESCRIBE_CONFIGS on the cluster
        entity = ClientQuotaEntity({"user": "alice"})
        with pytest.raises(ClusterAuthorizationFailedError):
            alice.alter_client_quotas([ClientQuotaAlteration(entity, [ClientQuotaAlteration.Op(
                "producer_byte_rate", 1)])]).all().result(20)
        with pytest.raises(ClusterAuthorizationFailedError):
            alice.describe_client_quotas().result(20)
        root.alter_client_quotas([
            ClientQuotaAlteration(entity, [ClientQuotaAlteration.Op("producer_byte_rate", 10 * 1024)]),
            ClientQuotaAlteration(ClientQuotaEntity({"user": "alice", "client-id": "exempt"}),
                                  [ClientQuotaAlteration.Op("producer_byte_rate", 1e12)]),
        ]).all().result(20)
        assert root.describe_client_quotas().result(20)[entity] == {"producer_byte_rate": 10240.0}
        assert max(burst("alice", "any-client")) > 0  # users/alice applies to every client id of alice
        assert max(burst("alice", "exempt")) == 0  # users/alice/clients/exempt is more specific
        assert max(burst("bob", "any-client")) == 0  # bob has no quota
        root.create_acls([AclBinding(ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
                                     AccessControlEntry("User:alice", "*", AclOperation.DESCRIBE_CONFIGS,
                                                        AclPermissionType.ALLOW))]).all().result(20)
        assert alice.describe_client_quotas().result(20)[entity] == {"producer_byte_rate": 10240.0}
        with pytest.raises(ClusterAuthorizationFailedError):  # describing is not altering
            alice.alter_client_quotas([ClientQuotaAlteration(entity, [ClientQuotaAlteration.Op(
                "producer_byte_rate", None)])]).all().result(20)
        assert root.describe_client_quotas().result(20)[entity] == {"producer_byte_rate": 10240.0}
    finally:
        root.close(5)
        alice.close(5)
        b.stop()
        b.cleanup()


def test_controller_mutation_rate_refuses_then_retries_topic_creation(broker: BrokerProcess) -> None:
    """KIP-599: ``controller_mutation_rate`` = 2 partitions/s over 2 windows of 1 s is a bucket of 4 partitions for
    client id "mutator". One creation may empty it (6 partitions go through), the next is refused per topic with
    THROTTLING_QUOTA_EXCEEDED and the time the bucket needs; strom's AdminClient waits that long and sends it
    again (Kafka's retryOnQuotaViolation). Another client id is not held back; an old DeleteTopics version that
    cannot carry the error is carried out and throttled."""
    from strom.common.error_codes import ThrottlingQuotaExceededError
    from strom.protocol.messages import DeleteTopicsRequest

    set_quota(broker.bootstrap, {"client-id": "mutator"}, controller_mutation_rate=2.0)
    mutator = AdminClient({"bootstrap.servers": broker.bootstrap, "client.id": "mutator",
                           "default.api.timeout.ms": 20000})
    bystander = AdminClient({"bootstrap.servers": broker.bootstrap, "client.id": "bystander"})
    try:
        mutator.create_topics([NewTopic("mutations-a", 6, 1)], retry_on_quota_violation=False).all().result(20)
        refused = mutator.create_topics([NewTopic("mutations-b", 1, 1)], retry_on_quota_violation=False)
        with pytest.raises(ThrottlingQuotaExceededError) as info:
            refused.all().result(20)
        assert 0 < info.value.throttle_time_ms <= 1000  # 2 missing tokens at 2 per second
        assert "mutations-b" not in mutator.list_topics().names().result(20)
        bystander.create_topics([NewTopic("mutations-c", 3, 1)], retry_on_quota_violation=False).all().result(20)
        mutator.create_topics([NewTopic("mutations-b", 1, 1)]).all().result(20)  # retried after the throttle
        assert {"mutations-a", "mutations-b", "mutations-c"} <= set(mutator.list_topics().names().result(20))
    finally:
        mutator.close(5)
        bystander.close(5)
    with RawClient(broker.bootstrap, client_id="mutator") as c:
        old = c.request(ApiKey.DELETE_TOPICS, 4, DeleteTopicsRequest(topic_names=["mutations-a"], timeout_ms=10000))
        assert [(r.name, r.error_code) for r in old.responses] == [("mutations-a", ErrorCode.NONE)]
        assert old.throttle_time_ms > 0  # 6 partitions deleted from a bucket that was just about empty
    set_quota(broker.bootstrap, {"client-id": "mutator"}, controller_mutation_rate=None)


def test_connection_creation_rate_of_an_ip(broker: BrokerProcess) -> None:
    """KIP-612: ``connection_creation_rate`` = 2 per second for 127.0.0.2 (over 2 windows of 1 s). Connections
    from that address beyond the rate are held unanswered, then closed by the broker; 127.0.0.1 (the admin
    client's address) is not held back; once the quota is raised the address connects again. Managed with the
    CLI's ``--entity-type ips`` and described back."""
    from strom.protocol.messages import ApiVersionsRequest as AV

    def configs(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "strom.cli.main", "configs", "--bootstrap-server",
                               broker.bootstrap, *args], capture_output=True, text=True, timeout=60)

    done = configs("--alter", "--entity-type", "ips", "--entity-name", "127.0.0.2", "--add-config",
                   "connection_creation_rate=2")
    assert done.returncode == 0 and "Completed updating config for ip 127.0.0.2." in done.stdout, done.stderr
    shown = configs("--describe", "--entity-type", "ips")
    assert "Quota configs for ip '127.0.0.2' are connection_creation_rate=2.0" in shown.stdout, shown.stderr
    refused = configs("--alter", "--entity-type", "ips", "--entity-name", "127.0.0.2", "--add-config",
                      "producer_byte_rate=5")
    assert refused.returncode != 0 and "Only connection quota configs" in refused.stderr
    try:
        answered, closed = 0, 0
        for _ in range(6):  # at once: more than 2 per second
            with RawClient(broker.bootstrap, client_id="ip-quota", timeout=10, source_host="127.0.0.2") as c:
                try:
                    c.request(ApiKey.API_VERSIONS, 3, AV(client_software_name="t", client_software_version="1"))
                    answered += 1
                except ConnectionError:
                    closed += 1  # accepted, never answered, closed after the throttle time
        assert answered >= 1 and closed >= 3, (answered, closed)
        with RawClient(broker.bootstrap, client_id="ip-quota") as c:  # another address: not limited
            assert c.request(ApiKey.API_VERSIONS, 3, AV(client_software_name="t", client_software_version="1"))
    finally:
        assert configs("--alter", "--entity-type", "ips", "--entity-name", "127.0.0.2", "--delete-config",
                       "connection_creation_rate").returncode == 0
    with RawClient(broker.bootstrap, client_id="ip-quota", timeout=10, source_host="127.0.0.2") as c:
        assert c.request(ApiKey.API_VERSIONS, 3, AV(client_software_name="t", client_software_version="1"))


def test_max_connection_creation_rate_delays_accepting(tmp_path: Path) -> None:
    """A listener's ``max.connection.creation.rate`` = 2 per second (2 windows of 1 s; the broker-wide setting
    spares the inter-broker listener, which the harness's single listener is): six connections opened at once
    are all served (none is refused), but the broker stops accepting while over the rate, so the last answer
    comes at least about 1.5 s after the first connection (a lower bound: a slow machine only adds to it)."""
    from strom.protocol.messages import ApiVersionsRequest as AV

    b = BrokerProcess(data_dir=tmp_path / "data", overrides={
        "listener.name.plaintext.max.connection.creation.rate": "2", "quota.window.num": "2",
        "quota.window.size.seconds": "1"})
    b.start()  # the harness's own readiness checks used connections too: let their windows pass
    try:
        time.sleep(2.1)
        start = time.monotonic()
        clients = [RawClient(b.bootstrap, client_id=f"c{i}", timeout=30) for i in range(6)]
        try:
            for c in clients:
                c.send(ApiKey.API_VERSIONS, 3, AV(client_software_name="t", client_software_version="1"))
            answers = [c.receive() for c in clients]
        finally:
            for c in clients:
                c.close()
        elapsed = time.monotonic() - start
        assert all(a.error_code == ErrorCode.NONE for a in answers)
        assert elapsed >= 1.4, elapsed
    finally:
        b.stop()
        b.cleanup()
