"""Cross-check against kafka-python's independent codecs (installed in the venv; only its output is used).

For every API both implement: encode with strom -> decode with kafka-python -> re-encode with kafka-python
must give the same bytes; plus a few direct byte comparisons of frames built on both sides.
"""

from __future__ import annotations

import importlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_strategies import struct_strategy

from strom.protocol.headers import RequestHeader, encode_request
from strom.protocol.messages import REQUESTS, RESPONSES, ApiVersionsRequest, MetadataRequest, ProduceRequest

pytestmark = pytest.mark.unit

kafka_protocol = pytest.importorskip("kafka.protocol")


def _their_classes() -> dict[str, type]:
    out: dict[str, type] = {}
    for modname in ("metadata", "producer", "consumer", "admin", "sasl"):
        try:
            mod = importlib.import_module(f"kafka.protocol.{modname}")
        except ImportError:
            continue
        for name in dir(mod):
            c = getattr(mod, name)
            if isinstance(c, type) and getattr(c, "_json", None) and hasattr(c, "max_version"):
                out[name] = c
    return out


THEIRS = _their_classes()
OURS = [c for c in (*REQUESTS.values(), *RESPONSES.values()) if c.NAME in THEIRS]


def _strip_unknown_tags(o: object) -> None:
    # kafka-python does not keep unknown tagged fields; compare without them
    if hasattr(o, "unknown_tagged_fields"):
        o.unknown_tagged_fields = {}
        for name in o.__slots__:
            value = getattr(o, name)
            for item in value if isinstance(value, list) else [value]:
                _strip_unknown_tags(item)


def test_kafka_python_covers_most_apis() -> None:
    assert len(OURS) >= 60


@pytest.mark.parametrize("cls", OURS, ids=lambda c: c.NAME)
@settings(max_examples=3, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(data=st.data())
def test_bytes_survive_kafka_python_roundtrip(cls: type, data: st.DataObject) -> None:
    theirs = THEIRS[cls.NAME]
    lo, hi = cls.VALID_VERSIONS
    for version in range(lo, min(hi, theirs.max_version) + 1):
        obj = data.draw(struct_strategy(cls, version), label=f"v{version}")
        _strip_unknown_tags(obj)
        if cls.NAME == "ApiVersionsResponse":
            obj.error_code = 0  # kafka-python parses error responses as v0 bodies (KIP-511 fallback)
        ours = obj.encode(version)
        their_obj = theirs.decode(ours, version=version)
        their_obj._header = None
        assert bytes(their_obj.encode(version=version)) == ours, f"{cls.NAME} v{version}"


def test_metadata_v1_request_frame_matches() -> None:
    K = THEIRS["MetadataRequest"]
    theirs = K[1](topics=[K.MetadataRequestTopic(name="foo")])
    theirs.with_header(correlation_id=5, client_id="c")
    ours = encode_request(RequestHeader(3, 1, 5, "c"),
                          MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="foo")]))
    assert bytes(theirs.encode(header=True, framed=True)) == ours


def test_produce_v3_and_v9_request_frames_match() -> None:
    K = THEIRS["ProduceRequest"]
    for version in (3, 9):
        theirs = K[version](transactional_id="tx", acks=-1, timeout_ms=30000, topic_data=[
            K.TopicProduceData(name="t", partition_data=[
                K.TopicProduceData.PartitionProduceData(index=0, records=b"abc"),
                K.TopicProduceData.PartitionProduceData(index=1, records=b"")])])
        theirs.with_header(correlation_id=9, client_id="p")
        P = ProduceRequest
        ours = encode_request(RequestHeader(0, version, 9, "p"), P(
            transactional_id="tx", acks=-1, timeout_ms=30000, topic_data=[P.TopicProduceData(name="t", partition_data=[
                P.PartitionProduceData(index=0, records=b"abc"), P.PartitionProduceData(index=1, records=b"")])]))
        assert bytes(theirs.encode(header=True, framed=True)) == ours, version


def test_api_versions_v3_request_frame_matches() -> None:
    K = THEIRS["ApiVersionsRequest"]
    theirs = K[3](client_software_name="strom", client_software_version="0.1")
    theirs.with_header(correlation_id=1, client_id="x")
    ours = encode_request(RequestHeader(18, 3, 1, "x"),
                          ApiVersionsRequest(client_software_name="strom", client_software_version="0.1"))
    assert bytes(theirs.encode(header=True, framed=True)) == ours
