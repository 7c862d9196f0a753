"""Framing (FrameDecoder) and the sans-I/O KafkaConnection in client and server roles."""

from __future__ import annotations

import struct

import pytest

from strom.common.errors import ProtocolError
from strom.protocol.api_keys import ApiKey
from strom.protocol.connection import FrameDecoder, KafkaConnection
from strom.protocol.headers import RequestHeader, encode_response
from strom.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
)

pytestmark = pytest.mark.unit


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_single_and_many_frames_in_one_chunk() -> None:
    d = FrameDecoder()
    payloads = [b"a", b"", b"hello", bytes(1000)]
    out = d.feed(b"".join(frame(p) for p in payloads))
    assert [bytes(f) for f in out] == payloads
    assert d.buffered == 0


def test_partial_frames_byte_by_byte() -> None:
    d = FrameDecoder()
    stream = frame(b"first") + frame(b"second") + frame(b"x" * 300)
    got = []
    for i in range(len(stream)):
        got.extend(bytes(f) for f in d.feed(stream[i:i + 1]))
    assert got == [b"first", b"second", b"x" * 300]
    assert d.buffered == 0


def test_split_at_every_position() -> None:
    stream = frame(b"abc") + frame(b"defgh") + frame(b"")
    for cut in range(len(stream) + 1):
        d = FrameDecoder()
        got = [bytes(f) for f in d.feed(stream[:cut])] + [bytes(f) for f in d.feed(stream[cut:])]
        assert got == [b"abc", b"defgh", b""], cut


def test_zero_copy_for_bytes_and_copies_for_mutable_buffers() -> None:
    data = frame(b"payload")
    out = FrameDecoder().feed(data)
    assert out[0].obj is data
    buf = bytearray(frame(b"payload"))
    out = FrameDecoder().feed(buf)
    buf[4:] = b"XXXXXXX"  # caller reuses its receive buffer
    assert bytes(out[0]) == b"payload"


def test_large_frame_in_many_chunks_is_linear() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    stream = frame(payload)
    d = FrameDecoder()
    got = []
    for i in range(0, len(stream), 1000):
        got.extend(d.feed(stream[i:i + 1000]))
    assert len(got) == 1 and got[0] == payload


def test_oversize_and_negative_frames() -> None:
    d = FrameDecoder(max_frame_size=10)
    assert [bytes(f) for f in d.feed(frame(b"0123456789"))] == [b"0123456789"]
    with pytest.raises(ProtocolError, match="larger than 10"):
        FrameDecoder(max_frame_size=10).feed(frame(b"0123456789A"))
    with pytest.raises(ProtocolError, match=r"size = -1\)"):
        FrameDecoder().feed(struct.pack(">i", -1))
    d = FrameDecoder(max_frame_size=10)
    d.feed(b"\x00\x00")  # size split across chunks
    with pytest.raises(ProtocolError):
        d.feed(b"\x10\x00")


def test_client_server_round_trip() -> None:
    client = KafkaConnection("client", client_id="strom-test")
    server = KafkaConnection("server")
    cid1, wire1 = client.send_request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
        client_software_name="strom", client_software_version="0.1"))
    cid2, wire2 = client.send_request(ApiKey.METADATA, 12, MetadataRequest(topics=None))
    assert (cid1, cid2) == (0, 1) and client.in_flight_count == 2
    reqs = server.receive_bytes(wire1 + wire2[:5])
    reqs += server.receive_bytes(wire2[5:])
    assert [h.api_key for h, _ in reqs] == [18, 3]
    (h1, body1), (h2, body2) = reqs
    assert h1.client_id == "strom-test" and h1.correlation_id == 0
    assert ApiVersionsRequest.decode(body1, h1.api_version).client_software_name == "strom"
    assert MetadataRequest.decode(body2, h2.api_version).topics is None

    r1 = server.encode_response(h1, ApiVersionsResponse(api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=3, min_version=0, max_version=12)]))
    r2 = server.encode_response(h2, MetadataResponse(cluster_id="c", controller_id=1))
    assert r1[4:8] == b"\x00\x00\x00\x00" and r1[8:10] == b"\x00\x00"  # header v0: no tagged byte
    out = client.receive_bytes(r1 + r2)
    assert [(c, k, v) for c, k, v, _ in out] == [(0, 18, 3), (1, 3, 12)]
    assert out[0][3].api_keys[0].max_version == 12
    assert out[1][3].cluster_id == "c"
    assert client.in_flight_count == 0


def test_correlation_mismatch_and_unexpected_response() -> None:
    client = KafkaConnection("client")
    client.send_request(ApiKey.METADATA, 1, MetadataRequest(topics=[]))
    wrong = encode_response(5, 3, 1, MetadataResponse())
    with pytest.raises(ProtocolError, match="correlation id mismatch"):
        client.receive_bytes(wrong)
    with pytest.raises(ProtocolError, match="no request in flight"):
        KafkaConnection("client").receive_bytes(encode_response(0, 3, 1, MetadataResponse()))


def test_acks_zero_produce_is_not_in_flight() -> None:
    client = KafkaConnection("client")
    cid, wire = client.send_request(ApiKey.PRODUCE, 3, ProduceRequest(acks=0), expect_response=False)
    assert client.in_flight_count == 0 and cid == 0
    cid2, _ = client.send_request(ApiKey.METADATA, 1, MetadataRequest())
    assert cid2 == 1


def test_api_versions_falls_back_to_v0_body() -> None:
    client = KafkaConnection("client")
    client.send_request(ApiKey.API_VERSIONS, 4, ApiVersionsRequest())
    v0 = ApiVersionsResponse(error_code=35, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=2)])
    # the broker answers an unsupported version with a v0 body (header v0 as always)
    (cid, key, version, resp), = client.receive_bytes(encode_response(0, 18, 0, v0))
    assert (cid, key, version) == (0, 18, 0) and resp == v0


def test_server_unknown_api_key_and_preencoded_bodies() -> None:
    server = KafkaConnection("server")
    raw = struct.pack(">hhi", 99, 0, 77) + b"\x00\x01z" + b"body"
    (header, body), = server.receive_bytes(frame(raw))
    assert (header.api_key, header.correlation_id, header.client_id, bytes(body)) == (99, 77, "z", b"body")
    wire = server.encode_response(RequestHeader(3, 12, 4), b"\x01\x02")
    assert wire == frame(b"\x00\x00\x00\x04" + b"\x00" + b"\x01\x02")  # header v1 has a tagged byte


def test_roles_are_checked() -> None:
    with pytest.raises(ValueError):
        KafkaConnection("peer")
    with pytest.raises(ProtocolError):
        KafkaConnection("server").send_request(18, 0, ApiVersionsRequest())
