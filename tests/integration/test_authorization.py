"""Authorization end to end: a real broker with ``authorizer.class.name`` set and a SASL_PLAINTEXT listener (users
admin, alice, bob; ``super.users=User:admin``). Each request handler checks what Kafka's ``KafkaApis`` checks and
answers Kafka's errors; a refused request changes nothing. Judges: strom's clients, confluent-kafka, kafka-python
and hand-built requests (for exact per-partition codes)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom import KafkaProducer, ProducerRecord
from strom.admin.admin_client import AdminClient
from strom.admin.models import ConfigResource, ConfigResourceType, NewTopic, OffsetSpec
from strom.common.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from strom.common.error_codes import (
    ClusterAuthorizationFailedError,
    ErrorCode,
    TopicAuthorizationFailedError,
)
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages import (
    FetchRequest,
    FindCoordinatorRequest,
    JoinGroupRequest,
    LeaderAndIsrRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
    UpdateMetadataRequest,
)
from strom.testing.broker_process import BrokerProcess, free_port
from strom.testing.raw_client import RawClient

Op, Rt = AclOperation, ResourceType
USERS = ("admin", "alice", "bob")
JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
    f'user_{u}="{u}-pw"' for u in USERS) + ";"


def start_broker(data_dir: Path, **extra: str) -> BrokerProcess:
    port = free_port()
    props = {"listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}", "security.inter.broker.protocol": "SASL_PLAINTEXT",
             "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS,
             "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
             "super.users": "User:admin", "offsets.topic.num.partitions": "1",
             "group.initial.rebalance.delay.ms": "0", **extra}
    return BrokerProcess(data_dir=data_dir, port=port, overrides=props).start(timeout=60)


def sasl(user: str) -> dict[str, Any]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": f"{user}-pw"}


def admin_client(broker: BrokerProcess, user: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "default.api.timeout.ms": 15000, **sasl(user)})


def acl(rt: ResourceType, name: str, op: AclOperation, principal: str, *,
        perm: AclPermissionType = AclPermissionType.ALLOW, pattern: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(ResourcePattern(rt, name, pattern), AccessControlEntry(principal, "*", op, perm))


def raw(broker: BrokerProcess, user: str) -> RawClient:
    """A connection authenticated as ``user`` (SASL PLAIN, KIP-152) for hand-built requests."""
    c = RawClient(broker.bootstrap, timeout=20)
    assert c.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
    auth = c.request(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{user}-pw".encode()))
    assert auth.error_code == 0, auth.error_message
    return c


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = start_broker(tmp_path_factory.mktemp("authz") / "data")
    admin = admin_client(b, "admin")
    try:
        admin.create_topics([NewTopic("orders", 2, 1), NewTopic("secret", 1, 1), NewTopic("events", 1, 1)]
                            ).all().result(30)
        admin.create_acls([
            acl(Rt.TOPIC, "orders", Op.WRITE, "User:alice"),
            acl(Rt.TOPIC, "events", Op.READ, "User:alice"),
            acl(Rt.TOPIC, "events", Op.READ, "User:bob"),
            acl(Rt.GROUP, "alice-", Op.READ, "User:alice", pattern=PatternType.PREFIXED),
            acl(Rt.TOPIC, "alice-", Op.CREATE, "User:alice", pattern=PatternType.PREFIXED),
            acl(Rt.TOPIC, "orders", Op.DESCRIBE_CONFIGS, "User:alice"),
        ]).all().result(30)
    finally:
        admin.close(5)
    yield b
    b.stop()
    b.cleanup()


def end_offset(broker: BrokerProcess, topic: str, partition: int = 0) -> int:
    admin = admin_client(broker, "admin")
    try:
        tp = TopicPartition(topic, partition)
        return admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(20).offset
    finally:
        admin.close(5)


def strom_producer(broker: BrokerProcess, user: str) -> KafkaProducer:
    return KafkaProducer({"bootstrap.servers": broker.bootstrap, "key.serializer": "str", "value.serializer": "str",
                          "max.block.ms": 15000, "delivery.timeout.ms": 15000, "request.timeout.ms": 10000,
                          "enable.idempotence": "false", **sasl(user)})


def confluent_produce(broker: BrokerProcess, user: str, topic: str) -> Any:
    """One record through librdkafka; returns the delivery error (None when written)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 15000, "log_level": 0, **sasl(user)})
    outcome: list[Any] = []
    p.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    p.flush(30)
    assert outcome, "no delivery report"
    return outcome[0]


