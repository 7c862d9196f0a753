"""PLAIN and SCRAM (RFC 5802 / RFC 7677 test vector), JAAS parsing: sans-I/O, no sockets."""

from __future__ import annotations

import base64

import pytest

from strom.common.errors import ConfigError
from strom.security.jaas import parse_jaas_config
from strom.security.plain import PlainClient, PlainServer
from strom.security.sasl import SaslAuthenticationError
from strom.security.scram import SCRAM_MECHANISMS, ScramClient, ScramCredential, ScramServer

SHA256 = SCRAM_MECHANISMS["SCRAM-SHA-256"]
SHA512 = SCRAM_MECHANISMS["SCRAM-SHA-512"]


def test_rfc7677_client_vector() -> None:
    client = ScramClient(SHA256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.initial_response() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.evaluate(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert client.evaluate(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None
    assert client.complete


def test_client_refuses_a_forged_server_signature() -> None:
    client = ScramClient(SHA256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    client.initial_response()
    client.evaluate(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    with pytest.raises(SaslAuthenticationError, match="server signature"):
        client.evaluate(b"v=" + base64.b64encode(b"x" * 32))
    assert not client.complete


def _exchange(server: ScramServer, client: ScramClient) -> None:
    challenge = server.evaluate(client.initial_response())
    final = client.evaluate(challenge)
    assert final is not None
    assert client.evaluate(server.evaluate(final)) is None


@pytest.mark.parametrize("mechanism", [SHA256, SHA512], ids=lambda m: m.name)
def test_scram_round_trip_and_refusals(mechanism: object) -> None:
    m = SCRAM_MECHANISMS[mechanism.name]  # type: ignore[attr-defined]
    creds = {"alice": ScramCredential.generate(m, "alice-secret", 4096), "we,ird=": ScramCredential.generate(m, "p")}
    server = ScramServer(m, creds.get)
    _exchange(server, ScramClient(m, "alice", "alice-secret"))
    assert server.complete and server.authorization_id == "alice"
    odd = ScramServer(m, creds.get)
    _exchange(odd, ScramClient(m, "we,ird=", "p"))  # saslname escaping both ways
    assert odd.authorization_id == "we,ird="
    for user, password in (("alice", "wrong"), ("mallory", "alice-secret")):
        server = ScramServer(m, creds.get)
        client = ScramClient(m, user, password)
        final = client.evaluate(server.evaluate(client.initial_response()))
        with pytest.raises(SaslAuthenticationError, match="invalid credentials") as e:
            server.evaluate(final)  # type: ignore[arg-type]
        assert password not in str(e.value)
        assert not server.complete


def test_scram_server_rejects_bad_messages() -> None:
    creds = {"alice": ScramCredential.generate(SHA256, "pw")}
    for first in (b"p=tls-unique,,n=alice,r=abc", b"garbage", b"n,,r=abc", b"n,,n=alice,r=abc,m=ext", b"\xff\xfe"):
        with pytest.raises(SaslAuthenticationError):
            ScramServer(SHA256, creds.get).evaluate(first)
    server = ScramServer(SHA256, creds.get)
    server.evaluate(b"n,,n=alice,r=abc")
    with pytest.raises(SaslAuthenticationError, match="nonce"):
        server.evaluate(b"c=biws,r=abcOTHER,p=" + base64.b64encode(b"x" * 32))


def test_credential_iterations_bounds_and_repr_hides_keys() -> None:
    with pytest.raises(ValueError, match="iterations"):
        ScramCredential.generate(SHA256, "pw", 100)
    assert "stored" not in repr(ScramCredential.generate(SHA256, "pw"))


def test_plain() -> None:
    users = {"alice": "alice-secret"}
    check = lambda u, p: users.get(u) == p  # noqa: E731
    server = PlainServer(check)
    assert server.evaluate(PlainClient("alice", "alice-secret").initial_response()) == b""
    assert server.complete and server.authorization_id == "alice"
    for message, error in ((b"\0alice\0wrong", "Invalid username or password"),
                           (b"\0bob\0alice-secret", "Invalid username or password"),
                           (b"bob\0alice\0alice-secret", "authorization id"),
                           (b"alice-secret", "expected 3 tokens"), (b"\0\0x", "username not specified"),
                           (b"\0alice\0", "password not specified")):
        with pytest.raises(SaslAuthenticationError, match=error) as e:
            PlainServer(check).evaluate(message)
        assert "alice-secret" not in str(e.value)


def test_jaas_parsing() -> None:
    entry = parse_jaas_config('org.apache.kafka.common.security.plain.PlainLoginModule required '
                              'username="admin" password="a\\"b;c" user_admin="a\\"b;c" user_alice=alice-pw;')
    assert entry.login_module.endswith("PlainLoginModule") and entry.flag == "required"
    assert entry.options == {"username": "admin", "password": 'a"b;c', "user_admin": 'a"b;c',
                             "user_alice": "alice-pw"}
    assert "alice-pw" not in repr(entry)
    for bad in ('Module required username="x"', 'Module maybe username="x";', 'username="x";',
                'Module required username="x"; Other required;'):
        with pytest.raises(ConfigError, match="sasl.jaas.config") as e:
            parse_jaas_config(bad)
        assert '"x"' not in str(e.value)


def test_file_credential_stores_on_one_path_agree(tmp_path: object) -> None:
    from pathlib import Path

    from strom.server.security.credentials import FileCredentialStore

    path = Path(str(tmp_path)) / "scram-credentials.json"
    listener_a, handler = FileCredentialStore(path), FileCredentialStore(path)
    assert listener_a.credential("bob", "SCRAM-SHA-256") is None
    cred = ScramCredential.generate(SHA256, "pw")
    handler.upsert("bob", "SCRAM-SHA-256", cred)
    assert listener_a.credential("bob", "SCRAM-SHA-256") == cred  # sees the other store's write
    listener_a.delete("bob", "SCRAM-SHA-256")
    assert handler.describe() == {}
    assert oct(path.stat().st_mode & 0o777) == "0o600"
