"""AddPartitionsToTxn (key 24): add partitions to the producer's open transaction.

Kafka counterpart: ``KafkaApis.handleAddPartitionsToTxnRequest`` → ``TransactionCoordinator.handleAddPartitionsToTransaction``.
v0-v3 carry one transaction; v4+ (KIP-890, brokers only: CLUSTER_ACTION) a batch of them, each of which may be
``verify_only``: a partition leader asking whether the partitions are in the producer's ongoing transaction before
it appends the transaction's first batch there (nothing is added). When a partition does not exist it gets
UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED (nothing is added), as in Kafka. With an
authorizer: WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition) and on
each topic (else TOPIC_AUTHORIZATION_FAILED there, the others OPERATION_NOT_ATTEMPTED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode as E
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
)
from strom.server.apis import api
from strom.server.apis.txn_support import split_known_partitions
from strom.server.security.request_auth import Op, Res, allowed, allowed_cluster, allowed_topics

if TYPE_CHECKING:
    from strom.server.coordinator.transaction_coordinator import TransactionCoordinator
    from strom.server.metadata_cache import MetadataCache
    from strom.server.request_context import RequestContext

R = AddPartitionsToTxnResponse


async def _one(ctx: RequestContext, authorizer: Any, tc: TransactionCoordinator, metadata: MetadataCache,
               tid: str, pid: int, epoch: int, topics: list[Any], verify_only: bool = False,
               ) -> list[R.AddPartitionsToTxnTopicResult]:
    wanted: dict[str, list[int]] = {}
    for t in topics:
        wanted.setdefault(t.name, []).extend(t.partitions)
    known, errors = split_known_partitions(metadata, wanted)
    if authorizer is not None:
        if not allowed(authorizer, ctx, Op.WRITE, (Res.TRANSACTIONAL_ID, tid)):
            known |= set(errors)
            errors = dict.fromkeys(known, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        else:
            writable = allowed_topics(authorizer, ctx, Op.WRITE, wanted)
            for tp in [*known, *errors]:
                if tp.topic not in writable:
                    errors[tp] = E.TOPIC_AUTHORIZATION_FAILED
                    known.discard(tp)
    if errors:
        result = {tp: errors.get(tp, E.OPERATION_NOT_ATTEMPTED) for tp in known | set(errors)}
    elif verify_only:
        result = tc.verify_partitions(tid, pid, epoch, known)
    else:
        code = await tc.add_partitions(tid, pid, epoch, known)
        result = dict.fromkeys(known, code)
    return [R.AddPartitionsToTxnTopicResult(name=name, results_by_partition=[
        R.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=result[TopicPartition(name, p)])
        for p in dict.fromkeys(parts)]) for name, parts in wanted.items()]


@api(ApiKey.ADD_PARTITIONS_TO_TXN, 0)
async def handle(ctx: RequestContext, request: AddPartitionsToTxnRequest, *, txn_coordinator: TransactionCoordinator,
                 metadata: MetadataCache, authorizer: Any) -> AddPartitionsToTxnResponse:
    if ctx.api_version < 4:
        results = await _one(ctx, authorizer, txn_coordinator, metadata, request.v3_and_below_transactional_id,
                             request.v3_and_below_producer_id, request.v3_and_below_producer_epoch,
                             request.v3_and_below_topics)
        return R(throttle_time_ms=0, results_by_topic_v3_and_below=results)
    if not allowed_cluster(authorizer, ctx, Op.CLUSTER_ACTION):
        return R(throttle_time_ms=0, error_code=E.CLUSTER_AUTHORIZATION_FAILED, results_by_transaction=[])
    out = []
    for t in request.transactions:
        results = await _one(ctx, authorizer, txn_coordinator, metadata, t.transactional_id, t.producer_id,
                             t.producer_epoch, t.topics, t.verify_only)
        out.append(R.AddPartitionsToTxnResult(transactional_id=t.transactional_id, topic_results=results))
    return R(throttle_time_ms=0, error_code=E.NONE, results_by_transaction=out)
