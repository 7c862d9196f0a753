"""Kafka's znode JSON (kafka.zk.ZkData): decode what Kafka brokers write, encode what they read back."""

from __future__ import annotations

import json
import uuid

import pytest

from strom.common.structs import TopicPartition
from strom.server.zk.errors import ZooKeeperClientError
from strom.server.zk.kafka_zk_client import parse_connect_string
from strom.server.zk.znodes import (
    PERSISTENT_ZK_PATHS,
    AclEntry,
    AclZNodes,
    BrokerIdZNode,
    BrokerRegistration,
    ClusterIdZNode,
    ConfigEntityChangeNotificationSequenceZNode,
    ConfigEntityZNode,
    ControllerEpochZNode,
    ControllerZNode,
    EndPoint,
    IsrChangeNotificationSequenceZNode,
    LeaderAndIsr,
    PreferredReplicaElectionZNode,
    ProducerIdBlockZNode,
    ProducerIdsBlock,
    ReassignPartitionsZNode,
    ReplicaAssignment,
    TopicPartitionStateZNode,
    TopicZNode,
    ZNodeDecodeError,
    sanitize,
    uuid_from_kafka_string,
    uuid_to_kafka_string,
)

pytestmark = pytest.mark.unit

# As a Kafka 3.x broker writes them (Jackson's field order, compact).
KAFKA_BROKER_V5 = (b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT","SSL":"SSL"},'
                   b'"endpoints":["PLAINTEXT://kafka1:9092","SSL://kafka1:9093"],"jmx_port":-1,"port":9092,'
                   b'"host":"kafka1","version":5,"timestamp":"1700000000000","rack":"r1"}')
KAFKA_TOPIC_V3 = (b'{"partitions":{"0":[1,0,2],"1":[0,2,1]},"topic_id":"Tq2mbNWJR3ClvYuhcEJgvA",'
                  b'"adding_replicas":{"1":[2]},"removing_replicas":{},"version":3}')
KAFKA_STATE = b'{"controller_epoch":3,"leader":1,"version":1,"leader_epoch":7,"isr":[1,0,2]}'


def test_paths_are_kafkas() -> None:
    tp = TopicPartition("sanguo", 2)
    assert BrokerIdZNode.path(1) == "/brokers/ids/1"
    assert TopicZNode.path("sanguo") == "/brokers/topics/sanguo"
    assert TopicPartitionStateZNode.path(tp) == "/brokers/topics/sanguo/partitions/2/state"
    assert ConfigEntityZNode.path("topics", "sanguo") == "/config/topics/sanguo"
    assert ConfigEntityZNode.path("brokers", "<default>") == "/config/brokers/<default>"
    assert ConfigEntityZNode.path("users", "CN=alice smith") == "/config/users/CN%3Dalice%20smith"
    assert ConfigEntityChangeNotificationSequenceZNode.CREATE_PATH == "/config/changes/config_change_"
    assert AclZNodes.path("TOPIC", "t") == "/kafka-acl/Topic/t"
    assert AclZNodes.path("GROUP", "g", "PREFIXED") == "/kafka-acl-extended/prefixed/Group/g"
    assert set(PERSISTENT_ZK_PATHS) >= {"/brokers/ids", "/brokers/topics", "/brokers/seqid", "/config/changes",
                                        "/admin/delete_topics", "/isr_change_notification",
                                        "/latest_producer_id_block", "/config/topics", "/config/brokers"}


def test_broker_registration_from_kafka_and_back() -> None:
    reg = BrokerIdZNode.decode(1, KAFKA_BROKER_V5, broker_epoch=4242)
    assert reg.endpoints == (EndPoint("kafka1", 9092, "PLAINTEXT", "PLAINTEXT"), EndPoint("kafka1", 9093, "SSL", "SSL"))
    assert (reg.rack, reg.jmx_port, reg.version, reg.timestamp_ms, reg.broker_epoch) == ("r1", -1, 5, 1700000000000, 4242)
    again = json.loads(BrokerIdZNode.encode(reg, timestamp_ms=1700000000000))
    assert again == json.loads(KAFKA_BROKER_V5)


def test_broker_registration_custom_listener_names_and_old_versions() -> None:
    reg = BrokerRegistration(2, (EndPoint("::1", 9094, "INTERNAL", "SASL_SSL"),))
    js = json.loads(BrokerIdZNode.encode(reg))
    assert js["endpoints"] == ["INTERNAL://[::1]:9094"] and js["host"] is None and js["port"] == -1
    assert BrokerIdZNode.decode(2, BrokerIdZNode.encode(reg)).endpoints == reg.endpoints
    v1 = BrokerIdZNode.decode(3, b'{"version":1,"host":"h","port":9092,"jmx_port":9999,"timestamp":"1"}')
    assert v1.endpoints == (EndPoint("h", 9092),) and v1.jmx_port == 9999


def test_topic_assignment_from_kafka_and_back() -> None:
    a = TopicZNode.decode("sanguo", KAFKA_TOPIC_V3, zk_version=4)
    assert a.topic_id == uuid_from_kafka_string("Tq2mbNWJR3ClvYuhcEJgvA")
    assert a.partitions == {0: ReplicaAssignment((1, 0, 2)), 1: ReplicaAssignment((0, 2, 1), (2,), ())}
    assert a.zk_version == 4 and a.partitions[1].is_being_reassigned
    assert json.loads(TopicZNode.encode(a.topic_id, a.partitions)) == json.loads(KAFKA_TOPIC_V3)
    assert json.loads(TopicZNode.encode(None, {0: [1]})) == {"version": 3, "partitions": {"0": [1]},
                                                             "adding_replicas": {}, "removing_replicas": {}}


