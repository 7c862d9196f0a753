"""The error hierarchy: one ``KafkaError`` root, broker error codes as classes (generated), transport errors.

Kafka counterpart: ``org.apache.kafka.common.errors`` and ``Errors``.
"""

from __future__ import annotations

__all__ = [
    "KafkaError",
    "BrokerResponseError",
    "ConfigError",
    "KafkaTimeoutError",
    "KafkaConnectionError",
    "ProtocolError",
    "IllegalStateError",
    "InterruptError",
    "for_code",
    "error_class",
]


class KafkaError(Exception):
    """Root of every strom error."""

    retriable: bool = False
    invalid_metadata: bool = False


class BrokerResponseError(KafkaError):
    """An error code a broker returned (one subclass per code, see ``error_codes``)."""

    errno: int = -1
    name: str = "UNKNOWN_SERVER_ERROR"
    description: str = ""

    def __init__(self, message: str | None = None) -> None:
        self.message = message or self.description
        super().__init__(f"[Error {self.errno}] {self.name}: {self.message}")


class ConfigError(KafkaError, ValueError):
    """A configuration key is unknown or its value is invalid (Kafka's ``ConfigException``)."""


class KafkaTimeoutError(KafkaError, TimeoutError):
    """A client-side timeout (Kafka's ``org.apache.kafka.common.errors.TimeoutException``)."""

    retriable = True


class KafkaConnectionError(KafkaError, ConnectionError):
    """The connection to a broker failed or was closed (Kafka's ``NetworkException`` on the client side)."""

    retriable = True
    invalid_metadata = True


class ProtocolError(KafkaError):
    """Bytes on the wire do not follow the protocol (bad frame, bad correlation id, undecodable body)."""


class IllegalStateError(KafkaError):
    """An operation called in the wrong state (e.g. send after close)."""


class InterruptError(KafkaError):
    """A blocking call was interrupted by ``wakeup()`` or ``close()``."""


def error_class(code: int) -> type[BrokerResponseError]:
    """The class for a broker error code; unknown codes map to UNKNOWN_SERVER_ERROR as in Kafka."""
    from strom.common.error_codes import ERROR_CLASSES

    return ERROR_CLASSES.get(code) or ERROR_CLASSES[-1]


def for_code(code: int, message: str | None = None) -> BrokerResponseError:
    """An exception instance for a non-zero broker error code."""
    return error_class(code)(message)
