"""Selector over real loopback sockets: partial reads/writes, framing, staging, idle expiry, muting, wakeup."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from strom.common.errors import IllegalStateError
from strom.network.channel_builder import ClientChannelBuilder
from strom.network.kafka_channel import ChannelState
from strom.network.network_receive import NetworkSend
from strom.network.selector import Selector
from strom.network.transport import SimpleMemoryPool
from strom.security.sasl import SaslAuthenticationError
from strom.testing.mock_time import MockTime

from .socket_support import Events, TinyServer, frame, read_exact, read_frame

pytestmark = [pytest.mark.component, pytest.mark.timeout(60)]


@pytest.fixture
def selector():  # type: ignore[no-untyped-def]
    s = Selector(max_receive_size=1 << 20)
    yield s
    s.close()


def _echo(conn: socket.socket) -> None:
    while True:
        conn.sendall(frame(read_frame(conn)))


def test_connect_send_receive_echo(selector: Selector) -> None:
    """§18 items 73, 82: a non-blocking connect completes in a later poll; TCP_NODELAY and SO_KEEPALIVE are on;
    a request goes out and its reply comes back as one receive."""
    server = TinyServer(_echo)
    try:
        selector.connect("n1", server.address, 65536, 65536)
        events = Events(selector)
        events.until(lambda: "n1" in events.connected)
        sock = selector.channel("n1").transport.sock  # type: ignore[union-attr]
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) >= 65536
        assert sock.getblocking() is False
        selector.send(NetworkSend.sized("n1", b"hello"))
        events.until(lambda: events.receives)
        assert events.receives == [("n1", b"hello")]
        assert len(events.sends) == 1
    finally:
        server.close()


def test_frame_dribbled_one_byte_at_a_time_is_reassembled(selector: Selector) -> None:
    """§18 item 81: a frame split across many TCP reads (the server writes one byte at a time) is reassembled
    across polls into one receive. The server stops half-way until the selector has read every byte sent so
    far: the half frame is then held in the channel, nothing is delivered, and the rest completes it."""
    payload = bytes(range(256)) * 4
    data = frame(payload)
    half = len(data) // 2
    half_sent, go_on = threading.Event(), threading.Event()

    def dribble(conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        read_frame(conn)
        for i in range(len(data)):
            if i == half:
                half_sent.set()
                go_on.wait(10)
            conn.sendall(data[i:i + 1])
        time.sleep(5)

    server = TinyServer(dribble)
    try:
        selector.connect("n", server.address)
        events = Events(selector)
        events.until(lambda: "n" in events.connected)
        selector.send(NetworkSend.sized("n", b"go"))
        events.until(half_sent.is_set)
        channel = selector.channel("n")
        assert channel is not None
        sock = channel.transport.sock  # type: ignore[attr-defined]
        events.until(lambda: not _unread_bytes(sock))  # the selector consumed the first half
        assert channel.receive is not None and channel.receive.requested_size == len(payload)
        assert not channel.receive.complete() and events.receives == []
        go_on.set()
        events.until(lambda: events.receives)
        assert events.receives == [("n", payload)]
    finally:
        go_on.set()
        server.close()


def _unread_bytes(sock: socket.socket) -> bool:
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except BlockingIOError:
        return False


def test_several_frames_in_one_read_are_staged_one_per_poll(selector: Selector) -> None:
    """§18 item 81: several frames arriving in one read are all staged and delivered one per channel per
    poll, in order."""
    ready = threading.Event()

    def burst(conn: socket.socket) -> None:
        read_frame(conn)
        conn.sendall(b"".join(frame(b"r%d" % i) for i in range(5)))
        ready.set()
        time.sleep(5)

    server = TinyServer(burst)
    try:
        selector.connect("n", server.address)
        events = Events(selector)
        events.until(lambda: "n" in events.connected)
        selector.send(NetworkSend.sized("n", b"go"))
        events.poll(0)  # writes the request
        ready.wait(5)  # all five frames were written with one sendall
        staged = []
        events.until(lambda: staged.append(selector.num_staged_receives("n")) or len(events.receives) == 5)
        assert [p for _, p in events.receives] == [b"r0", b"r1", b"r2", b"r3", b"r4"]
        assert max(events.receives_per_poll) == 1
        assert max(staged) >= 2  # several frames were read at once and held back
    finally:
        server.close()


def test_partial_writes_complete_across_polls(selector: Selector) -> None:
    """§18 item 77 and §10.5 partial writes: a send larger than the socket buffers is written across several polls while the peer reads slowly;
    it is reported once, complete, and the peer gets every byte."""
    payload = bytes(i % 251 for i in range(4 * 1024 * 1024))
    received = bytearray()
    go = threading.Event()

    def slow_reader(conn: socket.socket) -> None:
        go.wait(10)
        while len(received) < len(payload) + 4:
            chunk = conn.recv(65536)
            if not chunk:
                return
            received.extend(chunk)
            time.sleep(0.001)

    server = TinyServer(slow_reader)
    try:
        selector.connect("n", server.address, 8192, 8192)
        events = Events(selector)
        events.until(lambda: "n" in events.connected)
        send = NetworkSend.sized("n", payload)
        selector.send(send)
        events.poll(0)
        assert not events.sends and not send.completed()
        with pytest.raises(IllegalStateError, match="prior send operation still in progress"):
            selector.send(NetworkSend.sized("n", b"x"))  # §18 item 77
    finally:
        server.close()


def test_partial_write_then_completion(selector: Selector) -> None:
    """§10.5: partial writes resume on writability: the whole frame arrives intact."""
    payload = bytes(i % 251 for i in range(2 * 1024 * 1024))
    got: list[bytes] = []

    def slow_reader(conn: socket.socket) -> None:
        time.sleep(0.2)
        got.append(read_frame(conn))

    server = TinyServer(slow_reader)
    try:
        selector.connect("n", server.address, 8192, 8192)
        events = Events(selector)
        events.until(lambda: "n" in events.connected)
        selector.send(NetworkSend.sized("n", payload))
        events.poll(0)
        assert not events.sends
        events.until(lambda: events.sends)
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        assert got == [payload]
    finally:
        server.close()


@pytest.mark.parametrize(("raw", "state", "message"), [
    (struct.pack(">i", -1), ChannelState.INVALID_RECEIVE, "Invalid receive (size = -1)"),
    (struct.pack(">i", 101), ChannelState.INVALID_RECEIVE, "Invalid receive (size = 101 larger than 100)"),
    (struct.pack(">i", 10) + b"abc", ChannelState.CLOSED_BY_PEER, None),
])
def test_bad_frames_and_eof_disconnect(raw: bytes, state: ChannelState, message: str | None,
                                       caplog: pytest.LogCaptureFixture) -> None:
    """§18 item 80: a negative size or a size above the maximum receive size fails the connection with
    Kafka's InvalidReceiveException message; EOF mid-frame closes it."""
    def send_raw(conn: socket.socket) -> None:
        conn.sendall(raw)
        conn.shutdown(socket.SHUT_WR)
        time.sleep(2)

    server = TinyServer(send_raw)
    selector = Selector(max_receive_size=100)
    try:
        selector.connect("n", server.address)
        events = Events(selector)
        events.until(lambda: "n" in events.disconnected)
        assert events.disconnected["n"] is state
        if message:
            assert message in caplog.text
        assert selector.channel("n") is None
    finally:
        selector.close()
        server.close()


