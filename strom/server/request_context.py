"""What a handler receives besides the request body and its collaborators (Kafka's ``RequestContext``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strom.server.socket_server import ConnectionContext

__all__ = ["RequestContext"]


@dataclass(slots=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    connection: ConnectionContext
    listener_name: str | None = None

    @property
    def client_host(self) -> str:
        """The client address as Kafka reports it (``/127.0.0.1``)."""
        peer = self.connection.peer
        host = peer.rsplit(":", 1)[0] if ":" in peer else peer
        return "/" + host.strip("[]")
