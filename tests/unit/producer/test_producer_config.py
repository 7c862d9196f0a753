"""ProducerConfig: Java 3.x keys and defaults, acks/compression parsing, Kafka's cross-key validation."""

from __future__ import annotations

from typing import Any

import pytest

from strom.common.errors import ConfigError
from strom.common.serialization import ByteArraySerializer, IntegerSerializer, StringSerializer
from strom.producer.config import PRODUCER_CONFIG_DEF, ProducerConfig

pytestmark = pytest.mark.unit

BASE: dict[str, Any] = {
    "bootstrap.servers": "localhost:9092",
    "key.serializer": "org.apache.kafka.common.serialization.StringSerializer",
    "value.serializer": "org.apache.kafka.common.serialization.StringSerializer",
}


def cfg(**overrides: Any) -> ProducerConfig:
    return ProducerConfig(BASE, **overrides)


@pytest.mark.parametrize("missing", ["bootstrap.servers", "key.serializer", "value.serializer"])
def test_required_keys(missing: str) -> None:
    """§18 item 1: bootstrap.servers, key.serializer and value.serializer are required; the rest default."""
    configs = {k: v for k, v in BASE.items() if k != missing}
    with pytest.raises(ConfigError, match=f'Missing required configuration "{missing}"'):
        ProducerConfig(configs)
    ProducerConfig(BASE)  # nothing else needed


def test_java_3x_defaults() -> None:
    """§18 item 5 (and §15 #3 acks=all): defaults in effect unless overridden; linger.ms is 0 (Kafka 3.x)."""
    v = cfg().values
    expected = {
        "batch.size": 16384, "linger.ms": 0, "buffer.memory": 32 * 1024 * 1024, "max.request.size": 1024 * 1024,
        "max.block.ms": 60_000, "retry.backoff.ms": 100, "retry.backoff.max.ms": 1000, "request.timeout.ms": 30_000,
        "metadata.max.age.ms": 300_000, "metadata.max.idle.ms": 300_000, "connections.max.idle.ms": 540_000,
        "max.in.flight.requests.per.connection": 5, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 1000,
        "send.buffer.bytes": 131072, "receive.buffer.bytes": 32768, "compression.type": "none",
        "retries": 2**31 - 1, "acks": -1, "delivery.timeout.ms": 120_000, "enable.idempotence": True,
        "transaction.timeout.ms": 60_000, "transactional.id": None, "partitioner.class": None,
        "partitioner.ignore.keys": False, "partitioner.adaptive.partitioning.enable": True,
        "partitioner.availability.timeout.ms": 0, "interceptor.classes": [],
        "socket.connection.setup.timeout.ms": 10_000, "socket.connection.setup.timeout.max.ms": 30_000,
        "security.protocol": "PLAINTEXT", "client.dns.lookup": "use_all_dns_ips",
        "compression.gzip.level": -1, "compression.lz4.level": 9, "compression.zstd.level": 3,
        "metrics.num.samples": 2, "metrics.sample.window.ms": 30_000, "metrics.recording.level": "INFO",
    }
    for key, value in expected.items():
        assert v[key] == value, key
    assert v["key.serializer"] is StringSerializer
    assert v["bootstrap.servers"] == ["localhost:9092"]


@pytest.mark.parametrize("given, parsed", [("all", -1), ("ALL", -1), ("-1", -1), (-1, -1), ("0", 0), (0, 0),
                                           ("1", 1), (1, 1)])
def test_acks_values(given: Any, parsed: int) -> None:
    """§18 item 6: acks accepts 0, 1, -1 and "all" (≡ -1)."""
    assert cfg(acks=given)["acks"] == parsed


@pytest.mark.parametrize("bad", ["2", 2, "none", True])
def test_acks_rejects_others(bad: Any) -> None:
    """§18 item 6: other acks values are rejected naming the key."""
    with pytest.raises(ConfigError, match="for configuration acks: String must be one of: all, -1, 0, 1"):
        cfg(acks=bad)


