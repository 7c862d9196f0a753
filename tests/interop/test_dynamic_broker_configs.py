"""Dynamic broker configs on a standalone broker, judged by confluent-kafka (librdkafka): IncrementalAlterConfigs
on the BROKER resource changes what the broker enforces at once, on topics without an override of their own, and
the change survives a restart; keys that cannot change at runtime and bad values are refused."""

from __future__ import annotations

import pytest

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]

BIG = 50_000  # bytes of value: over the 10,000 set below, under every client-side limit


def _alter(admin: AdminClient, name: str, op: AlterConfigOpType, key: str, value: str | None = None) -> None:
    entry = ConfigEntry(key, value, incremental_operation=op)
    fs = admin.incremental_alter_configs([ConfigResource(ResourceType.BROKER, name, incremental_configs=[entry])])
    for f in fs.values():
        f.result(30)


def _alter_default(bootstrap: str, key: str, value: str | None) -> None:
    """The cluster-wide default (the BROKER resource named ""), which confluent-kafka cannot name: strom's admin."""
    from strom.admin import AdminClient as StromAdmin
    from strom.admin.models import AlterConfigOp, ConfigResourceType
    from strom.admin.models import AlterConfigOpType as Op
    from strom.admin.models import ConfigResource as Res

    admin = StromAdmin(bootstrap_servers=bootstrap)
    try:
        op = AlterConfigOp(key, value, Op.SET if value is not None else Op.DELETE)
        for f in admin.incremental_alter_configs({Res(ConfigResourceType.BROKER, ""): [op]}).values().values():
            f.result(30)
    finally:
        admin.close()


def _produce(bootstrap: str, topic: str, size: int) -> int | None:
    """The error code librdkafka reports for one record of ``size`` bytes (None: acknowledged)."""
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "1", "enable.idempotence": False,
                     "message.timeout.ms": 20_000})
    result: list[int | None] = []
    p.produce(topic, b"x" * size, on_delivery=lambda err, _m: result.append(err.code() if err else None))
    assert p.flush(30) == 0
    return result[0]


def _describe(admin: AdminClient, kind: ResourceType, name: str) -> dict[str, ConfigEntry]:
    (f,) = admin.describe_configs([ConfigResource(kind, name)]).values()
    return f.result(30)  # type: ignore[no-any-return]


def test_message_max_bytes_changes_at_runtime_per_broker_and_by_default_and_survives_a_restart(
        fresh_broker) -> None:  # type: ignore[no-untyped-def]
    broker = fresh_broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic("plain", 1, 1),
                                  NewTopic("own", 1, 1, config={"max.message.bytes": "100000"})]).values():
        f.result(30)
    assert _produce(broker.bootstrap, "plain", BIG) is None

    _alter(admin, "1", AlterConfigOpType.SET, "message.max.bytes", "10000")
    assert _produce(broker.bootstrap, "plain", BIG) == ck.KafkaError.MSG_SIZE_TOO_LARGE
    assert _produce(broker.bootstrap, "own", BIG) is None  # the topic's own override wins
    plain = _describe(admin, ResourceType.TOPIC, "plain")["max.message.bytes"]
    assert (plain.value, plain.source) == ("10000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    described = _describe(admin, ResourceType.BROKER, "1")
    assert (described["message.max.bytes"].value, described["message.max.bytes"].source,
            described["message.max.bytes"].is_read_only) == ("10000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    assert described["log.dirs"].is_read_only

    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert _produce(broker.bootstrap, "plain", BIG) == ck.KafkaError.MSG_SIZE_TOO_LARGE

    # the cluster-wide default sits under the per-broker value, and applies once that goes
    _alter_default(broker.bootstrap, "message.max.bytes", "60000")
    assert _produce(broker.bootstrap, "plain", BIG) == ck.KafkaError.MSG_SIZE_TOO_LARGE
    _alter(admin, "1", AlterConfigOpType.DELETE, "message.max.bytes")
    assert _produce(broker.bootstrap, "plain", BIG) is None
    plain = _describe(admin, ResourceType.TOPIC, "plain")["max.message.bytes"]
    assert (plain.value, plain.source) == ("60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert _produce(broker.bootstrap, "plain", 70_000) == ck.KafkaError.MSG_SIZE_TOO_LARGE
    _alter_default(broker.bootstrap, "message.max.bytes", None)
    assert _produce(broker.bootstrap, "plain", 70_000) is None
    broker.stop()


def test_static_keys_and_bad_values_are_refused(broker) -> None:  # type: ignore[no-untyped-def]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for key, value, why in (("log.dirs", "/elsewhere", "Cannot update these configs dynamically: Set(log.dirs)"),
                            ("message.max.bytes", "big", "message.max.bytes")):
        with pytest.raises(ck.KafkaException) as info:
            _alter(admin, "1", AlterConfigOpType.SET, key, value)
        error = info.value.args[0]
        assert error.code() == ck.KafkaError.INVALID_REQUEST
        assert why in error.str()
    assert _describe(admin, ResourceType.BROKER, "1")["message.max.bytes"].source == \
        ConfigSource.DEFAULT_CONFIG.value


def test_kafka_python_alter_configs_on_the_broker(broker) -> None:  # type: ignore[no-untyped-def]
    """kafka-python's AlterConfigs (the whole-set request, not the incremental one) on a broker, described back with
    Kafka's sources and types; a static key refused with Kafka's message."""
    import kafka
    from kafka.admin import ConfigResource as KPResource
    from kafka.admin import ConfigResourceType as KPType

    kp = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        def alter(configs: dict[str, str]) -> object:
            return kp.alter_configs([KPResource(KPType.BROKER, "1", configs=configs)], incremental=False,
                                    raise_on_unknown=False)["broker"]["1"]

        assert alter({"log.cleaner.backoff.ms": "1000", "log.retention.ms": "7200000"}) == "OK"
        described = kp.describe_configs([KPResource(KPType.BROKER, "1")])["broker"]["1"]
        assert {k: (v["value"], v["config_source"], v["config_type"]) for k, v in described.items()} == {
            "log.cleaner.backoff.ms": ("1000", "DYNAMIC_BROKER_CONFIG", "LONG"),
            "log.retention.ms": ("7200000", "DYNAMIC_BROKER_CONFIG", "LONG")}
        refused = alter({"log.dirs": "/elsewhere"})
        assert isinstance(refused, str) and "Cannot update these configs dynamically: Set(log.dirs)" in refused
        assert alter({}) == "OK"
    finally:
        kp.close()
