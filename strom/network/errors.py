"""Client-side network errors.

Kafka counterparts: ``org.apache.kafka.common.errors.DisconnectException``,
``org.apache.kafka.common.network.InvalidReceiveException``, ``CorrelationIdMismatchException``.
Broker error codes (``NETWORK_EXCEPTION``, ``UNSUPPORTED_VERSION`` ...) live in ``strom.common.error_codes``.
Plain exception classes; thread-safe.
"""

from __future__ import annotations

from strom.common.errors import KafkaConnectionError
from strom.protocol.connection import CorrelationIdMismatchError, InvalidFrameError

__all__ = ["DisconnectError", "InvalidReceiveError", "CorrelationIdMismatchError"]


class DisconnectError(KafkaConnectionError):
    """The connection was closed (locally or by the peer) before a response arrived (retriable)."""


class InvalidReceiveError(InvalidFrameError):
    """A frame's size prefix is negative or above the maximum receive size (Kafka's
    ``InvalidReceiveException``): the connection is closed."""
