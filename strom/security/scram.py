"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677), sans-I/O, as Kafka speaks it.

Kafka counterparts: ``ScramSaslServer`` / ``ScramSaslClient``, ``ScramFormatter`` (salted password, keys, proofs)
and ``ScramCredential`` (salt, stored key, server key, iterations: what a broker keeps; never the password).
No channel binding (gs2 header ``n,,``); Kafka's minimum of 4096 iterations; ``tokenauth`` extension refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass

from strom.security.sasl import SaslAuthenticationError

__all__ = ["ScramMechanism", "ScramCredential", "ScramServer", "ScramClient", "SCRAM_MECHANISMS",
           "MIN_ITERATIONS", "MAX_ITERATIONS"]

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384  # Kafka's ScramMechanism.maxIterations


@dataclass(frozen=True)
class ScramMechanism:
    name: str
    hash_name: str

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode(), salt, iterations)

    def client_key(self, salted: bytes) -> bytes:
        return self.hmac(salted, b"Client Key")

    def server_key(self, salted: bytes) -> bytes:
        return self.hmac(salted, b"Server Key")


SCRAM_MECHANISMS = {m.name: m for m in (ScramMechanism("SCRAM-SHA-256", "sha256"),
                                        ScramMechanism("SCRAM-SHA-512", "sha512"))}


