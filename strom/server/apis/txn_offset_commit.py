"""TxnOffsetCommit (key 28): commit a consumer group's offsets inside the producer's transaction.

Kafka counterpart: ``KafkaApis.handleTxnOffsetCommitRequest`` → ``GroupCoordinator.handleTxnCommitOffsets``: the
offsets are written to ``__consumer_offsets`` as part of the transaction and become the group's committed offsets
only when the COMMIT marker arrives (:class:`~strom.server.coordinator.group_txn_offsets.TxnOffsetStore`). v3+
carries the consumer's generation and member id (KIP-447), checked like an OffsetCommit's. With an authorizer:
WRITE on the transactional id and READ on the group (else that error on every partition), READ on each topic.
The first commit of a transaction to the group's ``__consumer_offsets`` partition is verified with the
transaction's coordinator first, as a Produce's first batch is (KIP-890 part 1, Kafka 3.6+): INVALID_TXN_STATE for
one that is not in the producer's ongoing transaction (a late request after an abort), COORDINATOR_NOT_AVAILABLE /
COORDINATOR_LOAD_IN_PROGRESS (retried by clients) when the coordinator cannot say.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode as E
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from strom.server.apis import api
from strom.server.coordinator.group_metadata import CommittedOffset
from strom.server.coordinator.offset_config import GROUP_METADATA_TOPIC_NAME
from strom.server.coordinator.request_support import active_coordinator
from strom.server.security.request_auth import Op, Res, allowed, allowed_topics
from strom.storage.producer_state import ONGOING

if TYPE_CHECKING:
    from strom.common.time import Time
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.metadata_cache import MetadataCache
    from strom.server.replica_manager import ReplicaManager
    from strom.server.request_context import RequestContext
    from strom.storage.producer_state import VerificationGuard

R = TxnOffsetCommitResponse


# Kafka's conversion of what verification answers into errors TxnOffsetCommit clients retry (KAFKA-16386: a network
# failure is COORDINATOR_LOAD_IN_PROGRESS, which does not send the client looking for another group coordinator).
_NOT_AVAILABLE = frozenset({E.CONCURRENT_TRANSACTIONS, E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE,
                            E.NOT_COORDINATOR})
_LOAD_IN_PROGRESS = frozenset({E.NETWORK_EXCEPTION, E.REQUEST_TIMED_OUT})


async def _verify(replica_manager: ReplicaManager, coord: GroupCoordinator, request: TxnOffsetCommitRequest,
                  ) -> tuple[int, VerificationGuard | None]:
    """(error code, guard for the append) of the transaction's verification for the group's offsets partition."""
    verifier = replica_manager.txn_verifier
    if verifier is None or not replica_manager.transaction_verification_enabled:
        return E.NONE, None
    tp = TopicPartition(GROUP_METADATA_TOPIC_NAME, coord.partition_for(request.group_id))
    p = replica_manager.get_partition(tp)
    if p is None or not p.is_leader:
        return E.NONE, None  # the append answers NOT_COORDINATOR
    guard = p.log.maybe_start_verification(request.producer_id, request.producer_epoch)
    if guard is ONGOING:
        return E.NONE, guard
    code = (await verifier.verify(request.transactional_id, request.producer_id, request.producer_epoch, [tp]))[tp]
    if code in _NOT_AVAILABLE:
        code = E.COORDINATOR_NOT_AVAILABLE
    elif code in _LOAD_IN_PROGRESS:
        code = E.COORDINATOR_LOAD_IN_PROGRESS
    return code, guard


@api(ApiKey.TXN_OFFSET_COMMIT, 0)
async def handle(ctx: RequestContext, request: TxnOffsetCommitRequest, *, group_coordinator: GroupCoordinator,
                 metadata: MetadataCache, time: Time, authorizer: Any,
                 replica_manager: ReplicaManager) -> TxnOffsetCommitResponse:
    version = ctx.api_version
    now = time.milliseconds()
    errors: dict[TopicPartition, int] = {}
    offsets: dict[TopicPartition, CommittedOffset] = {}
    denied: int | None = None
    readable: set[str] | None = None
    if authorizer is not None:
        if not allowed(authorizer, ctx, Op.WRITE, (Res.TRANSACTIONAL_ID, request.transactional_id)):
            denied = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif not allowed(authorizer, ctx, Op.READ, (Res.GROUP, request.group_id)):
            denied = E.GROUP_AUTHORIZATION_FAILED
        readable = allowed_topics(authorizer, ctx, Op.READ, (t.name for t in request.topics))
    for t in request.topics:
        info = metadata.topic(t.name)
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if denied is not None:
                errors[tp] = denied
                continue
            if readable is not None and t.name not in readable:
                errors[tp] = E.TOPIC_AUTHORIZATION_FAILED
                continue
            if info is None or not 0 <= p.partition_index < info.num_partitions:
                errors[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
                continue
            offsets[tp] = CommittedOffset(offset=p.committed_offset,
                                          leader_epoch=p.committed_leader_epoch if version >= 2 else -1,
                                          metadata=p.committed_metadata or "", commit_timestamp=now)
    coord = active_coordinator(group_coordinator)
    if offsets:
        verified, guard = (E.COORDINATOR_NOT_AVAILABLE, None) if coord is None else \
            await _verify(replica_manager, coord, request)
        if coord is None or verified != E.NONE:
            errors.update(dict.fromkeys(offsets, verified))
        else:
            errors.update(coord.txn_offsets.commit(
                request.group_id, request.producer_id, request.producer_epoch,
                request.member_id if version >= 3 else "", request.group_instance_id if version >= 3 else None,
                request.generation_id if version >= 3 else -1, offsets, guard))
            ok = [tp for tp in offsets if errors.get(tp) == E.NONE]
            if ok:
                durable = await coord.wait_for_durability(request.group_id)
                if durable != E.NONE:
                    errors.update(dict.fromkeys(ok, durable))
    return R(throttle_time_ms=0, topics=[
        R.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
            R.TxnOffsetCommitResponsePartition(partition_index=p.partition_index,
                                               error_code=errors[TopicPartition(t.name, p.partition_index)])
            for p in t.partitions])
        for t in request.topics])
