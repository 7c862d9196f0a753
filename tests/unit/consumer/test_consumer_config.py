"""ConsumerConfig: Kafka 3.x keys and defaults, snake_case keywords, validation and post-processing."""

from __future__ import annotations

import pytest

from strom.common.errors import ConfigError
from strom.common.serialization import ByteArrayDeserializer, StringDeserializer
from strom.consumer.assignors import CooperativeStickyAssignor, RangeAssignor, RoundRobinAssignor
from strom.consumer.config import CONSUMER_CONFIG_DEF, ConsumerConfig

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

BASE = {"bootstrap.servers": "localhost:9092", "key.deserializer": "bytes", "value.deserializer": "bytes"}

JAVA_DEFAULTS = {
    "group.id": None, "group.instance.id": None, "session.timeout.ms": 45_000, "heartbeat.interval.ms": 3000,
    "max.poll.records": 500, "max.poll.interval.ms": 300_000, "enable.auto.commit": True,
    "auto.commit.interval.ms": 5000, "auto.offset.reset": "latest", "fetch.min.bytes": 1,
    "fetch.max.bytes": 52_428_800, "fetch.max.wait.ms": 500, "max.partition.fetch.bytes": 1_048_576,
    "check.crcs": True, "isolation.level": "read_uncommitted", "request.timeout.ms": 30_000,
    "default.api.timeout.ms": 60_000, "receive.buffer.bytes": -1, "send.buffer.bytes": 131_072,
    "metadata.max.age.ms": 300_000, "retry.backoff.ms": 100, "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000, "connections.max.idle.ms": 540_000, "exclude.internal.topics": True,
    "allow.auto.create.topics": True, "client.rack": "", "interceptor.classes": [],
    "partition.assignment.strategy": ["org.apache.kafka.clients.consumer.RangeAssignor",
                                      "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"],
}


def test_java_defaults() -> None:
    cfg = ConsumerConfig({**BASE, "group.id": "g"})
    for key, value in JAVA_DEFAULTS.items():
        if key == "group.id":
            continue
        assert cfg[key] == value, key
    assert set(JAVA_DEFAULTS) <= set(CONSUMER_CONFIG_DEF.names())


def test_snake_case_and_dotted_keys() -> None:
    cfg = ConsumerConfig(BASE, group_id="g", max_poll_records=7, auto_offset_reset="EARLIEST")
    assert cfg["max.poll.records"] == 7 and cfg["max_poll_records"] == 7
    assert cfg["auto.offset.reset"] == "earliest"
    with pytest.raises(ConfigError, match="given twice"):
        ConsumerConfig({**BASE, "max.poll.records": 1}, max_poll_records=2)


@pytest.mark.parametrize("key,value", [
    ("max.poll.records", 0), ("auto.offset.reset", "smallest"), ("isolation.level", "dirty"),
    ("fetch.min.bytes", -1), ("session.timeout.ms", "abc"), ("group.instance.id", ""),
    ("partition.assignment.strategy", ["no.such.Assignor"]), ("bootstrap.servers", "nohostport"),
])
def test_invalid_values_name_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        ConsumerConfig({**BASE, "group.id": "g", key: value})


def test_unknown_key_and_missing_deserializer() -> None:
    with pytest.raises(ConfigError, match="Unknown configuration 'max.poll.recordz'"):
        ConsumerConfig({**BASE, "max.poll.recordz": 1})
    with pytest.raises(ConfigError, match="value.deserializer"):
        ConsumerConfig({"bootstrap.servers": "h:1", "key.deserializer": "bytes"})


def test_cross_key_checks() -> None:
    with pytest.raises(ConfigError, match="heartbeat.interval.ms must be lower than session.timeout.ms"):
        ConsumerConfig(BASE, group_id="g", session_timeout_ms=3000, heartbeat_interval_ms=3000)
    with pytest.raises(ConfigError, match="enable.auto.commit cannot be set to true"):
        ConsumerConfig(BASE, enable_auto_commit=True)
    assert ConsumerConfig(BASE)["enable.auto.commit"] is False  # no group: auto-commit off
    with pytest.raises(ConfigError, match="classic"):
        ConsumerConfig(BASE, group_id="g", group_protocol="consumer")
    with pytest.raises(ConfigError, match="group.instance.id requires group.id"):
        ConsumerConfig(BASE, group_instance_id="i")


def test_client_id_generation() -> None:
    assert ConsumerConfig(BASE, group_id="g")["client.id"].startswith("consumer-g-")
    assert ConsumerConfig(BASE, group_id="g", group_instance_id="i1")["client.id"] == "consumer-g-i1"
    assert ConsumerConfig(BASE)["client.id"].startswith("consumer-")
    assert ConsumerConfig(BASE, client_id="mine")["client.id"] == "mine"


def test_plugins() -> None:
    cfg = ConsumerConfig({**BASE, "key.deserializer": "org.apache.kafka.common.serialization.StringDeserializer",
                          "group.id": "g", "partition.assignment.strategy": "roundrobin,cooperative-sticky"})
    assert isinstance(cfg.make_key_deserializer(), StringDeserializer)
    assert isinstance(cfg.make_value_deserializer(), ByteArrayDeserializer)
    assert [type(a) for a in cfg.make_assignors()] == [RoundRobinAssignor, CooperativeStickyAssignor]
    assert [type(a) for a in ConsumerConfig(BASE, group_id="g").make_assignors()] == [
        RangeAssignor, CooperativeStickyAssignor]
    assert ConsumerConfig(BASE, value_deserializer=lambda b: b.decode()).make_value_deserializer() \
        .deserialize("t", b"x") == "x"