@dataclass(frozen=True)
class ScramCredential:
    """What the broker stores for a user and mechanism (never the password)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def generate(cls, mechanism: ScramMechanism, password: str, iterations: int = MIN_ITERATIONS,
                 salt: bytes | None = None) -> ScramCredential:
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ValueError(f"Invalid iterations {iterations}: must be between {MIN_ITERATIONS} and "
                             f"{MAX_ITERATIONS}")
        salt = salt if salt is not None else os.urandom(32)
        salted = mechanism.salted_password(password, salt, iterations)
        return cls(salt, mechanism.hash(mechanism.client_key(salted)), mechanism.server_key(salted), iterations)

    def __repr__(self) -> str:
        return f"ScramCredential(iterations={self.iterations})"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (ValueError, base64.binascii.Error):  # type: ignore[attr-defined]
        raise SaslAuthenticationError(f"Invalid SCRAM message: {what} is not base64") from None


def _saslname_decode(name: str) -> str:
    """RFC 5802 ``saslname``: ``=2C`` is ``,`` and ``=3D`` is ``=``; any other ``=`` is invalid."""
    out, i = [], 0
    while i < len(name):
        if name[i] == "=":
            code = name[i + 1:i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise SaslAuthenticationError("Invalid SCRAM message: invalid username encoding")
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def _saslname_encode(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _attributes(message: str) -> dict[str, str]:
    attrs = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise SaslAuthenticationError("Invalid SCRAM message: malformed attribute")
        attrs.setdefault(part[0], part[2:])
    return attrs


def _nonce() -> str:
    return base64.b64encode(os.urandom(24)).decode().replace(",", "-")


class ScramServer:
    """One SCRAM exchange on the broker: client-first → server-first, client-final → server-final.

    ``lookup(username)`` returns the user's :class:`ScramCredential` for this mechanism, or ``None``. An unknown
    user is refused only after the client's proof, with the same message as a wrong password (no user
    enumeration), as Kafka does.
    """

    def __init__(self, mechanism: ScramMechanism, lookup: Callable[[str], ScramCredential | None]) -> None:
        self.mechanism = mechanism.name
        self._m = mechanism
        self._lookup = lookup
        self.complete = False
        self.authorization_id: str | None = None
        self._state = 0
        self._username = ""
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    def evaluate(self, response: bytes) -> bytes:
        try:
            text = bytes(response).decode()
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SCRAM message: not UTF-8") from None
        if self._state == 0:
            return self._client_first(text)
        if self._state == 1:
            return self._client_final(text)
        raise SaslAuthenticationError("Authentication failed: SCRAM exchange already complete")

    def _client_first(self, text: str) -> bytes:
        if not text.startswith("n,"):
            raise SaslAuthenticationError("Invalid SCRAM client first message: channel binding is not supported "
                                          "(expected gs2 header 'n,,')")
        gs2_end = text.find(",", 2)
        if gs2_end < 0:
            raise SaslAuthenticationError("Invalid SCRAM client first message")
        authzid = text[2:gs2_end]
        bare = text[gs2_end + 1:]
        attrs = _attributes(bare)
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise SaslAuthenticationError("Invalid SCRAM client first message: username and nonce are required")
        if "m" in attrs:
            raise SaslAuthenticationError("Invalid SCRAM client first message: mandatory extensions not supported")
        self._username = _saslname_decode(attrs["n"])
        if authzid and _saslname_decode(authzid[2:] if authzid.startswith("a=") else authzid) != self._username:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization id that is "
                                          "different from username")
        extensions = [p for p in bare.split(",") if p[:2] not in ("n=", "r=")]
        if any(e.startswith("tokenauth=") for e in extensions):
            raise SaslAuthenticationError("Authentication failed: delegation tokens are not supported")
        self._credential = self._lookup(self._username)
        # An unknown user still gets a challenge (a random salt), so that it cannot be told from a wrong password.
        salt = self._credential.salt if self._credential else os.urandom(32)
        iterations = self._credential.iterations if self._credential else MIN_ITERATIONS
        self._client_first_bare = bare
        self._nonce = attrs["r"] + _nonce()
        self._server_first = f"r={self._nonce},s={_b64(salt)},i={iterations}"
        self._state = 1
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        proof_at = text.rfind(",p=")
        if proof_at < 0:
            raise SaslAuthenticationError("Invalid SCRAM client final message: no proof")
        without_proof = text[:proof_at]
        attrs = _attributes(text)
        # Kafka's ScramSaslServer checks endsWith, not equality: librdkafka 2.0 sends client nonce + the whole
        # server nonce again, and Kafka brokers accept it (the proof covers what the client sent).
        if not attrs.get("r", "").endswith(self._nonce):
            raise SaslAuthenticationError("Invalid SCRAM client final message: nonce mismatch")
        if attrs.get("c") != _b64(b"n,,") and _unb64(attrs.get("c", ""), "channel binding")[:2] != b"n,":
            raise SaslAuthenticationError("Invalid SCRAM client final message: channel binding is not supported")
        proof = _unb64(attrs["p"], "proof")
        self._state = 2
        cred = self._credential
        if cred is None:
            raise SaslAuthenticationError(f"Authentication failed during authentication due to invalid credentials "
                                          f"with SASL mechanism {self.mechanism}")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = self._m.hmac(cred.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise SaslAuthenticationError(f"Authentication failed during authentication due to invalid credentials "
                                          f"with SASL mechanism {self.mechanism}")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(self._m.hash(client_key), cred.stored_key):
            raise SaslAuthenticationError(f"Authentication failed during authentication due to invalid credentials "
                                          f"with SASL mechanism {self.mechanism}")
        server_signature = self._m.hmac(cred.server_key, auth_message)
        self.complete = True
        self.authorization_id = self._username
        return f"v={_b64(server_signature)}".encode()


class ScramClient:
    """The client side of one SCRAM exchange; verifies the server's signature before declaring success."""

    def __init__(self, mechanism: ScramMechanism, username: str, password: str, nonce: str | None = None) -> None:
        self.mechanism = mechanism.name
        self._m = mechanism
        self._username = username
        self._password = password
        self._nonce = nonce or _nonce()
        self._client_first_bare = f"n={_saslname_encode(username)},r={self._nonce}"
        self._state = 0
        self._server_signature = b""
        self.complete = False

    def initial_response(self) -> bytes:
        self._state = 1
        return f"n,,{self._client_first_bare}".encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        text = bytes(challenge).decode(errors="replace")
        if self._state == 1:
            attrs = _attributes(text)
            if "e" in attrs:
                raise SaslAuthenticationError(f"SCRAM authentication failed: {attrs['e']}")
            nonce, salt, iterations = attrs.get("r", ""), _unb64(attrs.get("s", ""), "salt"), int(attrs.get("i", "0"))
            if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
                raise SaslAuthenticationError("Invalid SCRAM server first message: nonce mismatch")
            if iterations < MIN_ITERATIONS:
                raise SaslAuthenticationError(f"Requested iterations {iterations} is less than the minimum "
                                              f"{MIN_ITERATIONS} for {self.mechanism}")
            salted = self._m.salted_password(self._password, salt, iterations)
            without_proof = f"c={_b64(b'n,,')},r={nonce}"
            auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
            client_key = self._m.client_key(salted)
            signature = self._m.hmac(self._m.hash(client_key), auth_message)
            proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
            self._server_signature = self._m.hmac(self._m.server_key(salted), auth_message)
            self._state = 2
            return f"{without_proof},p={_b64(proof)}".encode()
        if self._state == 2:
            attrs = _attributes(text)
            if "e" in attrs:
                raise SaslAuthenticationError(f"SCRAM authentication failed: {attrs['e']}")
            if not hmac.compare_digest(_unb64(attrs.get("v", ""), "server signature"), self._server_signature):
                raise SaslAuthenticationError("Invalid SCRAM server final message: server signature mismatch")
            self._state = 3
            self.complete = True
            return None
        raise SaslAuthenticationError("SCRAM exchange already complete")
