"""Request handlers, one module per API key, registered with the versions each handles.

A handler is ``async def handle(ctx, request, *, <collaborator>: <type>, ...)``: the keyword-only parameters
name the broker collaborators it uses (fields of :class:`strom.server.kafka_apis.ApiCollaborators`), and
``KafkaApis`` binds them once at start-up. No handler reaches the broker itself. ApiVersions answers from this
registry, so what the broker advertises is exactly what it handles.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.protocol.messages import REQUESTS, RESPONSES

if TYPE_CHECKING:
    from strom.server.request_context import RequestContext

__all__ = ["ApiSpec", "REGISTRY", "api", "load_all"]

Handler = Callable[..., Awaitable[Any]]
BoundHandler = Callable[["RequestContext", Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class ApiSpec:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler
    request_cls: type
    response_cls: type


REGISTRY: dict[int, ApiSpec] = {}

_MODULES = (
    "api_versions",
    "metadata",
    "produce",
    "fetch",
    "list_offsets",
    "create_topics",
    "delete_topics",
    "create_partitions",
    "configs",
    "delete_records",
    "describe_cluster",
    "describe_log_dirs",
    "alter_replica_log_dirs",
    "init_producer_id",
    "find_coordinator",
    "join_group",
    "sync_group",
    "heartbeat",
    "leave_group",
    "offset_commit",
    "offset_fetch",
    "offset_delete",
    "list_groups",
    "describe_groups",
    "delete_groups",
    "inter_broker",
    "security_apis",
    "add_partitions_to_txn",
    "add_offsets_to_txn",
    "end_txn",
    "write_txn_markers",
    "txn_offset_commit",
    "describe_transactions",
    "list_transactions",
    "describe_producers",
    "client_quotas",
    "telemetry",
)


def api(api_key: int, min_version: int, max_version: int | None = None) -> Callable[[Handler], Handler]:
    """Register ``fn`` as the handler of ``api_key`` for ``min_version..max_version`` (default: newest stable)."""

    def deco(fn: Handler) -> Handler:
        req = REQUESTS[api_key]
        hi = req.VALID_VERSIONS[1] - (1 if getattr(req, "LATEST_VERSION_UNSTABLE", False) else 0)
        REGISTRY[api_key] = ApiSpec(
            api_key, min_version, min(hi, max_version) if max_version is not None else hi, fn, req, RESPONSES[api_key]
        )
        return fn

    return deco


def load_all() -> dict[int, ApiSpec]:
    for name in _MODULES:
        importlib.import_module(f"{__name__}.{name}")
    return REGISTRY
