"""AddOffsetsToTxn (key 25): add the group's ``__consumer_offsets`` partition to the producer's transaction.

Kafka counterpart: ``KafkaApis.handleAddOffsetsToTxnRequest``: the partition is ``partitionFor(groupId)``, so
the TxnOffsetCommit that follows writes there and the transaction's marker reaches it. With an authorizer: WRITE
on the transactional id, READ on the group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from strom.server.apis import api
from strom.server.apis.find_coordinator import ensure_offsets_topic
from strom.server.coordinator.offset_config import GROUP_METADATA_TOPIC_NAME
from strom.server.security.request_auth import Op, Res, allowed

if TYPE_CHECKING:
    from strom.server.admin_manager import AdminManager
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.coordinator.transaction_coordinator import TransactionCoordinator
    from strom.server.request_context import RequestContext


@api(ApiKey.ADD_OFFSETS_TO_TXN, 0)
async def handle(ctx: RequestContext, request: AddOffsetsToTxnRequest, *, txn_coordinator: TransactionCoordinator,
                 group_coordinator: GroupCoordinator, admin: AdminManager, authorizer: Any) -> AddOffsetsToTxnResponse:
    from strom.common.error_codes import ErrorCode as E

    if not allowed(authorizer, ctx, Op.WRITE, (Res.TRANSACTIONAL_ID, request.transactional_id)):
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not allowed(authorizer, ctx, Op.READ, (Res.GROUP, request.group_id)):
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=E.GROUP_AUTHORIZATION_FAILED)

    if not request.group_id:
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=E.INVALID_GROUP_ID)
    if not await ensure_offsets_topic(admin, group_coordinator):
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=E.COORDINATOR_NOT_AVAILABLE)
    tp = TopicPartition(GROUP_METADATA_TOPIC_NAME, group_coordinator.partition_for(request.group_id))
    code = await txn_coordinator.add_partitions(request.transactional_id, request.producer_id,
                                                request.producer_epoch, {tp})
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)
