"""FindCoordinator (key 10): the broker leading the ``__consumer_offsets`` partition of a group.

Kafka counterpart: ``KafkaApis.handleFindCoordinatorRequest`` (v0-v3 one key, v4+ batched ``CoordinatorKeys``,
KIP-699). Key type 0 is a group: its coordinator is the leader of partition ``abs(hash(group)) % 50`` of
``__consumer_offsets``, which is created on first use (``offsets.topic.*``); until it has a leader the answer is
COORDINATOR_NOT_AVAILABLE and clients retry. Key type 1 is a transactional id: its coordinator leads partition
``abs(hash(id)) % 50`` of ``__transaction_state`` (``transaction.state.log.*``), created on first use likewise.
Other key types get INVALID_REQUEST.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode as E
from strom.common.errors import BrokerResponseError, KafkaError
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from strom.server.admin_manager import log_not_created
from strom.server.apis import api
from strom.server.coordinator.offset_config import GROUP_METADATA_TOPIC_NAME
from strom.server.coordinator.transaction_metadata import TRANSACTION_STATE_TOPIC_NAME
from strom.server.security.request_auth import Op, Res, allowed

if TYPE_CHECKING:
    from strom.server.admin_manager import AdminManager
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.coordinator.transaction_coordinator import TransactionCoordinator
    from strom.server.metadata_cache import MetadataCache
    from strom.server.request_context import RequestContext

log = logging.getLogger("strom.server")

GROUP, TRANSACTION = 0, 1
NOT_AVAILABLE = (E.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", None)
_DESCRIBED = {GROUP: (Res.GROUP, E.GROUP_AUTHORIZATION_FAILED),
              TRANSACTION: (Res.TRANSACTIONAL_ID, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)}


async def ensure_offsets_topic(admin: AdminManager, group_coordinator: GroupCoordinator) -> bool:
    """Create ``__consumer_offsets`` when missing; False when it cannot exist yet (too few brokers, disk)."""
    cfg = group_coordinator.offset_config
    if admin.metadata.topic(GROUP_METADATA_TOPIC_NAME) is not None:
        return True
    try:
        info = await admin.create_internal_topic(
            GROUP_METADATA_TOPIC_NAME, cfg.offsets_topic_num_partitions, cfg.offsets_topic_replication_factor,
            {"cleanup.policy": "compact", "segment.bytes": str(cfg.offsets_topic_segment_bytes),
             "compression.type": "producer"})
    except (BrokerResponseError, KafkaError, OSError) as e:
        log_not_created(GROUP_METADATA_TOPIC_NAME, e)
        return False
    return info is not None


async def ensure_transaction_state_topic(admin: AdminManager, txn_coordinator: TransactionCoordinator) -> bool:
    """Create ``__transaction_state`` when missing; False when it cannot exist yet."""
    cfg = txn_coordinator.config
    if admin.metadata.topic(TRANSACTION_STATE_TOPIC_NAME) is not None:
        return True
    # A standalone broker makes it with one replica (as __consumer_offsets): min.isr cannot exceed that.
    min_isr = max(1, min(cfg.min_isr, cfg.replication_factor, len(admin.metadata.alive_brokers())))
    try:
        info = await admin.create_internal_topic(
            TRANSACTION_STATE_TOPIC_NAME, cfg.num_partitions, cfg.replication_factor,
            {"cleanup.policy": "compact", "segment.bytes": str(cfg.segment_bytes), "compression.type": "producer",
             "min.insync.replicas": str(min_isr), "unclean.leader.election.enable": "false"})
    except (BrokerResponseError, KafkaError, OSError) as e:
        log_not_created(TRANSACTION_STATE_TOPIC_NAME, e)
        return False
    return info is not None


async def _lookup(key: str, key_type: int, listener: str | None, metadata: MetadataCache, admin: AdminManager,
                  group_coordinator: GroupCoordinator, txn_coordinator: TransactionCoordinator,
                  ) -> tuple[int, str | None, tuple[int, str, int] | None]:
    if key_type == TRANSACTION:
        if not key:
            return E.INVALID_REQUEST, "The transactional id must not be empty", None
        if not txn_coordinator.active or not await ensure_transaction_state_topic(admin, txn_coordinator):
            return NOT_AVAILABLE
        tp = TopicPartition(TRANSACTION_STATE_TOPIC_NAME, txn_coordinator.partition_for(key))
    elif key_type == GROUP:
        if not group_coordinator.active or not await ensure_offsets_topic(admin, group_coordinator):
            return NOT_AVAILABLE
        tp = TopicPartition(GROUP_METADATA_TOPIC_NAME, group_coordinator.partition_for(key))
    else:
        return E.INVALID_REQUEST, f"Unsupported key type {key_type}", None
    st = metadata.partition_state(tp)
    broker = metadata.broker(st.leader) if st is not None and st.leader >= 0 else None
    ep = broker.endpoint(listener) if broker is not None else None
    if broker is None or ep is None:
        return NOT_AVAILABLE
    return E.NONE, None, (broker.node_id, ep[0], ep[1])


@api(ApiKey.FIND_COORDINATOR, 0)
async def handle(ctx: RequestContext, request: FindCoordinatorRequest, *, metadata: MetadataCache,
                 admin: AdminManager, group_coordinator: GroupCoordinator,
                 authorizer: Any, txn_coordinator: TransactionCoordinator) -> FindCoordinatorResponse:
    version = ctx.api_version
    key_type = request.key_type if version >= 1 else GROUP

    async def lookup(key: str) -> tuple[int, str | None, tuple[int, str, int] | None]:
        # A group needs DESCRIBE on the group, a transactional id DESCRIBE on it (Kafka's getCoordinator).
        if authorizer is not None and key_type in _DESCRIBED:
            resource_type, denied = _DESCRIBED[key_type]
            if not allowed(authorizer, ctx, Op.DESCRIBE, (resource_type, key)):
                return denied, None, None
        return await _lookup(key, key_type, ctx.listener_name, metadata, admin, group_coordinator, txn_coordinator)

    if version < 4:
        error, message, node = await lookup(request.key)
        return FindCoordinatorResponse(throttle_time_ms=0, error_code=error, error_message=message,
                                       node_id=node[0] if node else -1, host=node[1] if node else "",
                                       port=node[2] if node else -1)
    out = []
    for key in request.coordinator_keys:
        error, message, node = await lookup(key)
        out.append(FindCoordinatorResponse.Coordinator(key=key, node_id=node[0] if node else -1,
                                                       host=node[1] if node else "", port=node[2] if node else -1,
                                                       error_code=error, error_message=message))
    return FindCoordinatorResponse(throttle_time_ms=0, coordinators=out)
