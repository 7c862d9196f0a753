"""SASL/PLAIN (RFC 4616), sans-I/O: ``[authzid] NUL authcid NUL passwd`` in one client message.

Kafka counterparts: ``PlainSaslServer`` (with ``PlainServerCallbackHandler`` checking ``user_<name>`` JAAS options)
and the PLAIN client. Error texts are Kafka's; no password ever appears in one.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from strom.security.sasl import SaslAuthenticationError, SaslServer

__all__ = ["PlainServer", "PlainClient", "plain_client_message", "constant_time_equals"]


def plain_client_message(username: str, password: str, authorization_id: str = "") -> bytes:
    return f"{authorization_id}\0{username}\0{password}".encode()


class PlainServer(SaslServer):
    """One PLAIN exchange. ``check(username, password) -> bool``."""

    mechanism = "PLAIN"

    def __init__(self, check: Callable[[str, str], bool]) -> None:
        self._check = check
        self.complete = False
        self.authorization_id: str | None = None

    def evaluate(self, response: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationError("Authentication failed: PLAIN exchange already complete")
        parts = bytes(response).split(b"\0")
        if len(parts) != 3:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: expected 3 tokens, got " + str(len(parts)))
        try:
            authzid, username, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        if not self._check(username, password):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization id that is "
                                          "different from username")
        self.authorization_id = username
        self.complete = True
        return b""


def constant_time_equals(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


class PlainClient:
    """The client side: one message, then done."""

    mechanism = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._message = plain_client_message(username, password)
        self.complete = False

    def initial_response(self) -> bytes:
        return self._message

    def evaluate(self, challenge: bytes) -> bytes | None:
        self.complete = True
        return None
