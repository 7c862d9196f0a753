"""EndTxn (key 26): commit or abort the producer's transaction.

Kafka counterpart: ``KafkaApis.handleEndTxnRequest`` → ``TransactionCoordinator.handleEndTransaction``. v5
(KIP-890 part 2, an epoch bump per transaction) is not offered, so clients keep the v4 semantics. With an
authorizer: WRITE on the transactional id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from strom.server.apis import api
from strom.server.security.request_auth import Op, Res, allowed

if TYPE_CHECKING:
    from strom.server.coordinator.transaction_coordinator import TransactionCoordinator
    from strom.server.request_context import RequestContext


@api(ApiKey.END_TXN, 0, 4)
async def handle(ctx: RequestContext, request: EndTxnRequest, *,
                 txn_coordinator: TransactionCoordinator, authorizer: Any) -> EndTxnResponse:
    if not allowed(authorizer, ctx, Op.WRITE, (Res.TRANSACTIONAL_ID, request.transactional_id)):
        return EndTxnResponse(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    code = await txn_coordinator.end_transaction(request.transactional_id, request.producer_id,
                                                 request.producer_epoch, bool(request.committed))
    return EndTxnResponse(throttle_time_ms=0, error_code=code)
