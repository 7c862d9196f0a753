"""The broker's SASL authenticator on a real listener process (KIP-152 flow, PLAIN and SCRAM, refusals, KIP-368
re-authentication), driven byte by byte with RawClient. The PLAINTEXT listener next to it keeps serving."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages import (
    ApiVersionsRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from strom.security.plain import plain_client_message
from strom.security.scram import SCRAM_MECHANISMS, ScramClient, ScramCredential
from strom.server.security.credentials import CREDENTIALS_FILE, FileCredentialStore
from strom.testing.raw_client import RawClient
from tests.integration.listener_process import ListenerProcess

PASSWORDS = {"alice": "alice-Secret-1", "bob": "bob-Secret-2"}
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
        f'password="{PASSWORDS["alice"]}" user_alice="{PASSWORDS["alice"]}";')


def _start(tmp: Path, **extra: str) -> ListenerProcess:
    store = FileCredentialStore(tmp / CREDENTIALS_FILE)
    for name, mech in SCRAM_MECHANISMS.items():
        store.upsert("bob", name, ScramCredential.generate(mech, PASSWORDS["bob"], 4096))
    return ListenerProcess({
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        **extra,
    }, data_dir=str(tmp)).start()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ListenerProcess]:
    p = _start(tmp_path)
    yield p
    p.stop()


def _principal(c: RawClient) -> str:
    return str(c.request(ApiKey.METADATA, 9, MetadataRequest(topics=[])).cluster_id)


def _authenticate(c: RawClient, mechanism: str, user: str, password: str) -> object:
    hs = c.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism=mechanism))
    assert hs.error_code == ErrorCode.NONE and mechanism in hs.mechanisms
    if mechanism == "PLAIN":
        return c.request(ApiKey.SASL_AUTHENTICATE, 2,
                         SaslAuthenticateRequest(auth_bytes=plain_client_message(user, password)))
    scram = ScramClient(SCRAM_MECHANISMS[mechanism], user, password)
    first = c.request(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=scram.initial_response()))
    assert first.error_code == ErrorCode.NONE, first.error_message
    final = c.request(ApiKey.SASL_AUTHENTICATE, 2,
                      SaslAuthenticateRequest(auth_bytes=scram.evaluate(first.auth_bytes)))
    if final.error_code == ErrorCode.NONE:
        assert scram.evaluate(final.auth_bytes) is None and scram.complete  # the broker proved it knows the key
    return final


@pytest.mark.parametrize(("mechanism", "user"), [("PLAIN", "alice"), ("SCRAM-SHA-256", "bob"),
                                                 ("SCRAM-SHA-512", "bob")])
def test_authenticated_session_carries_the_principal(server: ListenerProcess, mechanism: str, user: str) -> None:
    with RawClient(server.bootstrap("SASL_PLAINTEXT")) as c:
        assert c.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest()).error_code == 0  # allowed before auth
        response = _authenticate(c, mechanism, user, PASSWORDS[user])
        assert response.error_code == ErrorCode.NONE  # type: ignore[attr-defined]
        assert _principal(c) == f"User:{user}"
    with RawClient(server.bootstrap("PLAINTEXT")) as plain:
        assert _principal(plain) == "User:ANONYMOUS"


@pytest.mark.parametrize(("mechanism", "user", "password", "message"), [
    ("PLAIN", "alice", "wrong", "Invalid username or password"),
    ("PLAIN", "mallory", "alice-Secret-1", "Invalid username or password"),
    ("SCRAM-SHA-256", "bob", "wrong", "invalid credentials"),
    ("SCRAM-SHA-512", "mallory", "bob-Secret-2", "invalid credentials"),
])
def test_bad_credentials_get_an_error_then_the_connection_closes(server: ListenerProcess, mechanism: str, user: str,
                                                                   password: str, message: str) -> None:
    with RawClient(server.bootstrap("SASL_PLAINTEXT")) as c:
        response = _authenticate(c, mechanism, user, password)
        assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED  # type: ignore[attr-defined]
        assert message in response.error_message  # type: ignore[attr-defined]
        assert c.is_closed_by_peer(10)
    log = server.read_log()
    assert "Failed authentication with 127.0.0.1" in log
    for secret in (*PASSWORDS.values(), "wrong"):
        assert secret not in log


def test_requests_before_authentication_are_refused(server: ListenerProcess) -> None:
    with RawClient(server.bootstrap("SASL_PLAINTEXT")) as c:  # a Kafka request: closed, never answered
        c.send(ApiKey.METADATA, 9, MetadataRequest(topics=[]))
        assert c.is_closed_by_peer(10)
    with RawClient(server.bootstrap("SASL_PLAINTEXT")) as c:  # SaslAuthenticate before SaslHandshake
        r = c.request(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=b"\0alice\0x"))
        assert r.error_code == ErrorCode.ILLEGAL_SASL_STATE and "during SASL handshake" in r.error_message
        assert c.is_closed_by_peer(10)
    with RawClient(server.bootstrap("SASL_PLAINTEXT")) as c:
        r = c.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="GSSAPI"))
        assert r.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert sorted(r.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert c.is_closed_by_peer(10)
    for garbage in (b"", b"\xff" * 300, b"n,,", b"x=1"):
        with RawClient(server.bootstrap("SASL_PLAINTEXT")) as c:
            c.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
            r = c.request(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=garbage))
            assert r.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
            assert c.is_closed_by_peer(10)
    with RawClient(server.bootstrap("PLAINTEXT")) as plain:  # everyone else is still served
        assert _principal(plain) == "User:ANONYMOUS"


def test_handshake_v0_raw_tokens(server: ListenerProcess) -> None:
    """SaslHandshake v0 (old clients): the PLAIN token is a raw size-prefixed frame, answered by an empty one."""
    with RawClient(server.bootstrap("SASL_PLAINTEXT")) as c:
        assert c.request(ApiKey.SASL_HANDSHAKE, 0, SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        token = plain_client_message("alice", PASSWORDS["alice"])
        c.send_raw(len(token).to_bytes(4, "big") + token)
        assert c.sock.recv(4) == b"\0\0\0\0"
        assert _principal(c) == "User:alice"


def test_reauthentication_and_session_expiry(tmp_path: Path) -> None:
    server = _start(tmp_path, **{"connections.max.reauth.ms": "1500"})
    try:
        with RawClient(server.bootstrap("SASL_PLAINTEXT")) as c:
            response = _authenticate(c, "SCRAM-SHA-256", "bob", PASSWORDS["bob"])
            assert response.session_lifetime_ms == 1500  # type: ignore[attr-defined]
            # re-authenticate as the same user (KIP-368): the session goes on
            assert _authenticate(c, "SCRAM-SHA-256", "bob", PASSWORDS["bob"]).error_code == 0  # type: ignore[attr-defined]
            assert _principal(c) == "User:bob"
        with RawClient(server.bootstrap("SASL_PLAINTEXT")) as c:
            _authenticate(c, "PLAIN", "alice", PASSWORDS["alice"])
            r = c.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
            assert r.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM  # re-auth must keep the mechanism
            assert c.is_closed_by_peer(10)
        with RawClient(server.bootstrap("SASL_PLAINTEXT")) as c:
            _authenticate(c, "PLAIN", "alice", PASSWORDS["alice"])
            deadline = time.monotonic() + 20
            while True:  # once the session expires, the next request closes the connection
                try:
                    assert _principal(c) == "User:alice"
                except ConnectionError:
                    break
                assert time.monotonic() < deadline, "the expired session was never closed"
                time.sleep(0.2)
    finally:
        server.stop()


def test_bad_sasl_settings_stop_the_start(tmp_path: Path) -> None:
    for overrides, message in (
        ({"sasl.enabled.mechanisms": "GSSAPI"}, "strom supports PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
        ({"sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": ""},
         "needs 'org.apache.kafka.common.security.plain.PlainLoginModule"),
    ):
        p = ListenerProcess({"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0", **overrides},
                            data_dir=str(tmp_path))
        with pytest.raises(RuntimeError, match="server exited"):
            p.start()
        assert message in p.read_log()
        p.stop()


def test_a_client_stalling_mid_authentication_is_closed(tmp_path: Path) -> None:
    server = _start(tmp_path, **{"connections.max.idle.ms": "500"})
    try:
        with RawClient(server.bootstrap("SASL_PLAINTEXT")) as stalled:
            assert stalled.request(ApiKey.SASL_HANDSHAKE, 1,
                                   SaslHandshakeRequest(mechanism="SCRAM-SHA-256")).error_code == 0
            stalled.send_raw(b"\x00\x00\x01\x00partial")  # half a SaslAuthenticate, then nothing
            assert stalled.is_closed_by_peer(10)
        with RawClient(server.bootstrap("SASL_PLAINTEXT")) as c:  # others still authenticate
            assert _authenticate(c, "PLAIN", "alice", PASSWORDS["alice"]).error_code == 0  # type: ignore[attr-defined]
    finally:
        server.stop()
