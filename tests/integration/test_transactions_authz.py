"""The transaction APIs with an authorizer (``authorizer.class.name`` + SASL PLAIN): WRITE on the transactional id
and the topics, READ on the group for offsets, CLUSTER_ACTION for WriteTxnMarkers, DESCRIBE to list/describe."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.admin.admin_client import AdminClient
from strom.admin.models import NewTopic
from strom.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.common.error_codes import ErrorCode
from strom.common.errors import KafkaError
from strom.producer import KafkaProducer
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages import (
    EndTxnRequest,
    ListTransactionsRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
    WriteTxnMarkersRequest,
)
from strom.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from strom.testing.broker_process import BrokerProcess, free_port
from strom.testing.raw_client import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
Op, Rt = AclOperation, ResourceType
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-pw" '
        'user_alice="alice-pw" user_bob="bob-pw";')


def sasl(user: str) -> dict[str, Any]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": f"{user}-pw"}


def acl(rt: ResourceType, name: str, op: AclOperation, principal: str) -> AclBinding:
    return AclBinding(ResourcePattern(rt, name, PatternType.LITERAL),
                      AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    port = free_port()
    b = BrokerProcess(data_dir=Path(tmp_path_factory.mktemp("txn-authz")) / "data", port=port, overrides={
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}", "security.inter.broker.protocol": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin", "transaction.state.log.num.partitions": "2"}).start(timeout=60)
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "default.api.timeout.ms": 15000, **sasl("admin")})
    try:
        admin.create_topics([NewTopic("tz", 1, 1)]).all().result(30)
        admin.create_acls([acl(Rt.TOPIC, "tz", Op.WRITE, "User:alice"), acl(Rt.TOPIC, "tz", Op.WRITE, "User:bob"),
                           acl(Rt.TRANSACTIONAL_ID, "alice-tx", Op.WRITE, "User:alice")]).all().result(30)
    finally:
        admin.close(5)
    yield b
    b.stop()
    b.cleanup()


def producer(broker: BrokerProcess, user: str, tid: str) -> KafkaProducer:
    return KafkaProducer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid, "key.serializer": "bytes",
                          "value.serializer": "bytes", "max.block.ms": 15000, **sasl(user)})


def raw(broker: BrokerProcess, user: str) -> RawClient:
    c = RawClient(broker.bootstrap, timeout=20)
    assert c.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
    assert c.request(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(
        auth_bytes=f"\0{user}\0{user}-pw".encode())).error_code == 0
    return c


def test_transactional_id_acls(broker: BrokerProcess) -> None:
    with producer(broker, "alice", "alice-tx") as p:
        p.init_transactions()
        p.begin_transaction()
        p.send("tz", value=b"ok").get(15)
        p.commit_transaction()
    with producer(broker, "bob", "alice-tx") as p, pytest.raises(KafkaError) as ei:
        p.init_transactions()
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in str(ei.value)
    with raw(broker, "bob") as c:
        end = c.request(ApiKey.END_TXN, 3, EndTxnRequest(transactional_id="alice-tx", producer_id=0,
                                                         producer_epoch=0, committed=True))
        assert end.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        listed = c.request(ApiKey.LIST_TRANSACTIONS, 0, ListTransactionsRequest(state_filters=[],
                                                                                producer_id_filters=[]))
        assert listed.transaction_states == []  # bob may not describe alice-tx
    with raw(broker, "alice") as c:
        listed = c.request(ApiKey.LIST_TRANSACTIONS, 0, ListTransactionsRequest(state_filters=[],
                                                                                producer_id_filters=[]))
        assert [s.transactional_id for s in listed.transaction_states] == ["alice-tx"]
        markers = c.request(ApiKey.WRITE_TXN_MARKERS, 1, WriteTxnMarkersRequest(markers=[
            WriteTxnMarkersRequest.WritableTxnMarker(producer_id=0, producer_epoch=0, transaction_result=False,
                                                     coordinator_epoch=0, topics=[
                WriteTxnMarkersRequest.WritableTxnMarkerTopic(name="tz", partition_indexes=[0])])]))
        assert markers.markers[0].topics[0].partitions[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        # AddPartitionsToTxn v4+ (KIP-890: leaders verifying a transaction) is for brokers: CLUSTER_ACTION.
        verify = AddPartitionsToTxnRequest(transactions=[AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
            transactional_id="alice-tx", producer_id=0, producer_epoch=0, verify_only=True,
            topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="tz", partitions=[0])])])
        refused = c.request(ApiKey.ADD_PARTITIONS_TO_TXN, 4, verify)
        assert (refused.error_code, refused.results_by_transaction) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
    with raw(broker, "admin") as c:  # a super user, as brokers are
        answered = c.request(ApiKey.ADD_PARTITIONS_TO_TXN, 4, verify)
        assert answered.error_code == ErrorCode.NONE
        # alice's transaction (producer 0, epoch 0) was committed: tz-0 is in no ongoing transaction
        assert answered.results_by_transaction[0].topic_results[0].results_by_partition[0].partition_error_code \
            == ErrorCode.INVALID_TXN_STATE