# -- Produce ------------------------------------------------------------------------------------------------------

def test_write_acl_lets_alice_produce_and_bob_is_refused_confluent(broker: BrokerProcess) -> None:
    before = end_offset(broker, "orders") + end_offset(broker, "orders", 1)
    assert confluent_produce(broker, "alice", "orders") is None
    err = confluent_produce(broker, "bob", "orders")
    assert err is not None and err.code() == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert end_offset(broker, "orders") + end_offset(broker, "orders", 1) == before + 1  # bob wrote nothing


def test_write_acl_with_stroms_producer(broker: BrokerProcess) -> None:
    with strom_producer(broker, "alice") as p:
        md = p.send(ProducerRecord("orders", "v", key="k", partition=0)).get(20)
        assert md.offset >= 0
    before = end_offset(broker, "orders")
    with strom_producer(broker, "bob") as p:
        with pytest.raises(TopicAuthorizationFailedError):
            p.send(ProducerRecord("orders", "v", key="k", partition=0)).get(20)
    assert end_offset(broker, "orders") == before


def test_kafka_python_judges_a_refused_produce(broker: BrokerProcess) -> None:
    import kafka
    import kafka.errors

    p = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism="PLAIN", sasl_plain_username="bob", sasl_plain_password="bob-pw",
                            max_block_ms=15000, request_timeout_ms=10000)
    try:
        with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
            p.send("orders", b"v").get(20)
    finally:
        p.close(5)


# -- Metadata -----------------------------------------------------------------------------------------------------

def test_metadata_hides_topics_the_principal_may_not_describe(broker: BrokerProcess) -> None:
    with raw(broker, "alice") as c:
        everything = c.request(ApiKey.METADATA, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False))
        assert {t.name for t in everything.topics} == {"orders", "events"}  # not secret, not __consumer_offsets
        asked = c.request(ApiKey.METADATA, 12, MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in ("secret", "ghost", "orders")],
            allow_auto_topic_creation=True, include_topic_authorized_operations=True))
        codes = {t.name: t.error_code for t in asked.topics}
        # an existing and a missing topic look the same to someone who may not describe them
        assert codes == {"secret": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                         "ghost": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "orders": ErrorCode.NONE}
        orders = next(t for t in asked.topics if t.name == "orders")
        ops = {op for op in AclOperation if orders.topic_authorized_operations >> int(op) & 1}
        assert ops == {Op.WRITE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS}
        v10 = c.request(ApiKey.METADATA, 10, MetadataRequest(topics=[], include_cluster_authorized_operations=True))
        assert v10.cluster_authorized_operations == 0  # no DESCRIBE on the cluster: nothing reported
    with raw(broker, "admin") as c:
        everything = c.request(ApiKey.METADATA, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False))
        assert {"orders", "events", "secret"} <= {t.name for t in everything.topics}
        assert "ghost" not in {t.name for t in everything.topics}  # alice's request created nothing
        v10 = c.request(ApiKey.METADATA, 10, MetadataRequest(topics=[], include_cluster_authorized_operations=True))
        assert v10.cluster_authorized_operations >> int(Op.CLUSTER_ACTION) & 1


def test_auto_create_needs_create(broker: BrokerProcess) -> None:
    with raw(broker, "alice") as c:
        def ask(name: str) -> int:
            r = c.request(ApiKey.METADATA, 12, MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=name)], allow_auto_topic_creation=True))
            return r.topics[0].error_code

        # alice may CREATE alice-* (which implies nothing about DESCRIBE): DESCRIBE comes first, as in Kafka
        assert ask("alice-auto") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    admin = admin_client(broker, "admin")
    try:
        admin.create_acls([acl(Rt.TOPIC, "described-", Op.DESCRIBE, "User:alice", pattern=PatternType.PREFIXED),
                           acl(Rt.TOPIC, "described-ok", Op.CREATE, "User:alice")]).all().result(20)
    finally:
        admin.close(5)
    with raw(broker, "alice") as c:
        def code_of(name: str) -> int:
            r = c.request(ApiKey.METADATA, 12, MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=name)], allow_auto_topic_creation=True))
            return r.topics[0].error_code

        assert code_of("described-no") == ErrorCode.TOPIC_AUTHORIZATION_FAILED  # DESCRIBE, no CREATE
        assert code_of("described-ok") in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE)
    admin = admin_client(broker, "admin")
    try:
        names = admin.list_topics().names().result(20)
        assert "described-ok" in names and "described-no" not in names
    finally:
        admin.close(5)


