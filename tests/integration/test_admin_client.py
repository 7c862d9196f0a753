"""strom.admin.AdminClient against a real broker subprocess: every API, per-resource futures, broker errors."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from strom.admin import (
    AdminClient,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    ConsumerGroupState,
    NewPartitions,
    NewTopic,
    OffsetAndMetadata,
    OffsetSpec,
    RecordsToDelete,
    TopicPartition,
)
from strom.broker_process import BrokerProcess
from strom.common.error_codes import (
    GroupIdNotFoundError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from strom.common.errors import KafkaTimeoutError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("admin") / "data")
    b.start()
    yield b
    b.stop()
    b.cleanup()


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> Iterator[AdminClient]:
    with AdminClient({"bootstrap.servers": broker.bootstrap, "default.api.timeout.ms": 20000}) as client:
        yield client


def produce(broker: BrokerProcess, topic: str, count: int, partition: int = 0) -> None:
    from strom.producer.kafka_producer import KafkaProducer

    with KafkaProducer({"bootstrap.servers": broker.bootstrap, "key.serializer": "bytes",
                        "value.serializer": "bytes"}) as producer:
        for i in range(count):
            producer.send(topic, value=b"v%d" % i, partition=partition)
        producer.flush()


def test_cluster(admin: AdminClient, broker: BrokerProcess) -> None:
    description = admin.describe_cluster().description().result(10)
    assert [n.node_id for n in description.nodes] == [1]
    assert description.controller == description.nodes[0]
    assert description.nodes[0].port == broker.port
    assert description.cluster_id and len(description.cluster_id) == 22


def test_topic_life_cycle(admin: AdminClient) -> None:
    result = admin.create_topics([NewTopic("life", 2, 1, configs={"retention.ms": "60000"}),
                                  NewTopic("life-rf3", 1, 3)])
    created = result["life"].result(10)
    assert (created.num_partitions, created.replication_factor) == (2, 1) and created.topic_id is not None
    assert created.configs and any(c.name == "retention.ms" and c.value == "60000" for c in created.configs)
    with pytest.raises(InvalidReplicationFactorError, match="only 1 broker"):
        result["life-rf3"].result(10)
    with pytest.raises(TopicAlreadyExistsError, match="Topic 'life' already exists."):
        admin.create_topics([NewTopic("life")]).all().result(10)
    checked = admin.create_topics([NewTopic("validated", 1)], validate_only=True)["validated"].result(10)
    assert checked.num_partitions == 1
    assert "validated" not in admin.list_topics().names().result(10)

    listings = admin.list_topics().names_to_listings().result(10)
    assert listings["life"].topic_id == created.topic_id and not listings["life"].is_internal
    description = admin.describe_topics(["life"])["life"].result(10)
    assert [p.partition for p in description.partitions] == [0, 1]
    assert all(p.leader is not None and p.leader.node_id == 1 for p in description.partitions)

    admin.create_partitions({"life": NewPartitions.increase_to(4)}).all().result(10)
    assert len(admin.describe_topics(["life"])["life"].result(10).partitions) == 4
    with pytest.raises(InvalidPartitionsError, match="Topic currently has 4 partitions, which is higher than the "
                                                     "requested 2."):
        admin.create_partitions({"life": 2})["life"].result(10)
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.create_partitions({"nosuch": 2})["nosuch"].result(10)

    admin.delete_topics(["life"]).all().result(10)
    deadline = time.monotonic() + 10
    while "life" in admin.list_topics().names().result(10):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_topics(["life"])["life"].result(10)
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics(["life"])["life"].result(10)


def test_configs(admin: AdminClient) -> None:
    admin.create_topics([NewTopic("configured", 1)]).all().result(10)
    topic = ConfigResource(ConfigResourceType.TOPIC, "configured")
    admin.incremental_alter_configs({topic: [AlterConfigOp("retention.ms", "1234"),
                                             AlterConfigOp("cleanup.policy", "compact", AlterConfigOpType.SET)]}
                                    ).all().result(10)
    config = admin.describe_configs([topic])[topic].result(10)
    entry = config.get("retention.ms")
    assert entry is not None and (entry.value, entry.source, entry.is_default) == (
        "1234", ConfigSource.DYNAMIC_TOPIC_CONFIG, False)
    default = config.get("max.message.bytes")
    assert default is not None and default.is_default
    admin.incremental_alter_configs({topic: [AlterConfigOp("retention.ms", None, AlterConfigOpType.DELETE)]}
                                    ).all().result(10)
    assert admin.describe_configs([topic])[topic].result(10).get("retention.ms").is_default  # type: ignore[union-attr]
    with pytest.raises(InvalidConfigError):
        admin.incremental_alter_configs({topic: [AlterConfigOp("retention.ms", "x")]})[topic].result(10)
    admin.alter_configs({topic: {"segment.ms": "100000"}}).all().result(10)
    assert admin.describe_configs([topic])[topic].result(10).get("cleanup.policy").is_default  # type: ignore[union-attr]

    broker = ConfigResource(ConfigResourceType.BROKER, "1")
    broker_config = admin.describe_configs([broker])[broker].result(10)
    assert broker_config.get("log.dirs") is not None
    with pytest.raises(InvalidRequestError, match=r"Cannot update these configs dynamically: Set\(log.dirs\)"):
        admin.incremental_alter_configs({broker: [AlterConfigOp("log.dirs", "/x")]})[broker].result(10)
    # a dynamic broker config (validated only: the module's broker is shared)
    admin.incremental_alter_configs({broker: [AlterConfigOp("log.retention.ms", "1")]},
                                    validate_only=True)[broker].result(10)
    assert admin.describe_configs([broker])[broker].result(10).get("log.retention.ms").value is None
    missing = ConfigResource(ConfigResourceType.TOPIC, "nosuch")
    result = admin.describe_configs([topic, missing])
    assert result[topic].result(10)
    with pytest.raises(UnknownTopicOrPartitionError, match="Topic nosuch does not exist."):
        result[missing].result(10)


def test_offsets_and_delete_records(admin: AdminClient, broker: BrokerProcess) -> None:
    admin.create_topics([NewTopic("records", 2)]).all().result(10)
    produce(broker, "records", 5)
    tp0, tp1 = TopicPartition("records", 0), TopicPartition("records", 1)
    latest = admin.list_offsets({tp0: OffsetSpec.latest(), tp1: OffsetSpec.latest()}).all().result(10)
    assert (latest[tp0].offset, latest[tp1].offset) == (5, 0)
    by_time = admin.list_offsets({tp0: OffsetSpec.for_timestamp(0)})[tp0].result(10)
    assert by_time.offset == 0
    deleted = admin.delete_records({tp0: RecordsToDelete.before(3)})[tp0].result(10)
    assert deleted.low_watermark == 3
    assert admin.list_offsets({tp0: OffsetSpec.earliest()})[tp0].result(10).offset == 3
    with pytest.raises(OffsetOutOfRangeError):
        admin.delete_records({tp0: 99})[tp0].result(10)
    missing = TopicPartition("nosuch", 0)
    result = admin.list_offsets({missing: OffsetSpec.latest(), tp1: OffsetSpec.earliest()})
    assert result[tp1].result(10).offset == 0
    with pytest.raises(UnknownTopicOrPartitionError):
        result[missing].result(10)


def test_consumer_group_offsets(admin: AdminClient) -> None:
    admin.create_topics([NewTopic("grouped", 2)]).all().result(10)
    tp0, tp1 = TopicPartition("grouped", 0), TopicPartition("grouped", 1)
    admin.alter_consumer_group_offsets("simple", {tp0: 0, tp1: OffsetAndMetadata(0, "meta")}).all().result(10)
    offsets = admin.list_consumer_group_offsets("simple").partitions_to_offset_and_metadata().result(10)
    assert offsets == {tp0: OffsetAndMetadata(0, "", None), tp1: OffsetAndMetadata(0, "meta", None)}
    only = admin.list_consumer_group_offsets("simple", partitions=[tp1, TopicPartition("grouped", 5)])
    assert only.partitions_to_offset_and_metadata().result(10)[tp1].metadata == "meta"
    many = admin.list_consumer_group_offsets({"simple": None, "nobody": None}).all().result(10)
    assert many["nobody"] == {} and len(many["simple"]) == 2

    listings = admin.list_consumer_groups().all().result(10)
    simple = next(g for g in listings if g.group_id == "simple")
    assert simple.state == ConsumerGroupState.EMPTY
    assert [g.group_id for g in admin.list_consumer_groups(states=[ConsumerGroupState.STABLE]).all().result(10)] == []
    described = admin.describe_consumer_groups(["simple", "nobody"])
    assert described["simple"].result(10).state == ConsumerGroupState.EMPTY
    assert described["simple"].result(10).coordinator is not None
    assert described["nobody"].result(10).state == ConsumerGroupState.DEAD
    bad = admin.alter_consumer_group_offsets("simple", {TopicPartition("nosuch", 0): 1})
    with pytest.raises(UnknownTopicOrPartitionError):
        bad[TopicPartition("nosuch", 0)].result(10)
    admin.delete_consumer_groups(["simple"]).all().result(10)
    with pytest.raises(GroupIdNotFoundError):
        admin.delete_consumer_groups(["simple"])["simple"].result(10)


def test_active_group_is_described_with_members(admin: AdminClient, broker: BrokerProcess) -> None:
    from strom.consumer.kafka_consumer import KafkaConsumer

    admin.create_topics([NewTopic("members", 2)]).all().result(10)
    with KafkaConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "active", "client.id": "c-1",
                        "key.deserializer": "bytes", "value.deserializer": "bytes"}) as consumer:
        consumer.subscribe(["members"])
        deadline = time.monotonic() + 20
        while not consumer.assignment():
            assert time.monotonic() < deadline
            consumer.poll(timeout_ms=100)
        description = admin.describe_consumer_groups(["active"])["active"].result(10)
        assert description.state == ConsumerGroupState.STABLE and description.partition_assignor
        (member,) = description.members
        assert member.client_id == "c-1" and member.host.endswith("127.0.0.1")
        assert member.assignment.topic_partitions == {TopicPartition("members", 0), TopicPartition("members", 1)}
        from strom.common.error_codes import NonEmptyGroupError

        with pytest.raises(NonEmptyGroupError):
            admin.delete_consumer_groups(["active"])["active"].result(10)


def test_unreachable_broker_times_out_with_a_reason() -> None:
    started = time.monotonic()
    with AdminClient({"bootstrap.servers": "127.0.0.1:1", "default.api.timeout.ms": 1500}) as admin:
        with pytest.raises(KafkaTimeoutError, match=r"Call: listTopics \(could not connect to 127.0.0.1:1\)"):
            admin.list_topics().names().result(10)
    assert time.monotonic() - started < 8