def test_zero_length_frame_is_an_empty_payload(selector: Selector) -> None:
    """§18 item 80: a zero size yields an empty payload."""
    server = TinyServer(lambda conn: (conn.sendall(frame(b"") + frame(b"x")), time.sleep(2)))
    try:
        selector.connect("n", server.address)
        events = Events(selector)
        events.until(lambda: len(events.receives) == 2)
        assert [p for _, p in events.receives] == [b"", b"x"]
    finally:
        server.close()


def test_connection_refused_is_reported_not_connected(selector: Selector) -> None:
    """§18 items 73, 75: a refused connection shows up as disconnected with state NOT_CONNECTED."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    selector.connect("n", ("127.0.0.1", port))
    events = Events(selector)
    events.until(lambda: "n" in events.disconnected)
    assert events.disconnected["n"] is ChannelState.NOT_CONNECTED


def test_idle_connection_is_closed() -> None:
    """§18 item 87: a connection idle for connections.max.idle.ms is closed (reported as EXPIRED)."""
    server = TinyServer(lambda conn: time.sleep(5))
    clock = MockTime()
    selector = Selector(1000, clock)
    try:
        selector.connect("a", server.address)
        selector.connect("b", server.address)
        events = Events(selector)
        events.until(lambda: {"a", "b"} <= set(events.connected))
        clock.sleep(500)
        selector.send(NetworkSend.sized("b", b"keepalive"))  # b is active, a is not
        events.until(lambda: events.sends)
        clock.sleep(600)
        events.poll(0)
        assert events.disconnected == {"a": ChannelState.EXPIRED}
        assert selector.channel("b") is not None
    finally:
        selector.close()
        server.close()


def test_memory_pressure_mutes_then_unmutes() -> None:
    """§18 item 88: when the receive memory pool cannot allocate a payload the channel mutes itself; once
    memory is released it is unmuted and the frame is read."""
    server = TinyServer(lambda conn: (conn.sendall(frame(b"p" * 50)), time.sleep(5)))
    pool = SimpleMemoryPool(100)
    hog = pool.try_allocate(100)
    assert hog is not None and pool.is_out_of_memory()
    selector = Selector(memory_pool=pool)
    try:
        selector.connect("n", server.address)
        events = Events(selector)
        events.until(lambda: selector.is_out_of_memory())
        assert selector.channel("n").is_muted()  # type: ignore[union-attr]
        assert not events.receives
        pool.release(hog)
        events.until(lambda: events.receives)
        assert events.receives == [("n", b"p" * 50)]
        assert not selector.channel("n").is_muted()  # type: ignore[union-attr]
    finally:
        selector.close()
        server.close()


def _readable(sock: socket.socket) -> bool:
    """Whether a whole 8-byte frame waits unread in ``sock``'s receive buffer (peeked, not consumed)."""
    try:
        return len(sock.recv(8, socket.MSG_PEEK | socket.MSG_DONTWAIT)) == 8
    except BlockingIOError:
        return False


