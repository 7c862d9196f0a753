"""What every SASL mechanism implements, client and server side (sans-I/O: bytes in, bytes out)."""

from __future__ import annotations

from typing import Protocol

from strom.common.errors import KafkaError

__all__ = ["SaslServer", "SaslClient", "SaslAuthenticationError", "SUPPORTED_MECHANISMS"]

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SaslAuthenticationError(KafkaError):
    """Authentication failed (Kafka's ``SaslAuthenticationException``); the message goes to the client, so it
    never holds a password."""


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