@pytest.mark.parametrize("name", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compression_types(name: str) -> None:
    """§18 item 7: the five codecs are accepted."""
    c = cfg(compression_type=name)
    assert c["compression.type"] == name
    assert c.compression_type.config_name == name


def test_unknown_compression_rejected() -> None:
    """§18 item 7: an unknown codec name is rejected at construction."""
    with pytest.raises(ConfigError, match="Invalid value brotli for configuration compression.type"):
        cfg(compression_type="brotli")


def test_snake_case_keywords_and_mapping_access() -> None:
    """DESIGN §1 config: snake_case keywords; values is a read-only mapping; originals kept."""
    c = cfg(linger_ms="5", batch_size=1000, max_in_flight_requests_per_connection=1)
    assert c["linger.ms"] == 5 and c["linger_ms"] == 5 and c.values["batch.size"] == 1000
    assert "linger_ms" in c and "nope" not in c
    assert c.get("nope", 3) == 3
    assert c.originals["linger.ms"] == "5"
    with pytest.raises(TypeError):
        c.values["linger.ms"] = 1  # type: ignore[index]


def test_unknown_and_bad_values_name_the_key() -> None:
    """DESIGN §1 config: unknown keys and bad values are rejected naming the key."""
    with pytest.raises(ConfigError, match="Unknown configuration 'linger'"):
        cfg(linger=5)
    with pytest.raises(ConfigError, match="Invalid value -5 for configuration linger.ms: Value must be at least 0"):
        cfg(linger_ms=-5)
    with pytest.raises(ConfigError, match="Invalid value 4000 for configuration metadata.max.idle.ms"):
        cfg(metadata_max_idle_ms=4000)


def test_serializer_arguments_and_aliases() -> None:
    """SPEC §2.1 step 5 / §2.7: serializers given as arguments, aliases, classes, callables."""
    c = ProducerConfig({"bootstrap.servers": "h:1"}, key_serializer="int", value_serializer=ByteArraySerializer)
    assert c["key.serializer"] is IntegerSerializer and c["value.serializer"] is ByteArraySerializer
    fn = str.encode
    c = ProducerConfig({"bootstrap.servers": "h:1"}, key_serializer=fn, value_serializer=StringSerializer())
    assert c["key.serializer"] is fn


def test_explicit_idempotence_conflicts_raise() -> None:
    """SPEC §12 idempotence (Kafka 3.x): explicit enable.idempotence with conflicting acks/retries/in-flight fails."""
    with pytest.raises(ConfigError, match="Must set acks to all in order to use the idempotent producer"):
        cfg(enable_idempotence=True, acks=1)
    with pytest.raises(ConfigError, match="Must set retries to non-zero when using the idempotent producer."):
        cfg(enable_idempotence="true", retries=0)
    with pytest.raises(ConfigError, match="Must set max.in.flight.requests.per.connection to at most 5"):
        cfg(enable_idempotence=True, max_in_flight_requests_per_connection=6)


@pytest.mark.parametrize("override", [{"acks": 1}, {"acks": "0"}, {"retries": 0},
                                      {"max.in.flight.requests.per.connection": 6}])
def test_default_idempotence_silently_disabled(override: dict[str, Any]) -> None:
    """SPEC §12 idempotence (Kafka ≥ 3.0.1): default idempotence is disabled silently on conflicts."""
    c = ProducerConfig({**BASE, **override})
    assert c["enable.idempotence"] is False and not c.idempotence_enabled


def test_transactional_id_requires_idempotence() -> None:
    """SPEC §12 transactions: transactional.id needs idempotence; client.id defaults to producer-<txid>."""
    with pytest.raises(ConfigError, match="Cannot set a transactional.id without also enabling idempotence."):
        cfg(transactional_id="tx", enable_idempotence=False)
    with pytest.raises(ConfigError, match="Cannot set a transactional.id without also enabling idempotence."):
        cfg(transactional_id="tx", acks=1)  # default idempotence disabled by acks=1 → transactions impossible
    with pytest.raises(ConfigError, match="String may not be empty"):
        cfg(transactional_id="")
    c = cfg(transactional_id="tx")
    assert c.transactional_id == "tx" and c["client.id"] == "producer-tx"


def test_client_id_sequence() -> None:
    """§18 item 3 (config part): an empty client.id becomes producer-<N>, N increasing per producer."""
    first = int(cfg()["client.id"].split("-")[1])
    second = int(cfg(client_id="")["client.id"].split("-")[1])
    assert second > first
    assert cfg(client_id="mine")["client.id"] == "mine"


def test_delivery_timeout_validation() -> None:
    """SPEC §3 delivery.timeout.ms (configureDeliveryTimeout): ≥ linger.ms + request.timeout.ms."""
    with pytest.raises(ConfigError,
                       match="delivery.timeout.ms should be equal to or larger than linger.ms \\+ request.timeout.ms"):
        cfg(delivery_timeout_ms=30_000, linger_ms=1)
    # Only the default is in conflict: it is raised to linger + request timeout, as in Kafka.
    assert cfg(linger_ms=100_000)["delivery.timeout.ms"] == 130_000
    assert cfg(delivery_timeout_ms=30_005, linger_ms=5)["delivery.timeout.ms"] == 30_005


def test_reconnect_backoff_max_follows_base_when_only_base_set() -> None:
    """SPEC §3 reconnect.backoff(.max).ms post-processing (Kafka's CommonClientConfigs)."""
    assert cfg(reconnect_backoff_ms=300)["reconnect.backoff.max.ms"] == 300
    assert cfg(reconnect_backoff_ms=300, reconnect_backoff_max_ms=2000)["reconnect.backoff.max.ms"] == 2000


def test_security_protocols() -> None:
    """Kafka's four security protocols are accepted (case-insensitive); anything else gets a clear error."""
    assert cfg(security_protocol="plaintext")["security.protocol"] == "plaintext"
    for proto in ("SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        assert cfg(security_protocol=proto)["security.protocol"] == proto
    with pytest.raises(ConfigError, match="String must be one of"):
        cfg(security_protocol="FOO")


def test_java_property_file_keys_accepted() -> None:
    """SPEC §3: Java SSL/SASL keys load (no effect); passwords hidden in repr."""
    c = cfg(**{"ssl.truststore.location": "/x", "sasl.mechanism": "PLAIN", "sasl.jaas.config": "secret"})
    assert c["ssl.truststore.location"] == "/x"
    assert "secret" not in repr(c)


def test_every_key_has_doc_and_is_documented() -> None:
    """SPEC §3: every ProducerConfig key is declared and documented."""
    assert len(PRODUCER_CONFIG_DEF) > 80
    table = PRODUCER_CONFIG_DEF.to_markdown()
    for key in ("linger.ms", "partitioner.class", "interceptor.classes", "compression.zstd.level"):
        assert f"`{key}`" in table


def test_plugins_built_from_config() -> None:
    """SPEC §2.1 steps 3/5/6: partitioner, serializers and interceptors are built from the config and get the
    client.id in their configs; no interceptors → an empty chain (SPEC §15 #20)."""
    from strom.producer.interceptors import ProducerInterceptors
    from strom.producer.partitioner import DefaultPartitioner, RoundRobinPartitioner

    c = cfg(client_id="app")
    assert isinstance(c.make_key_serializer(), StringSerializer)
    assert isinstance(c.make_partitioner(), DefaultPartitioner)
    chain = c.make_interceptors()
    assert isinstance(chain, ProducerInterceptors) and len(chain) == 0
    assert c.plugin_configs()["client.id"] == "app"
    c = cfg(partitioner_class="org.apache.kafka.clients.producer.RoundRobinPartitioner", value_serializer="int")
    assert isinstance(c.make_partitioner(), RoundRobinPartitioner)
    assert c.make_value_serializer().serialize("t", 1) == b"\x00\x00\x00\x01"
    ignoring = cfg(partitioner_ignore_keys=True).make_partitioner()
    assert ignoring.ignore_keys is True


def test_custom_plugin_configs_reach_configure() -> None:
    """SPEC §2.1 step 5: serializers get their settings in configure(); custom plug-in keys pass through
    custom_configs without being validated."""
    c = cfg(key_serializer_encoding="utf-16-be", custom_configs={"my.partitioner.weight": 3})
    assert c.make_key_serializer().serialize("t", "a") == b"\x00a"
    assert c.make_value_serializer().serialize("t", "a") == b"a"
    assert c.plugin_configs()["my.partitioner.weight"] == 3
    assert "my.partitioner.weight" not in c.values
