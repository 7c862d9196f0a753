"""Small helpers the group API handlers share (Kafka counterpart: bits of ``KafkaApis``).

Event loop only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.request_context import RequestContext

__all__ = ["group_coordinator", "client_host"]


def group_coordinator(ctx: RequestContext) -> GroupCoordinator | None:
    """The broker's group coordinator when it is running, else None (answer COORDINATOR_NOT_AVAILABLE)."""
    coord: GroupCoordinator | None = getattr(ctx.broker, "group_coordinator", None)
    return coord if coord is not None and coord.active else None


def client_host(ctx: RequestContext) -> str:
    """The client address as Kafka reports it in DescribeGroups (``/127.0.0.1``)."""
    peer = ctx.connection.peer
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host.strip("[]")