# -- Topic administration -----------------------------------------------------------------------------------------

def test_create_topics_needs_create(broker: BrokerProcess) -> None:
    bob = admin_client(broker, "bob")
    alice = admin_client(broker, "alice")
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            bob.create_topics([NewTopic("bobs-topic", 1, 1)]).all().result(20)
        alice.create_topics([NewTopic("alice-created", 1, 1)]).all().result(20)  # CREATE on the alice- prefix
        with pytest.raises(TopicAuthorizationFailedError):
            alice.create_topics([NewTopic("not-alices", 1, 1)]).all().result(20)
    finally:
        bob.close(5)
        alice.close(5)
    admin = admin_client(broker, "admin")
    try:
        names = admin.list_topics().names().result(20)
        assert "alice-created" in names and "bobs-topic" not in names and "not-alices" not in names
    finally:
        admin.close(5)


def test_delete_topics_needs_delete(broker: BrokerProcess) -> None:
    admin = admin_client(broker, "admin")
    try:
        admin.create_topics([NewTopic("doomed", 1, 1)]).all().result(20)
        alice = admin_client(broker, "alice")
        try:
            with pytest.raises(TopicAuthorizationFailedError):
                alice.delete_topics(["doomed"]).all().result(20)
            with pytest.raises(TopicAuthorizationFailedError):  # not UNKNOWN_TOPIC_OR_PARTITION: no leak
                alice.delete_topics(["never-existed"]).all().result(20)
            assert "doomed" in admin.list_topics().names().result(20)
            admin.create_acls([acl(Rt.TOPIC, "doomed", Op.DELETE, "User:alice")]).all().result(20)
            alice.delete_topics(["doomed"]).all().result(20)
        finally:
            alice.close(5)
    finally:
        admin.close(5)


def test_describe_and_alter_configs(broker: BrokerProcess) -> None:
    orders = ConfigResource(ConfigResourceType.TOPIC, "orders")
    events = ConfigResource(ConfigResourceType.TOPIC, "events")
    node = ConfigResource(ConfigResourceType.BROKER, "1")  # node.id defaults to 1
    alice = admin_client(broker, "alice")
    try:
        assert alice.describe_configs([orders])[orders].result(20).get("retention.ms") is not None
        with pytest.raises(TopicAuthorizationFailedError):
            alice.describe_configs([events])[events].result(20)
        with pytest.raises(ClusterAuthorizationFailedError):
            alice.describe_configs([node])[node].result(20)
        with pytest.raises(TopicAuthorizationFailedError):
            alice.alter_configs({orders: {"retention.ms": "1234"}}).all().result(20)
        admin = admin_client(broker, "admin")
        try:
            admin.create_acls([acl(Rt.TOPIC, "orders", Op.ALTER_CONFIGS, "User:alice")]).all().result(20)
        finally:
            admin.close(5)
        alice.alter_configs({orders: {"retention.ms": "1234"}}).all().result(20)
        assert alice.describe_configs([orders])[orders].result(20).get("retention.ms").value == "1234"
    finally:
        alice.close(5)


# -- Consumer groups ----------------------------------------------------------------------------------------------

