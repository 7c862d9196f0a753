"""NetworkReceive / NetworkSend framing over a scripted transport (partial reads and writes)."""

from __future__ import annotations

import struct

import pytest

from strom.network.errors import InvalidReceiveError
from strom.network.network_receive import NetworkReceive, NetworkSend

pytestmark = [pytest.mark.component, pytest.mark.timeout(30)]


class ChunkTransport:
    """Hands out the scripted chunks one per read (``b""`` = nothing available now, ``None`` = EOF)."""

    def __init__(self, chunks: list[bytes | None]) -> None:
        self.chunks = list(chunks)
        self.pending = b""

    def read(self, buf: memoryview) -> int:
        if not self.pending:
            if not self.chunks:
                return 0
            nxt = self.chunks.pop(0)
            if nxt is None:
                return -1
            self.pending = nxt
        n = min(len(buf), len(self.pending))
        buf[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n


class TrickleTransport:
    """Accepts at most ``step`` bytes per write."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.data = bytearray()

    def write(self, buffers: list[memoryview]) -> int:
        first = bytes(buffers[0][: self.step])
        self.data += first
        return len(first)


def _read_all(receive: NetworkReceive, transport: ChunkTransport, calls: int = 100) -> int:
    n = 0
    for _ in range(calls):
        if receive.complete():
            break
        receive.read_from(transport)
        n += 1
    return n


def test_size_and_payload_split_across_reads() -> None:
    """§18 items 80, 81: the 4-byte big-endian size and the payload may arrive in any pieces."""
    data = struct.pack(">i", 5) + b"hello"
    chunks: list[bytes | None] = []
    for i in range(len(data)):  # one byte, then nothing available: each read_from call gets one byte
        chunks += [data[i:i + 1], b""]
    transport = ChunkTransport(chunks)
    receive = NetworkReceive(100, "n")
    calls = _read_all(receive, transport)
    assert receive.complete() and bytes(receive.payload()) == b"hello"
    assert calls == 9
    assert receive.size() == 9


def test_incomplete_frame_waits_for_more() -> None:
    """§18 item 81: a partial frame is not complete; reading resumes where it stopped."""
    transport = ChunkTransport([struct.pack(">i", 4) + b"ab", b"", b"", b"cd"])
    receive = NetworkReceive(100)
    receive.read_from(transport)
    assert not receive.complete()
    receive.read_from(transport)
    assert not receive.complete()
    receive.read_from(transport)
    assert receive.complete() and bytes(receive.payload()) == b"abcd"


def test_zero_size_is_empty_payload() -> None:
    """§18 item 80: size 0 completes with an empty payload."""
    receive = NetworkReceive(100)
    receive.read_from(ChunkTransport([struct.pack(">i", 0)]))
    assert receive.complete() and bytes(receive.payload()) == b""


@pytest.mark.parametrize(("size", "message"), [
    (-1, "Invalid receive (size = -1)"),
    (101, "Invalid receive (size = 101 larger than 100)"),
])
def test_invalid_sizes(size: int, message: str) -> None:
    """§18 item 80: Kafka's InvalidReceiveException messages."""
    with pytest.raises(InvalidReceiveError) as e:
        NetworkReceive(100).read_from(ChunkTransport([struct.pack(">i", size)]))
    assert str(e.value) == message


def test_unlimited_max_size() -> None:
    """§18 item 80: without a maximum receive size any non-negative size is read."""
    receive = NetworkReceive()
    receive.read_from(ChunkTransport([struct.pack(">i", 1000) + b"x" * 1000]))
    assert receive.complete()


@pytest.mark.parametrize("chunks", [[b"\x00\x00", None], [struct.pack(">i", 3) + b"a", None]])
def test_eof_mid_frame(chunks: list[bytes | None]) -> None:
    """§18 item 80: end of stream in the middle of a frame raises EOFError."""
    receive = NetworkReceive(100)
    transport = ChunkTransport(chunks)
    with pytest.raises(EOFError):
        for _ in range(5):
            receive.read_from(transport)


def test_network_send_partial_writes() -> None:
    """§10.5 (partial writes): a send written a few bytes at a time completes exactly once with every byte in order."""
    send = NetworkSend("n", b"abc", b"", b"defgh")
    transport = TrickleTransport(2)
    writes = 0
    while not send.completed():
        assert send.write_to(transport) > 0
        writes += 1
    assert bytes(transport.data) == b"abcdefgh"
    assert writes == 5 and send.size == 8 and send.remaining() == 0


def test_sized_send_has_prefix() -> None:
    """§18 item 80: a frame is the 4-byte big-endian size followed by the payload."""
    send = NetworkSend.sized("n", b"xyz")
    transport = TrickleTransport(100)
    while not send.completed():
        send.write_to(transport)
    assert bytes(transport.data) == struct.pack(">i", 3) + b"xyz"
