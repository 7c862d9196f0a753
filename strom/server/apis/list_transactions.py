"""ListTransactions (key 66): the transactional ids this broker coordinates (``kafka-transactions --list``).

Kafka counterpart: ``TransactionStateManager.listTransactionStates``: filters by state name (unknown names are
echoed back in ``UnknownStateFilters``), by producer id and (v1) by how long the transaction has been open.
Clients ask every broker and merge the answers. With an authorizer only ids the principal may DESCRIBE are listed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode as E
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.list_transactions import ListTransactionsRequest, ListTransactionsResponse
from strom.server.apis import api
from strom.server.coordinator.transaction_metadata import TransactionState
from strom.server.security.request_auth import Op, Res, allowed

if TYPE_CHECKING:
    from strom.common.time import Time
    from strom.server.coordinator.transaction_coordinator import TransactionCoordinator
    from strom.server.request_context import RequestContext

R = ListTransactionsResponse
_NAMES = {s.display: s for s in TransactionState}


@api(ApiKey.LIST_TRANSACTIONS, 0)
async def handle(ctx: RequestContext, request: ListTransactionsRequest, *, txn_coordinator: TransactionCoordinator,
                 time: Time, authorizer: Any) -> ListTransactionsResponse:
    if not txn_coordinator.active:
        return R(throttle_time_ms=0, error_code=E.COORDINATOR_NOT_AVAILABLE, unknown_state_filters=[],
                 transaction_states=[])
    unknown = [f for f in request.state_filters if f not in _NAMES]
    states = {_NAMES[f] for f in request.state_filters if f in _NAMES}
    pids = set(request.producer_id_filters)
    min_duration = request.duration_filter if ctx.api_version >= 1 else -1
    now = time.milliseconds()
    out = []
    for tid, meta in sorted(txn_coordinator.cache.items()):
        if request.state_filters and meta.state not in states:
            continue
        if pids and meta.producer_id not in pids:
            continue
        if min_duration >= 0 and (meta.txn_start_ms < 0 or now - meta.txn_start_ms < min_duration):
            continue
        if not allowed(authorizer, ctx, Op.DESCRIBE, (Res.TRANSACTIONAL_ID, tid)):
            continue
        out.append(R.TransactionState(transactional_id=tid, producer_id=meta.producer_id,
                                      transaction_state=meta.state.display))
    return R(throttle_time_ms=0, error_code=E.NONE, unknown_state_filters=unknown, transaction_states=out)