def test_partition_state_from_kafka_and_back() -> None:
    tp = TopicPartition("t", 0)
    state = TopicPartitionStateZNode.decode(tp, KAFKA_STATE, zk_version=12)
    assert state == LeaderAndIsr(leader=1, leader_epoch=7, isr=(1, 0, 2), controller_epoch=3, zk_version=12)
    assert json.loads(TopicPartitionStateZNode.encode(state)) == json.loads(KAFKA_STATE)
    assert state.new_leader_and_isr(0, [0, 2]) == LeaderAndIsr(0, 8, (0, 2), 3, 12)
    assert state.new_isr([1]) == LeaderAndIsr(1, 7, (1,), 3, 12)


def test_small_znodes() -> None:
    assert json.loads(ControllerZNode.encode(2, 1700000000000)) == {"version": 1, "brokerid": 2,
                                                                   "timestamp": "1700000000000"}
    assert ControllerZNode.decode(b'{"version":1,"brokerid":2,"timestamp":"1"}') == 2
    assert ControllerEpochZNode.encode(5) == b"5" and ControllerEpochZNode.decode(b"5") == 5
    assert json.loads(ClusterIdZNode.encode("abc")) == {"version": "1", "id": "abc"}
    assert ClusterIdZNode.decode(b'{"version":"1","id":"Tq2mbNWJR3ClvYuhcEJgvA"}') == "Tq2mbNWJR3ClvYuhcEJgvA"
    block = ProducerIdBlockZNode.decode(b'{"version":1,"broker":0,"block_start":"1000","block_end":"1999"}')
    assert block == ProducerIdsBlock(0, 1000, 1000) and block.next_block_first_id == 2000
    assert ProducerIdBlockZNode.decode(ProducerIdBlockZNode.encode(block)) == block
    assert ConfigEntityZNode.decode(b'{"version":1,"config":{"retention.ms":"1000"}}') == {"retention.ms": "1000"}
    assert ConfigEntityZNode.decode(None) == {}
    assert json.loads(ConfigEntityChangeNotificationSequenceZNode.encode("topics/t")) == {"version": 2,
                                                                                         "entity_path": "topics/t"}
    tps = {TopicPartition("a", 0), TopicPartition("b", 1)}
    assert IsrChangeNotificationSequenceZNode.decode(IsrChangeNotificationSequenceZNode.encode(tps)) == tps
    assert PreferredReplicaElectionZNode.decode(PreferredReplicaElectionZNode.encode(tps)) == tps
    legacy = b'{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[2,1]}]}'
    assert ReassignPartitionsZNode.decode(legacy) == {TopicPartition("a", 0): (2, 1)}
    acls = [AclEntry("User:alice", "Allow", "Read", "*")]
    assert AclZNodes.decode(AclZNodes.encode(acls)) == acls
    assert AclZNodes.encode_change("TOPIC", "t") == b"Topic:t"


def test_kafka_uuid_strings() -> None:
    u = uuid.UUID("4eada66c-d589-4770-a5bd-8ba1704260bc")
    assert uuid_to_kafka_string(u) == "Tq2mbNWJR3ClvYuhcEJgvA"
    assert uuid_from_kafka_string("Tq2mbNWJR3ClvYuhcEJgvA") == u
    with pytest.raises(ValueError):
        uuid_from_kafka_string("short")
    assert sanitize("a*b c") == "a%2Ab%20c" and sanitize("<default>") == "<default>"


@pytest.mark.parametrize("decode, data, message", [
    (lambda d: TopicPartitionStateZNode.decode(TopicPartition("t", 0), d, 0), b"{not json",
     "Cannot parse the JSON in znode /brokers/topics/t/partitions/0/state"),
    (lambda d: TopicPartitionStateZNode.decode(TopicPartition("t", 0), d, 0), b'{"leader":1}',
     "lacks the field 'leader_epoch'"),
    (lambda d: TopicPartitionStateZNode.decode(TopicPartition("t", 0), d, 0),
     b'{"leader":1,"leader_epoch":0,"isr":["x"],"controller_epoch":1}', "field 'isr' is not a list of integers"),
    (lambda d: BrokerIdZNode.decode(1, d), b'{"version":5,"endpoints":["nonsense"]}', "Bad endpoints"),
    (lambda d: TopicZNode.decode("t", d), b'{"partitions":{"zero":[1]}}', "bad partition number"),
    (lambda d: ControllerEpochZNode.decode(d), b"five", "does not hold an integer"),
    (lambda d: ProducerIdBlockZNode.decode(d), b'{"broker":1,"block_start":"x","block_end":"9"}', "non-numeric"),
])
def test_malformed_znodes_raise_a_decode_error_naming_the_znode(decode, data, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ZNodeDecodeError, match=message.replace("(", r"\(").replace("[", r"\[")):
        decode(data)


def test_connect_string_parsing() -> None:
    assert parse_connect_string("h1:2181,h2:2181,h3:2181/kafka") == ("h1:2181,h2:2181,h3:2181", "/kafka")
    assert parse_connect_string("localhost:2181") == ("localhost:2181", "")
    assert parse_connect_string("h:1/a/b/") == ("h:1", "/a/b")
    for bad in ("", "h:x", "h:1,,h:2", "/kafka", "h:1/a//b"):
        with pytest.raises(ZooKeeperClientError):
            parse_connect_string(bad)