def test_consumer_group_needs_read_on_group_and_topic(broker: BrokerProcess) -> None:
    with strom_producer(broker, "admin") as p:
        p.send(ProducerRecord("events", "hello", key="k")).get(20)
    from confluent_kafka import Consumer, KafkaException

    def consume(user: str, group: str) -> Any:
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                      "log_level": 0, **sasl(user)})
        try:
            c.subscribe(["events"])
            import time
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                m = c.poll(1.0)
                if m is None:
                    continue
                if m.error():
                    return m.error()
                c.commit(m, asynchronous=False)
                return m.value()
            return None
        except KafkaException as e:
            return e.args[0]
        finally:
            c.close()

    assert consume("alice", "alice-group") == b"hello"
    err = consume("bob", "alice-group")  # bob may read the topic but not the group
    assert err is not None and not isinstance(err, bytes) and err.code() == ErrorCode.GROUP_AUTHORIZATION_FAILED

    with raw(broker, "alice") as c:
        fc = c.request(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="bob-group", key_type=0))
        assert fc.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        join = c.request(ApiKey.JOIN_GROUP, 7, JoinGroupRequest(
            group_id="bob-group", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
            protocol_type="consumer", protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range",
                                                                                           metadata=b"")]))
        assert join.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        # READ on the group, not on the topic: the commit is refused per partition and nothing is stored
        commit = c.request(ApiKey.OFFSET_COMMIT, 8, OffsetCommitRequest(
            group_id="alice-group", generation_id_or_member_epoch=-1, member_id="", topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(name="orders", partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=7)])]))
        assert commit.topics[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        fetched = c.request(ApiKey.OFFSET_FETCH, 7, OffsetFetchRequest(group_id="alice-group", topics=None))
        assert fetched.error_code == ErrorCode.NONE
        assert {t.name for t in fetched.topics} == {"events"}  # orders: no commit stored (and not describable)
    with raw(broker, "bob") as c:
        fetched = c.request(ApiKey.OFFSET_FETCH, 7, OffsetFetchRequest(group_id="alice-group", topics=None))
        assert fetched.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED


# -- Fetch, DENY, inter-broker ------------------------------------------------------------------------------------

def _fetch_code(c: RawClient, topic: str, replica_id: int = -1) -> int:
    r = c.request(ApiKey.FETCH, 12, FetchRequest(
        replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[
            FetchRequest.FetchTopic(topic=topic, partitions=[
                FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]))
    return r.responses[0].partitions[0].error_code


def test_deny_beats_allow_and_fetch_checks_read(broker: BrokerProcess) -> None:
    with raw(broker, "bob") as c:
        assert _fetch_code(c, "events") == ErrorCode.NONE
        assert _fetch_code(c, "secret") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert _fetch_code(c, "ghost") == ErrorCode.TOPIC_AUTHORIZATION_FAILED  # missing looks the same
    admin = admin_client(broker, "admin")
    try:
        admin.create_acls([acl(Rt.TOPIC, "*", Op.READ, "User:*"),
                           acl(Rt.TOPIC, "ev", Op.READ, "User:bob", perm=AclPermissionType.DENY,
                               pattern=PatternType.PREFIXED)]).all().result(20)
        with raw(broker, "bob") as c:
            assert _fetch_code(c, "events") == ErrorCode.TOPIC_AUTHORIZATION_FAILED  # DENY wins
            assert _fetch_code(c, "secret") == ErrorCode.NONE  # the wildcard ALLOW
    finally:
        admin.delete_acls([AclBindingFilter(ResourcePatternFilter(Rt.TOPIC, n, PatternType.ANY),
                                            AccessControlEntryFilter(operation=Op.READ)) for n in ("*", "ev")]
                          ).all().result(20)
        admin.close(5)


def test_inter_broker_apis_need_cluster_action(broker: BrokerProcess) -> None:
    with raw(broker, "alice") as c:
        assert _fetch_code(c, "events", replica_id=1) == ErrorCode.TOPIC_AUTHORIZATION_FAILED  # follower fetch
        um = c.request(ApiKey.UPDATE_METADATA, 7, UpdateMetadataRequest(controller_id=1, controller_epoch=99,
                                                                         broker_epoch=1))
        assert um.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        tid = uuid.uuid4()
        lai = c.request(ApiKey.LEADER_AND_ISR, 5, LeaderAndIsrRequest(
            controller_id=1, controller_epoch=99, broker_epoch=1, topic_states=[
                LeaderAndIsrRequest.LeaderAndIsrTopicState(topic_name="events", topic_id=tid, partition_states=[
                    LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                        topic_name="events", partition_index=0, controller_epoch=99, leader=7, leader_epoch=50,
                        isr=[7], partition_epoch=50, replicas=[7])])]))
        assert lai.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert _fetch_code(c, "events") == ErrorCode.NONE  # still led here: nothing was applied


# -- allow.everyone.if.no.acl.found and restarts ------------------------------------------------------------------

def test_allow_everyone_if_no_acl_found_and_acls_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    b = start_broker(data, **{"allow.everyone.if.no.acl.found": "true"})
    try:
        admin = admin_client(b, "admin")
        try:
            admin.create_topics([NewTopic("open", 1, 1), NewTopic("guarded", 1, 1)]).all().result(30)
            admin.create_acls([acl(Rt.TOPIC, "guarded", Op.WRITE, "User:alice")]).all().result(20)
        finally:
            admin.close(5)
        assert confluent_produce(b, "bob", "open") is None  # no ACL on the topic: everyone
        err = confluent_produce(b, "bob", "guarded")  # an ACL exists: only what it allows
        assert err is not None and err.code() == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        b.stop()
        b = start_broker(data)  # the default again: no ACL means no access; the stored ACLs are back
        assert confluent_produce(b, "alice", "guarded") is None
        err = confluent_produce(b, "bob", "open")
        assert err is not None and err.code() == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    finally:
        b.stop()


# -- The rest of the table, by hand-built requests ----------------------------------------------------------------

def _bits(ops: int) -> set[AclOperation]:
    return {op for op in AclOperation if op > 2 and ops >> int(op) & 1}


def test_group_and_admin_apis_matrix(broker: BrokerProcess) -> None:
    from strom.protocol import messages as m

    with raw(broker, "admin") as c:  # a group with a committed offset, made by the super user
        def commit() -> int:
            r = c.request(ApiKey.OFFSET_COMMIT, 8, OffsetCommitRequest(
                group_id="matrix-g", generation_id_or_member_epoch=-1, member_id="", topics=[
                    OffsetCommitRequest.OffsetCommitRequestTopic(name="events", partitions=[
                        OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]))
            return r.topics[0].partitions[0].error_code

        # as a client does, FindCoordinator first: on a broker no earlier test used for groups it creates
        # __consumer_offsets, and the coordinator is available once its partitions are loaded
        c.request(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="matrix-g", key_type=0))
        deadline = time.monotonic() + 30
        while (code := commit()) in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
            assert time.monotonic() < deadline, "the group coordinator never became available"
            time.sleep(0.1)
        assert code == ErrorCode.NONE
        listed = c.request(ApiKey.LIST_GROUPS, 4, m.ListGroupsRequest(states_filter=[]))
        assert "matrix-g" in {g.group_id for g in listed.groups}
        cluster = c.request(ApiKey.DESCRIBE_CLUSTER, 0, m.DescribeClusterRequest(
            include_cluster_authorized_operations=True))
        assert _bits(cluster.cluster_authorized_operations) == {
            Op.CREATE, Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
            Op.IDEMPOTENT_WRITE}
    G = ErrorCode.GROUP_AUTHORIZATION_FAILED
    T = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    with raw(broker, "bob") as c:  # bob: READ on events, nothing on matrix-g, nothing on the cluster
        listed = c.request(ApiKey.LIST_GROUPS, 4, m.ListGroupsRequest(states_filter=[]))
        assert "matrix-g" not in {g.group_id for g in listed.groups}
        described = c.request(ApiKey.DESCRIBE_GROUPS, 5, m.DescribeGroupsRequest(groups=["matrix-g"]))
        assert described.groups[0].error_code == G
        deleted = c.request(ApiKey.DELETE_GROUPS, 2, m.DeleteGroupsRequest(groups_names=["matrix-g"]))
        assert deleted.results[0].error_code == G
        od = c.request(ApiKey.OFFSET_DELETE, 0, m.OffsetDeleteRequest(group_id="matrix-g", topics=[
            m.OffsetDeleteRequest.OffsetDeleteRequestTopic(name="events", partitions=[
                m.OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)])]))
        assert od.error_code == G
        hb = c.request(ApiKey.HEARTBEAT, 4, m.HeartbeatRequest(group_id="matrix-g", generation_id=1, member_id="x"))
        assert hb.error_code == G
        cluster = c.request(ApiKey.DESCRIBE_CLUSTER, 0, m.DescribeClusterRequest(
            include_cluster_authorized_operations=True))
        assert cluster.error_code == ErrorCode.NONE and cluster.cluster_authorized_operations == 0
        dirs = c.request(ApiKey.DESCRIBE_LOG_DIRS, 4, m.DescribeLogDirsRequest(topics=None))
        assert (dirs.error_code, dirs.results) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
        moved = c.request(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, m.AlterReplicaLogDirsRequest(dirs=[
            m.AlterReplicaLogDirsRequest.AlterReplicaLogDir(path="/nowhere", topics=[
                m.AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(name="events", partitions=[0])])]))
        assert [p.error_code for t in moved.results for p in t.partitions] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]

        lo = c.request(ApiKey.LIST_OFFSETS, 7, m.ListOffsetsRequest(replica_id=-1, topics=[
            m.ListOffsetsRequest.ListOffsetsTopic(name=n, partitions=[
                m.ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])
            for n in ("secret", "events")]))
        assert [t.partitions[0].error_code for t in lo.topics] == [T, ErrorCode.NONE]
        ofe = c.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, m.OffsetForLeaderEpochRequest(replica_id=-1, topics=[
            m.OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=n, partitions=[
                m.OffsetForLeaderEpochRequest.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1,
                                                                       leader_epoch=0)])
            for n in ("secret", "events")]))
        assert [t.partitions[0].error_code for t in ofe.topics] == [T, ErrorCode.NONE]
        cp = c.request(ApiKey.CREATE_PARTITIONS, 3, m.CreatePartitionsRequest(timeout_ms=10000, topics=[
            m.CreatePartitionsRequest.CreatePartitionsTopic(name="events", count=4)]))
        assert cp.results[0].error_code == T
        dr = c.request(ApiKey.DELETE_RECORDS, 2, m.DeleteRecordsRequest(timeout_ms=10000, topics=[
            m.DeleteRecordsRequest.DeleteRecordsTopic(name="events", partitions=[
                m.DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=-1)])]))
        assert dr.topics[0].partitions[0].error_code == T
        pid = c.request(ApiKey.INIT_PRODUCER_ID, 4, m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000))
        assert pid.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED  # no IDEMPOTENT_WRITE, no WRITE anywhere
        el = c.request(ApiKey.ELECT_LEADERS, 2, m.ElectLeadersRequest(election_type=0, timeout_ms=10000,
                                                                      topic_partitions=None))
        assert el.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    with raw(broker, "alice") as c:  # WRITE on orders: idempotent producer id yes, a transactional id no
        assert c.request(ApiKey.INIT_PRODUCER_ID, 4, m.InitProducerIdRequest(
            transactional_id=None, transaction_timeout_ms=60000)).error_code == ErrorCode.NONE
        assert c.request(ApiKey.INIT_PRODUCER_ID, 4, m.InitProducerIdRequest(
            transactional_id="tx", transaction_timeout_ms=60000)).error_code == \
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        before = end_offset(broker, "orders")
        produced = c.request(ApiKey.PRODUCE, 9, m.ProduceRequest(transactional_id="tx", acks=-1, timeout_ms=10000,
                                                                 topic_data=[m.ProduceRequest.TopicProduceData(
                                                                     name="orders", partition_data=[
                                                                         m.ProduceRequest.PartitionProduceData(
                                                                             index=0, records=b"not checked")])]))
        assert produced.responses[0].partition_responses[0].error_code == \
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert end_offset(broker, "orders") == before
        fc = c.request(ApiKey.FIND_COORDINATOR, 4, FindCoordinatorRequest(key_type=1, coordinator_keys=["tx"]))
        assert fc.coordinators[0].error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    admin = admin_client(broker, "admin")
    try:
        admin.create_acls([acl(Rt.GROUP, "matrix-g", Op.DESCRIBE, "User:bob")]).all().result(20)
        assert len(admin.describe_topics(["events"])["events"].result(20).partitions) == 1  # not grown
    finally:
        admin.close(5)
    with raw(broker, "bob") as c:
        listed = c.request(ApiKey.LIST_GROUPS, 4, m.ListGroupsRequest(states_filter=[]))
        assert "matrix-g" in {g.group_id for g in listed.groups}
        described = c.request(ApiKey.DESCRIBE_GROUPS, 5, m.DescribeGroupsRequest(
            groups=["matrix-g"], include_authorized_operations=True))
        assert described.groups[0].error_code == ErrorCode.NONE
        assert _bits(described.groups[0].authorized_operations) == {Op.DESCRIBE}
        fetched = c.request(ApiKey.OFFSET_FETCH, 7, OffsetFetchRequest(group_id="matrix-g", topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name=n, partition_indexes=[0]) for n in ("events", "secret")]))
        assert [(t.name, t.partitions[0].error_code, t.partitions[0].committed_offset) for t in fetched.topics] == \
            [("events", ErrorCode.NONE, 1), ("secret", T, -1)]


def test_stroms_consumer_reports_the_refusals(broker: BrokerProcess) -> None:
    import time

    from strom import KafkaConsumer
    from strom.common.error_codes import GroupAuthorizationFailedError

    def first_error(user: str, group: str, topic: str) -> BaseException | None:
        c = KafkaConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                           "key.deserializer": "str", "value.deserializer": "str", **sasl(user)})
        try:
            c.subscribe([topic])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    c.poll(0.5)
                except Exception as e:  # the refusal is what this test waits for
                    return e
            return None
        finally:
            c.close()

    assert isinstance(first_error("bob", "alice-only", "events"), GroupAuthorizationFailedError)
    assert isinstance(first_error("alice", "alice-reader", "secret"), TopicAuthorizationFailedError)
