"""DescribeTransactions (key 65): the coordinator's state of transactional ids (``kafka-transactions --describe``).

Kafka counterpart: ``KafkaApis.handleDescribeTransactionsRequest`` → ``TransactionCoordinator.handleDescribeTransactions``:
an id this broker does not coordinate gets NOT_COORDINATOR, an unknown one TRANSACTIONAL_ID_NOT_FOUND. With an
authorizer: DESCRIBE on each id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode as E
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)
from strom.server.apis import api
from strom.server.security.request_auth import Op, Res, allowed

if TYPE_CHECKING:
    from strom.server.coordinator.transaction_coordinator import TransactionCoordinator
    from strom.server.request_context import RequestContext

R = DescribeTransactionsResponse


@api(ApiKey.DESCRIBE_TRANSACTIONS, 0)
async def handle(ctx: RequestContext, request: DescribeTransactionsRequest, *,
                 txn_coordinator: TransactionCoordinator, authorizer: Any) -> DescribeTransactionsResponse:
    out = []
    for tid in request.transactional_ids:
        if allowed(authorizer, ctx, Op.DESCRIBE, (Res.TRANSACTIONAL_ID, tid)):
            code, meta = txn_coordinator.describe(tid)
        else:
            code, meta = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
        if meta is None:
            out.append(R.TransactionState(error_code=code, transactional_id=tid, transaction_state="",
                                          transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                                          producer_epoch=-1, topics=[]))
            continue
        topics: dict[str, list[int]] = {}
        for tp in sorted(meta.partitions):
            topics.setdefault(tp.topic, []).append(tp.partition)
        out.append(R.TransactionState(
            error_code=E.NONE, transactional_id=tid, transaction_state=meta.state.display,
            transaction_timeout_ms=meta.txn_timeout_ms, transaction_start_time_ms=meta.txn_start_ms,
            producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
            topics=[R.TopicData(topic=t, partitions=ps) for t, ps in topics.items()]))
    return R(throttle_time_ms=0, transaction_states=out)
