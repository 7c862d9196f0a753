"""SendBuilder / MultiSend: a response whose records fields are regions outside memory encodes to parts that,
joined, are byte for byte the frame of the same response with the records in memory; sizes count the regions."""

from __future__ import annotations

import struct

import pytest

from strom.common.errors import ProtocolError
from strom.protocol.messages.fetch import FetchResponse
from strom.protocol.send import MultiSend, SendBuilder, TransferableRecords

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


class _Region(TransferableRecords):
    """Records kept aside (a stand-in for a file region: the protocol layer only sees a size and the bytes)."""

    __slots__ = ("data", "released")

    def __init__(self, data: bytes) -> None:
        super().__init__(len(data), 0)
        self.data = data
        self.released = 0

    def fileno(self) -> int:
        return -1

    def read_bytes(self) -> bytes:
        return self.data

    def release(self) -> None:
        self.released += 1


def _response(records: list[object]) -> FetchResponse:
    parts = [FetchResponse.PartitionData(partition_index=i, high_watermark=100 + i, records=r)
             for i, r in enumerate(records)]
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        FetchResponse.FetchableTopicResponse(topic="t", partitions=parts)])


def _frame(response: FetchResponse, version: int) -> bytearray | MultiSend:
    out = SendBuilder(8)
    response.encode_into(out, version)
    struct.pack_into(">ii", out, 0, out.total_size - 4, 42)
    return out.build()


@pytest.mark.parametrize("version", range(4, 18))
def test_regions_encode_to_the_same_bytes_as_records_in_memory(version: int) -> None:
    data = [b"A" * 300, b"", b"B" * 70_000, None, b"C" * 5]
    plain = _frame(_response([d for d in data]), version)
    assert isinstance(plain, bytearray)  # no region: a plain frame, as before
    regions = [_Region(d) if d else d for d in data]
    send = _frame(_response(regions), version)
    assert isinstance(send, MultiSend)
    assert send.size == len(plain) and struct.unpack_from(">i", plain)[0] == len(plain) - 4
    assert [p for p in send.parts if isinstance(p, TransferableRecords)] == [r for r in regions if r]
    assert send.to_bytes() == bytes(plain)
    send.release()
    assert all(r.released == 1 for r in regions if r)


def test_a_region_cannot_be_encoded_into_a_plain_buffer() -> None:
    with pytest.raises(ProtocolError, match="SendBuilder"):
        _response([_Region(b"x" * 10)]).encode(12)


def test_a_region_giving_fewer_bytes_than_its_size_is_refused() -> None:
    region = _Region(b"x" * 10)
    send = _frame(_response([region]), 11)
    region.data = b"x" * 9  # the file behind it was cut
    with pytest.raises(ValueError, match="assembled"):
        send.to_bytes()
