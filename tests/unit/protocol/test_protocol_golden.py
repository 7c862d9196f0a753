"""Golden bytes built by hand from the spec (protocol-guide.txt PART 2 and the message JSON files)."""

from __future__ import annotations

import uuid

import pytest

from strom.common.errors import ProtocolError
from strom.protocol.api_keys import ApiKey
from strom.protocol.headers import (
    RequestHeader,
    decode_request_header,
    decode_response_header,
    encode_request,
    encode_response,
    request_header_version,
    response_header_version,
)
from strom.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreateTopicsRequest,
    FetchResponse,
    ListOffsetsRequest,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from strom.protocol.messages.headers_gen import RequestHeader as GenRequestHeader

pytestmark = pytest.mark.unit


def h(text: str) -> bytes:
    return bytes.fromhex("".join(text.split()))


def test_api_keys() -> None:
    assert ApiKey.PRODUCE == 0 and ApiKey.FETCH == 1 and ApiKey.API_VERSIONS == 18
    assert ApiKey.DESCRIBE_PRODUCERS == 61 and ApiKey.INCREMENTAL_ALTER_CONFIGS == 44
    assert ApiKey.LEADER_AND_ISR == 4 and ApiKey.ALTER_PARTITION == 56 and ApiKey.CREATE_ACLS == 30
    assert len(ApiKey) == 59  # every request schema in the spec set is generated


def test_api_versions_v0_request_frame() -> None:
    frame = encode_request(RequestHeader(18, 0, 7, "c"), ApiVersionsRequest())
    #            size      key  ver  corr      client_id "c"
    assert frame == h("0000000b  0012 0000 00000007 0001 63")


def test_api_versions_v3_request_frame() -> None:
    body = ApiVersionsRequest(client_software_name="strom", client_software_version="1.0")
    frame = encode_request(RequestHeader(18, 3, 7, "c"), body)
    expected = h(
        "00 12 0003 00000007"  # header v2: key, version, correlation id
        "0001 63"  # ClientId stays INT16-length NULLABLE_STRING even in header v2
        "00"  # header tagged fields
        "06 7374726f6d"  # COMPACT_STRING "strom" (length+1 = 6)
        "04 312e30"  # COMPACT_STRING "1.0"
        "00"  # body tagged fields
    )
    assert frame == len(expected).to_bytes(4, "big") + expected
    header, off = decode_request_header(frame[4:])
    assert header == RequestHeader(18, 3, 7, "c")
    assert ApiVersionsRequest.decode(frame[4 + off:], 3) == body
    # the generated header class agrees with the hand-written header codec
    gen = GenRequestHeader(request_api_key=18, request_api_version=3, correlation_id=7, client_id="c")
    assert gen.encode(2) == frame[4:4 + off]


def test_metadata_v1_request() -> None:
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="foo")])
    assert req.encode(1) == h("00000001 0003 666f6f")
    assert MetadataRequest(topics=None).encode(1) == h("ffffffff")  # null = all topics
    assert MetadataRequest(topics=[]).encode(0) == h("00000000")
    # v4 adds AllowAutoTopicCreation (bool, default true)
    assert MetadataRequest(topics=None).encode(4) == h("ffffffff 01")
    assert MetadataRequest.decode(h("00000001 0003 666f6f"), 1) == req


def test_metadata_v12_request_topic_id_and_compact() -> None:
    tid = uuid.UUID("0123456789abcdef0123456789abcdef")
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(topic_id=tid, name=None)],
                          allow_auto_topic_creation=False, include_topic_authorized_operations=True)
    assert req.encode(12) == h("02 0123456789abcdef0123456789abcdef 00 00  00 01  00")


def test_produce_v3_request_frame() -> None:
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=b"abc")])])
    frame = encode_request(RequestHeader(0, 3, 1, "p"), req)
    expected = h(
        "0000 0003 00000001 0001 70"  # header v1
        "ffff"  # TransactionalId null
        "ffff"  # Acks -1
        "00007530"  # TimeoutMs 30000
        "00000001 0001 74"  # [TopicData] 1 x Name "t"
        "00000001 00000000 00000003 616263"  # [PartitionData] 1 x Index 0, Records 3 bytes
    )
    assert frame == len(expected).to_bytes(4, "big") + expected
    header, off = decode_request_header(frame[4:])
    decoded = ProduceRequest.decode(frame[4 + off:], header.api_version)
    records = decoded.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records == b"abc"
    assert decoded == req


