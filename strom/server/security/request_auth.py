"""The authorization checks request handlers make (Kafka's ``AuthHelper``), in one place.

Every function takes the broker's authorizer, which is ``None`` unless ``authorizer.class.name`` is set; then
every check allows, so a broker without an authorizer pays one ``is None`` test per request. Handlers call these
only where Kafka's ``KafkaApis`` checks (the table in docs/security.md), with the connection's principal and client
host (``ctx.connection``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from strom.common.acl import AclOperation, ResourceType
from strom.server.security.authorizer import authorized_operations

if TYPE_CHECKING:
    from strom.server.request_context import RequestContext

__all__ = ["CLUSTER", "allowed", "allowed_cluster", "allowed_topics", "allowed_by_resource_type", "operations", "Op",
           "Res"]

Op = AclOperation
Res = ResourceType
CLUSTER = (ResourceType.CLUSTER, "kafka-cluster")


def allowed(authorizer: Any, ctx: RequestContext, op: AclOperation, resource: tuple[ResourceType, str]) -> bool:
    """May this request's principal, from its host, do ``op`` on ``resource``? Always with no authorizer."""
    if authorizer is None:
        return True
    conn = ctx.connection
    return bool(authorizer.authorize(conn.principal, conn.client_host, op, resource))


def allowed_cluster(authorizer: Any, ctx: RequestContext, op: AclOperation) -> bool:
    return allowed(authorizer, ctx, op, CLUSTER)


def allowed_topics(authorizer: Any, ctx: RequestContext, op: AclOperation, names: Iterable[str | None],
                   ) -> set[str]:
    """The names among ``names`` the principal may do ``op`` on (each asked once; ``None`` names are left out)."""
    unique = {n for n in names if n is not None}
    if authorizer is None:
        return unique
    return {n for n in unique if allowed(authorizer, ctx, op, (ResourceType.TOPIC, n))}


def allowed_by_resource_type(authorizer: Any, ctx: RequestContext, op: AclOperation,
                             resource_type: ResourceType) -> bool:
    """May the principal do ``op`` on *some* resource of the type (KIP-679)?"""
    if authorizer is None:
        return True
    conn = ctx.connection
    return bool(authorizer.authorize_by_resource_type(conn.principal, conn.client_host, op, resource_type))


def operations(authorizer: Any, ctx: RequestContext, resource: tuple[ResourceType, str]) -> int:
    """The ``*_authorized_operations`` bit field for ``resource`` (every supported operation with no authorizer)."""
    conn = ctx.connection
    return authorized_operations(authorizer, conn.principal, conn.client_host, resource)
