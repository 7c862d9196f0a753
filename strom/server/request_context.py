"""What a handler receives besides the request body (Kafka's ``RequestContext``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strom.server.broker import BrokerServer
    from strom.server.socket_server import ConnectionContext

__all__ = ["RequestContext"]


@dataclass(slots=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    connection: ConnectionContext
    broker: BrokerServer
