"""DescribeClientQuotas (key 48) and AlterClientQuotas (key 49), KIP-546.

Kafka counterparts: ``KafkaApis.handleDescribeClientQuotasRequest`` / ``handleAlterClientQuotasRequest`` with
``ZkAdminManager.describeClientQuotas`` / ``alterClientQuotas`` (and the KRaft controller's validation:
``ClientQuotaControlManager``). Describing needs DESCRIBE_CONFIGS on the cluster, altering ALTER_CONFIGS; bad
entities, unknown keys and bad values are refused per entry with INVALID_REQUEST and a message. An alteration is
persisted (file or ZooKeeper) before the broker's quota managers apply it; other brokers of a cluster apply it
when they see the change notification.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.alter_client_quotas import AlterClientQuotasRequest, AlterClientQuotasResponse
from strom.protocol.messages.describe_client_quotas import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from strom.server.apis import api
from strom.server.security.client_quotas import (
    CLIENT_ID,
    CONNECTION_CREATION_RATE,
    DEFAULT,
    IP,
    QUOTA_KEYS,
    USER,
    ClientQuotaManagers,
    QuotaEntity,
    QuotaValidationError,
    entity_from_wire,
    validate_quota_value,
)
from strom.server.security.request_auth import Op, allowed_cluster

if TYPE_CHECKING:
    from strom.server.request_context import RequestContext

log = logging.getLogger("strom.server")
MATCH_TYPE_EXACT, MATCH_TYPE_DEFAULT, MATCH_TYPE_SPECIFIED = 0, 1, 2
_ANY = object()  # a filter component matching any name of its type (MATCH_TYPE_SPECIFIED)


async def _blocking(quotas: ClientQuotaManagers, fn: Any, *args: Any) -> Any:
    """ZooKeeper reads and writes block: run them off the event loop; the file store is quick enough inline."""
    if getattr(quotas.store, "zk", None) is None:
        return fn(*args)
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


def _filter(request: DescribeClientQuotasRequest) -> dict[str, Any]:
    """``{entity type: name | DEFAULT | _ANY}`` from the request's components (Kafka's checks)."""
    out: dict[str, Any] = {}
    for c in request.components:
        if c.entity_type in out:
            raise QuotaValidationError(f"Duplicate {c.entity_type} filter component entity type")
        if c.match_type == MATCH_TYPE_EXACT:
            if c.match is None:
                raise QuotaValidationError("Request specified MATCH_TYPE_EXACT, but set match string to null")
            want: Any = c.match
        elif c.match_type == MATCH_TYPE_DEFAULT:
            if c.match is not None:
                raise QuotaValidationError("Request specified MATCH_TYPE_DEFAULT, but also specified a match string")
            want = DEFAULT
        elif c.match_type == MATCH_TYPE_SPECIFIED:
            if c.match is not None:
                raise QuotaValidationError("Request specified MATCH_TYPE_SPECIFIED, but also specified a match "
                                           "string")
            want = _ANY
        else:
            raise QuotaValidationError(f"Unexpected match type: {c.match_type}")
        if c.entity_type == "":
            raise QuotaValidationError("Unexpected empty filter component entity type")
        if c.entity_type not in (USER, CLIENT_ID, IP):
            raise QuotaValidationError(f"Custom entity type '{c.entity_type}' not supported")
        out[c.entity_type] = want
    if IP in out and (USER in out or CLIENT_ID in out):
        raise QuotaValidationError("Invalid entity filter component combination, IP filter component should not be "
                                   "used with user or clientId filter component.")
    return out


def _matches(want: Any, name: str | None, strict: bool) -> bool:
    if want is None:  # no component for this type
        return name is None or not strict
    if want is _ANY:
        return name is not None
    return bool(name == want)


@api(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0)
async def describe_client_quotas(ctx: RequestContext, request: DescribeClientQuotasRequest, *,
                                 quotas: ClientQuotaManagers, authorizer: Any) -> DescribeClientQuotasResponse:
    if not allowed_cluster(authorizer, ctx, Op.DESCRIBE_CONFIGS):
        return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                            error_message=None, entries=None)
    try:
        wanted = _filter(request)
    except QuotaValidationError as e:
        return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                                            error_message=str(e), entries=None)
    entries: list[DescribeClientQuotasResponse.EntryData] = []
    stored = await _blocking(quotas, quotas.store.entities)
    for entity, values in sorted(stored.items(),
                                 key=lambda kv: (str(kv[0].user), str(kv[0].client_id), str(kv[0].ip))):
        if not (_matches(wanted.get(USER), entity.user, request.strict)
                and _matches(wanted.get(CLIENT_ID), entity.client_id, request.strict)
                and _matches(wanted.get(IP), entity.ip, request.strict)):
            continue
        entries.append(DescribeClientQuotasResponse.EntryData(
            entity=[DescribeClientQuotasResponse.EntityData(entity_type=t, entity_name=n)
                    for t, n in entity.to_wire()],
            values=[DescribeClientQuotasResponse.ValueData(key=k, value=v) for k, v in sorted(values.items())]))
    return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
                                        entries=entries)


def _changes(entry: AlterClientQuotasRequest.EntryData) -> tuple[QuotaEntity, dict[str, str | None]]:
    entity = entity_from_wire((e.entity_type, e.entity_name) for e in entry.entity)
    changes: dict[str, str | None] = {}
    for op in entry.ops:
        if op.key in changes:
            raise QuotaValidationError(f"Duplicate quota configuration key {op.key}")
        if op.remove:
            if op.key not in QUOTA_KEYS or (op.key == CONNECTION_CREATION_RATE) != (entity.ip is not None):
                raise QuotaValidationError(f"Invalid configuration key {op.key}")
            changes[op.key] = None
        else:
            changes[op.key] = validate_quota_value(op.key, op.value, ip_entity=entity.ip is not None)
    return entity, changes


@api(ApiKey.ALTER_CLIENT_QUOTAS, 0)
async def alter_client_quotas(ctx: RequestContext, request: AlterClientQuotasRequest, *,
                              quotas: ClientQuotaManagers, authorizer: Any) -> AlterClientQuotasResponse:
    authorized = allowed_cluster(authorizer, ctx, Op.ALTER_CONFIGS)
    results: list[AlterClientQuotasResponse.EntryData] = []
    for entry in request.entries:
        wire_entity = [AlterClientQuotasResponse.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                       for e in entry.entity]
        code, message = ErrorCode.NONE, None
        if not authorized:
            code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        else:
            try:
                entity, changes = _changes(entry)
                if not request.validate_only:
                    values = await _blocking(quotas, quotas.store.alter, entity, changes)
                    quotas.set_entity(entity, values)
            except QuotaValidationError as e:
                code, message = ErrorCode.INVALID_REQUEST, str(e)
            except Exception as e:  # the store could not be written: say so, change nothing here
                log.exception("cannot alter client quotas")
                code, message = ErrorCode.UNKNOWN_SERVER_ERROR, f"Cannot store the client quotas: {e}"
        results.append(AlterClientQuotasResponse.EntryData(error_code=code, error_message=message,
                                                           entity=wire_entity))
    return AlterClientQuotasResponse(throttle_time_ms=0, entries=results)
