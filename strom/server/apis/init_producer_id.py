"""InitProducerId (key 22): producer ids for idempotent producers, and epochs for transactional ones.

Kafka counterpart: ``TransactionCoordinator.handleInitProducerId``. Without a transactional id any broker hands
out a fresh producer id from the ``ProducerIdManager``. With one, only the id's transaction coordinator answers:
it bumps the epoch (fencing the previous incarnation, aborting its open transaction first) — see
:meth:`TransactionCoordinator.init_producer_id`. v3+ may carry the producer's current id and epoch (KIP-360).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from strom.server.apis import api
from strom.server.security.request_auth import Op, Res, allowed, allowed_by_resource_type, allowed_cluster

if TYPE_CHECKING:
    from strom.server.coordinator.transaction_coordinator import TransactionCoordinator
    from strom.server.producer_id_manager import ProducerIdManager
    from strom.server.request_context import RequestContext


@api(ApiKey.INIT_PRODUCER_ID, 0)
async def handle(ctx: RequestContext, request: InitProducerIdRequest, *, producer_ids: ProducerIdManager,
                 authorizer: Any, txn_coordinator: TransactionCoordinator) -> InitProducerIdResponse:
    if authorizer is not None:
        code = _refusal(authorizer, ctx, request.transactional_id)
        if code:
            return InitProducerIdResponse(throttle_time_ms=0, error_code=code, producer_id=-1, producer_epoch=-1)
    if request.transactional_id is not None:
        v3 = ctx.api_version >= 3
        code, pid, epoch = await txn_coordinator.init_producer_id(
            request.transactional_id, request.transaction_timeout_ms, request.producer_id if v3 else -1,
            request.producer_epoch if v3 else -1)
        if code == ErrorCode.PRODUCER_FENCED and ctx.api_version < 4:
            code = ErrorCode.INVALID_PRODUCER_EPOCH  # what clients older than KIP-588 understand
        return InitProducerIdResponse(throttle_time_ms=0, error_code=code, producer_id=pid, producer_epoch=epoch)
    try:
        pid = await producer_ids.generate_producer_id()
    except OSError:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.KAFKA_STORAGE_ERROR, producer_id=-1,
                                      producer_epoch=-1)
    except Exception:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                      producer_id=-1, producer_epoch=-1)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=pid, producer_epoch=0)


def _refusal(authorizer: Any, ctx: RequestContext, transactional_id: str | None) -> int:
    """A transactional id needs WRITE on it; an idempotent producer IDEMPOTENT_WRITE on the cluster or WRITE on
    some topic (KIP-679)."""
    if transactional_id is not None:
        if not allowed(authorizer, ctx, Op.WRITE, (Res.TRANSACTIONAL_ID, transactional_id)):
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return ErrorCode.NONE
    if allowed_cluster(authorizer, ctx, Op.IDEMPOTENT_WRITE) or \
            allowed_by_resource_type(authorizer, ctx, Op.WRITE, Res.TOPIC):
        return ErrorCode.NONE
    return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