def test_produce_v9_request_is_compact() -> None:
    req = ProduceRequest(transactional_id="tx", acks=1, timeout_ms=5, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.PartitionProduceData(index=2, records=None)])])
    assert req.encode(9) == h("03 7478  0001 00000005  02 02 74  02 00000002 00 00  00  00")


def test_records_accept_bytes_like_and_decode_zero_copy() -> None:
    payload = bytearray(b"xyz")
    for rec in (b"xyz", payload, memoryview(payload)):
        req = ProduceRequest(topic_data=[ProduceRequest.TopicProduceData(
            name="t", partition_data=[ProduceRequest.PartitionProduceData(records=rec)])])
        data = req.encode(9)
        view = memoryview(data)
        got = ProduceRequest.decode(view, 9).topic_data[0].partition_data[0].records
        assert got == b"xyz" and got.obj is data  # a slice of the input buffer, not a copy


def test_api_versions_v3_response_uses_header_v0() -> None:
    resp = ApiVersionsResponse(error_code=0, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)], throttle_time_ms=0)
    assert response_header_version(18, 3) == 0
    assert response_header_version(3, 12) == 1 and response_header_version(3, 8) == 0
    assert request_header_version(18, 3) == 2 and request_header_version(18, 2) == 1
    frame = encode_response(9, 18, 3, resp)
    expected = h("00000009"  # response header v0: correlation id only
                 "0000"  # ErrorCode
                 "02 0012 0000 0004 00"  # [ApiKeys] compact, one element + its tagged fields
                 "00000000"  # ThrottleTimeMs
                 "00")  # tagged fields
    assert frame == len(expected).to_bytes(4, "big") + expected
    cid, off = decode_response_header(frame[4:], 18, 3)
    assert cid == 9 and off == 4
    assert ApiVersionsResponse.decode(frame[4 + off:], 3) == resp


def test_api_versions_response_tagged_features() -> None:
    resp = ApiVersionsResponse(finalized_features_epoch=5, zk_migration_ready=True)
    data = resp.encode(3)
    # tags 1 (FinalizedFeaturesEpoch int64) and 3 (ZkMigrationReady bool) written in order
    assert data == h("0000 01 00000000 02 01 08 0000000000000005 03 01 01")
    assert ApiVersionsResponse.decode(data, 3) == resp
    assert resp.encode(2) == h("0000 00000000 00000000")  # no tagged section before v3


def test_produce_v10_response_tagged_current_leader() -> None:
    P = ProduceResponse
    resp = P(responses=[P.TopicProduceResponse(name="t", partition_responses=[
        P.PartitionProduceResponse(index=0, error_code=6, base_offset=-1,
                                   current_leader=P.LeaderIdAndEpoch(leader_id=2, leader_epoch=7))])])
    data = resp.encode(10)
    assert data == h(
        "02 02 74"  # [Responses] 1, Name "t"
        "02 00000000 0006 ffffffffffffffff ffffffffffffffff ffffffffffffffff"  # index, error, offsets
        "01 00"  # RecordErrors empty, ErrorMessage null
        "01 00 09 00000002 00000007 00"  # tagged: CurrentLeader (tag 0, 9 bytes)
        "00"  # topic tagged fields
        "00000000"  # ThrottleTimeMs
        "00")  # NodeEndpoints default -> not written
    assert P.decode(data, 10) == resp
    # default CurrentLeader is not written
    resp.responses[0].partition_responses[0].current_leader = P.LeaderIdAndEpoch()
    assert b"\x01\x00\x09" not in resp.encode(10)


def test_unknown_tagged_fields_are_kept_and_rewritten() -> None:
    data = h("0000 01 00000000 02 05 02 abcd 07 00")  # tags 5 and 7 unknown to v3
    resp = ApiVersionsResponse.decode(data, 3)
    assert resp.unknown_tagged_fields == {5: b"\xab\xcd", 7: b""}
    assert resp.encode(3) == data


