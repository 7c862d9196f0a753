"""What every SASL mechanism implements, client and server side (sans-I/O: bytes in, bytes out)."""

from __future__ import annotations

from typing import Protocol

from strom.common.errors import KafkaError

__all__ = ["SaslServer", "SaslClient", "AuthenticationError", "SaslAuthenticationError", "SslAuthenticationError",
           "SUPPORTED_MECHANISMS"]

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class AuthenticationError(KafkaError):
    """The connection could not be authenticated (Kafka's ``AuthenticationException``): not retriable with the
    same settings."""


class SaslAuthenticationError(AuthenticationError):
    """SASL authentication failed (Kafka's ``SaslAuthenticationException``); the message goes to the peer, so it
    never holds a password."""


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake failed: untrusted or mismatched certificate, protocol mismatch (Kafka's
    ``SslAuthenticationException``)."""


class SaslServer(Protocol):
    mechanism: str
    complete: bool
    authorization_id: str | None

    def evaluate(self, response: bytes) -> bytes:
        """The client's token in, the challenge (or final message) out; raises SaslAuthenticationError."""
        ...


class SaslClient(Protocol):
    mechanism: str
    complete: bool

    def initial_response(self) -> bytes: ...
    def evaluate(self, challenge: bytes) -> bytes | None:
        """The server's token in, the next token out (``None`` when there is nothing more to send)."""
        ...
