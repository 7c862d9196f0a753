"""Connection faults an operator meets (issue 15), against a real process serving strom's socket servers:
idle and slowloris connections reaped (connections.max.idle.ms), max.connections, max.connections.per.ip (+
overrides), and accept() running out of file descriptors (one log line, then back to serving)."""

from __future__ import annotations

import re
import socket
import struct
import time
from collections.abc import Iterator

import pytest

from strom.protocol.messages import ApiVersionsRequest
from strom.testing.raw_client import RawClient
from tests.integration.listener_process import ListenerProcess


@pytest.fixture
def server_factory() -> Iterator[type[ListenerProcess]]:
    started: list[ListenerProcess] = []

    class Factory(ListenerProcess):
        def start(self, timeout: float = 30.0) -> ListenerProcess:
            started.append(self)
            return super().start(timeout)

    yield Factory
    for p in started:
        p.stop()


def _api_versions(client: RawClient) -> int:
    return int(client.request(18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
               .error_code)


def _closed_within(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_idle_and_slowloris_connections_are_closed(server_factory: type[ListenerProcess]) -> None:
    server = server_factory({"connections.max.idle.ms": "400"}).start()
    idle = [socket.create_connection(("127.0.0.1", server.port())) for _ in range(20)]
    slow = [socket.create_connection(("127.0.0.1", server.port())) for _ in range(20)]
    for s in slow:  # half a request: a size prefix of 100, then 10 bytes, then nothing more
        s.sendall(struct.pack(">i", 100) + b"x" * 10)
    used = RawClient(server.bootstrap())
    assert _api_versions(used) == 0  # a connection that did work is reaped too once it falls idle
    try:
        for s in idle + slow + [used.sock]:
            assert _closed_within(s, 10.0)
        with RawClient(server.bootstrap()) as fresh:  # and the server goes on serving
            assert _api_versions(fresh) == 0
    finally:
        for s in idle + slow:
            s.close()
        used.close()


def test_max_connections_per_ip_refuses_the_extra_connection(server_factory: type[ListenerProcess]) -> None:
    server = server_factory({"max.connections.per.ip": "3"}).start()
    clients = [RawClient(server.bootstrap()) for _ in range(3)]
    try:
        assert [_api_versions(c) for c in clients] == [0, 0, 0]
        extra = socket.create_connection(("127.0.0.1", server.port()))
        assert _closed_within(extra, 10.0)
        extra.close()
        clients.pop().close()
        deadline = time.monotonic() + 10
        while True:  # the slot comes back once the server has seen the close
            try:
                with RawClient(server.bootstrap(), timeout=5) as again:
                    assert _api_versions(again) == 0
                break
            except ConnectionError:
                assert time.monotonic() < deadline, "the freed per-ip slot never came back"
    finally:
        for c in clients:
            c.close()


def test_max_connections_per_ip_overrides(server_factory: type[ListenerProcess]) -> None:
    server = server_factory({"max.connections.per.ip": "1",
                             "max.connections.per.ip.overrides": "127.0.0.1:4,localhost:4"}).start()
    clients = [RawClient(server.bootstrap()) for _ in range(4)]
    try:
        assert [_api_versions(c) for c in clients] == [0, 0, 0, 0]
        extra = socket.create_connection(("127.0.0.1", server.port()))
        assert _closed_within(extra, 10.0)
        extra.close()
    finally:
        for c in clients:
            c.close()


def test_max_connections_makes_new_clients_wait_for_a_free_slot(server_factory: type[ListenerProcess]) -> None:
    server = server_factory({"max.connections": "3"}).start()
    clients = [RawClient(server.bootstrap()) for _ in range(3)]
    try:
        assert [_api_versions(c) for c in clients] == [0, 0, 0]
        waiting = RawClient(server.bootstrap(), timeout=1.0)  # TCP connects: it sits in the listen backlog
        waiting.send(18, 0, ApiVersionsRequest())
        with pytest.raises(TimeoutError):
            waiting.receive()  # not accepted while the broker is at max.connections
        clients.pop().close()
        waiting.sock.settimeout(10.0)
        assert waiting.receive().error_code == 0
        waiting.close()
    finally:
        for c in clients:
            c.close()


def test_accept_out_of_file_descriptors_logs_once_and_recovers(server_factory: type[ListenerProcess]) -> None:
    server = server_factory({}, nofile=48).start()
    clients = []
    try:
        for _ in range(80):  # more than the server's descriptor limit: its accept() meets EMFILE
            clients.append(socket.create_connection(("127.0.0.1", server.port())))
        deadline = time.monotonic() + 20
        while "accept() failed" not in server.read_log():
            assert time.monotonic() < deadline, server.read_log()[-2000:]
            time.sleep(0.05)
        time.sleep(1.0)  # let the server retry accept() several times while descriptors are still exhausted
    finally:
        for s in clients:
            s.close()
    with RawClient(server.bootstrap(), timeout=20) as fresh:
        assert _api_versions(fresh) == 0
    deadline = time.monotonic() + 20
    while "accepts connections again" not in server.read_log():
        assert time.monotonic() < deadline, server.read_log()[-2000:]
        time.sleep(0.05)
    log = server.read_log()
    assert log.count("accept() failed") == 1, log[-3000:]
    assert "Traceback" not in log
    failures = int(re.search(r"again after (\d+) failed accept", log).group(1))  # type: ignore[union-attr]
    assert failures >= 2  # it did retry, silently


def test_bad_tls_traffic_is_dropped_and_everyone_else_served(server_factory: type[ListenerProcess],
                                                              tmp_path: object) -> None:
    import ssl
    from pathlib import Path

    from strom.testing.certs import make_pki

    pki = make_pki(Path(str(tmp_path)) / "pki")
    server = server_factory({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                             "ssl.keystore.location": str(pki.broker_keystore),
                             "connections.max.idle.ms": "500", "max.connections.per.ip": "2"}).start()
    for _ in range(3):  # six failed handshakes against two slots per IP: each must give its slot back
        stalled = socket.create_connection(("127.0.0.1", server.port("SSL")))
        stalled.sendall(b"\x16\x03\x01\x02")  # the first bytes of a ClientHello, then nothing
        plaintext_on_tls = socket.create_connection(("127.0.0.1", server.port("SSL")))
        plaintext_on_tls.sendall(struct.pack(">ihhi", 10, 18, 0, 1) + b"\x00\x00")  # an ApiVersions v0 request
        try:
            for s in (stalled, plaintext_on_tls):
                assert _closed_within(s, 10.0)
        finally:
            stalled.close()
            plaintext_on_tls.close()
    client_ctx = ssl.create_default_context(cafile=str(pki.ca))
    with socket.create_connection(("127.0.0.1", server.port("PLAINTEXT"))) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError)):  # a TLS handshake on the plaintext port
            client_ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    with socket.create_connection(("127.0.0.1", server.port("SSL")), timeout=10) as raw:
        with client_ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(struct.pack(">ihhi", 10, 18, 0, 7) + b"\x00\x00")
            size = struct.unpack(">i", tls.recv(4))[0]
            body = b""
            while len(body) < size:
                body += tls.recv(size - len(body))
            assert struct.unpack(">ih", body[:6]) == (7, 0)  # correlation id 7, error NONE
    with RawClient(server.bootstrap("PLAINTEXT")) as plain:
        assert _api_versions(plain) == 0
    assert "Traceback" not in server.read_log()