def test_fetch_v4_response_aborted_transactions_null() -> None:
    F = FetchResponse
    resp = F(responses=[F.FetchableTopicResponse(topic="t", partitions=[
        F.PartitionData(partition_index=1, high_watermark=10, last_stable_offset=10,
                        aborted_transactions=None, records=b"")])])
    data = resp.encode(4)
    assert data == h("00000000 00000001 0001 74 00000001 00000001 0000 000000000000000a 000000000000000a"
                     " ffffffff 00000000")
    assert F.decode(data, 4) == resp


def test_create_topics_v5_and_list_offsets_defaults() -> None:
    C = CreateTopicsRequest
    req = C(topics=[C.CreatableTopic(name="a", num_partitions=3, replication_factor=1,
                                     configs=[C.CreatableTopicConfig(name="retention.ms", value=None)])],
            timeout_ms=1000)
    data = req.encode(5)
    assert data[:3] == h("02 02 61")
    assert C.decode(data, 5) == req
    lo = ListOffsetsRequest()
    assert lo.replica_id == 0 and lo.isolation_level == 0
    assert ListOffsetsRequest.decode(lo.encode(1), 1) == lo


def test_metadata_response_nested_classes_and_defaults() -> None:
    M = MetadataResponse
    assert M.MetadataResponseTopic.__qualname__ == "MetadataResponse.MetadataResponseTopic"
    p = M.MetadataResponsePartition()
    assert p.leader_epoch == -1 and p.replica_nodes == [] and p.offline_replicas == []
    assert M.MetadataResponseTopic().topic_authorized_operations == -2147483648
    assert M().cluster_id is None and M().controller_id == -1
    assert M.API_KEY == 3 and M.VALID_VERSIONS == (0, 12) and M.FLEXIBLE_VERSIONS_MIN == 9
    assert M.LATEST_VERSION_UNSTABLE is False


def test_unknown_api_key_still_yields_header() -> None:
    raw = h("0063 0005 0000002a 0003 616263 ff ff")  # api key 99 v5, client "abc", then garbage
    header, off = decode_request_header(raw)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (99, 5, 42, "abc")
    assert not header.api_key_known and off == 13
    header, off = decode_request_header(h("0063 0005 0000002a 7fff"))  # bad client id: lenient
    assert (header.api_key, header.correlation_id, off) == (99, 42, 8)
    with pytest.raises(ProtocolError):
        decode_request_header(h("0012 0003 0000"))


def test_encode_errors_are_protocol_errors() -> None:
    with pytest.raises(ProtocolError, match="no version 99"):
        MetadataRequest().encode(99)
    with pytest.raises(ProtocolError):
        ProduceRequest(acks=1 << 20).encode(3)
    with pytest.raises(ProtocolError):
        ProduceRequest(topic_data=None).encode(3)
    with pytest.raises(ProtocolError, match="no version"):
        MetadataRequest.decode(b"", 13)


def test_fields_absent_in_version_are_ignored_and_defaulted() -> None:
    req = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=True)
    assert req.encode(1) == h("ffffffff")
    back = MetadataRequest.decode(req.encode(1), 1)
    assert back.allow_auto_topic_creation is True and back.include_topic_authorized_operations is False


def test_consumer_protocol_subscription_versioned() -> None:
    from strom.protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription

    sub = ConsumerProtocolSubscription(topics=["foo"], user_data=None)
    data = sub.encode_versioned(0)
    assert data == h("0000 00000001 0003 666f6f ffffffff")
    assert ConsumerProtocolSubscription.decode_versioned(data) == (0, sub)
    # a newer version than we know is read with our highest (fields are only ever appended)
    newer = ConsumerProtocolAssignment(assigned_partitions=[
        ConsumerProtocolAssignment.TopicPartition(topic="t", partitions=[0, 1])]).encode_versioned(3)
    newer = b"\x00\x09" + newer[2:] + b"\x00\x00"
    version, got = ConsumerProtocolAssignment.decode_versioned(newer)
    assert version == 9 and got.assigned_partitions[0].partitions == [0, 1]
    with pytest.raises(ProtocolError):
        ConsumerProtocolSubscription.decode_versioned(b"\x00")