def test_explicit_mute_stops_reading(selector: Selector) -> None:
    """§10.5 / §18 item 88: explicitly muted channels are not read until unmuted."""
    server = TinyServer(lambda conn: (read_exact(conn, 1), conn.sendall(frame(b"late")), time.sleep(5)))
    try:
        selector.connect("n", server.address)
        events = Events(selector)
        events.until(lambda: "n" in events.connected)
        selector.mute("n")
        selector.send(NetworkSend("n", b"!"))
        events.until(lambda: events.sends)  # the server answers once it has read this byte
        sock = selector.channel("n").transport.sock  # type: ignore[union-attr]
        deadline = time.monotonic() + 10
        while not _readable(sock):  # the whole answer is in our socket buffer
            assert time.monotonic() < deadline, "the answer never waited unread in the socket (read while muted?)"
            time.sleep(0.001)
        for _ in range(5):
            events.poll(0)
        assert not events.receives and _readable(sock)  # muted: nothing was read
        selector.unmute("n")
        events.until(lambda: events.receives)
    finally:
        server.close()


def test_wakeup_interrupts_poll(selector: Selector) -> None:
    """§18 item 89: wakeup() from another thread interrupts a blocking poll. The poll asks to block for a day
    (the selector's longest wait), so a wakeup that does not reach it leaves the thread blocked and the join
    below gives up; the wakeup is sticky (as Java's), so it does not matter whether poll() was entered yet."""
    polled = threading.Event()
    poller = threading.Thread(target=lambda: (selector.poll(24 * 3600 * 1000), polled.set()), daemon=True)
    poller.start()
    selector.wakeup()
    assert polled.wait(30), "poll() was not interrupted by wakeup()"
    poller.join(30)


def test_close_connection_is_silent(selector: Selector) -> None:
    """§10.5: Kafka's close(id): no disconnect notification for a local close."""
    server = TinyServer(lambda conn: time.sleep(5))
    try:
        selector.connect("n", server.address)
        events = Events(selector)
        events.until(lambda: "n" in events.connected)
        selector.close_connection("n")
        events.poll(0)
        assert not events.disconnected
        assert not selector.is_channel_ready("n")
        with pytest.raises(IllegalStateError, match="no connection"):
            selector.send(NetworkSend.sized("n", b"x"))
    finally:
        server.close()


class _RefusingAuthenticator:
    """A SASL authenticator the broker refuses at its first step (a wrong password, as the client sees it)."""

    complete = False
    session_lifetime_ms = 0

    def next_send(self) -> bytes:
        raise SaslAuthenticationError("Authentication failed: Invalid username or password")


class _RefusedChannels(ClientChannelBuilder):
    def build(self, node, sock, sel, interest, attachment, host):  # type: ignore[no-untyped-def]
        transport, _ = super().build(node, sock, sel, interest, attachment, host)
        return transport, _RefusingAuthenticator()


def test_a_connection_refused_authentication_in_its_connecting_poll_is_only_disconnected() -> None:
    """Connect and authentication failure in one poll: the channel is reported disconnected (with the reason),
    never also connected (Kafka's ``Selector.close`` drops it from ``connected``). Reported as both, the network
    client handled the disconnect, then marked the node connected: it stayed "checking API versions" with no
    channel, and every later request to it waited for its timeout instead of failing with the reason."""
    server = TinyServer(lambda conn: conn.recv(1))
    selector = Selector(channel_builder=_RefusedChannels())
    try:
        selector.connect("n1", server.address)
        events = Events(selector)
        events.until(lambda: "n1" in events.disconnected)
        assert events.disconnected == {"n1": ChannelState.AUTHENTICATION_FAILED}
        assert "Invalid username or password" in str(selector.authentication_errors["n1"])
        assert events.connected == []
    finally:
        selector.close()
        server.close()
