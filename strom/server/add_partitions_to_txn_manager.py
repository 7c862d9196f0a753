"""Verifying, before a partition leader appends a transaction's first batch there, that the partition is in the
producer's ongoing transaction (KIP-890 part 1, ``transaction.partition.verification.enable``).

Kafka counterpart: ``AddPartitionsToTxnManager``: the leader asks the coordinator of the transactional id with
AddPartitionsToTxn v4 ``verify_only`` (a coordinator on this broker is asked directly). Without it, a produce
request that arrives after its transaction ended (a request that sat in a socket or a retry queue while the
transaction was aborted) opens a transaction no coordinator knows of: a hanging transaction that holds the
partition's last stable offset, and every read_committed reader, back until an operator aborts it. Event loop only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from strom.common.error_codes import ErrorCode as E
from strom.common.errors import KafkaError
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from strom.server.broker_channel import BrokerChannels
from strom.server.coordinator.transaction_metadata import TRANSACTION_STATE_TOPIC_NAME

if TYPE_CHECKING:
    from strom.server.coordinator.transaction_coordinator import TransactionCoordinator
    from strom.server.metadata_cache import MetadataCache
    from strom.server.security.inter_broker import InterBrokerSecurity

__all__ = ["AddPartitionsToTxnManager", "VERIFY_VERSION"]

log = logging.getLogger("strom.server")

VERIFY_VERSION = 4  # the first version with verify_only (and brokers-only: CLUSTER_ACTION)


class AddPartitionsToTxnManager:
    def __init__(self, node_id: int, metadata: MetadataCache, txn_coordinator: TransactionCoordinator,
                 listener: str | None, *, security: InterBrokerSecurity | None = None,
                 timeout_ms: int = 30_000) -> None:
        self.node_id = node_id
        self.metadata = metadata
        self.txn_coordinator = txn_coordinator
        self._channels = BrokerChannels(metadata, listener, f"txn-verify-{node_id}", timeout_s=timeout_ms / 1000,
                                        security=security)

    def coordinator_of(self, transactional_id: str) -> int | None:
        """The broker coordinating ``transactional_id`` (the leader of its ``__transaction_state`` partition)."""
        tc = self.txn_coordinator
        if tc.owned_partitions is None:  # a standalone broker coordinates every id
            return self.node_id
        st = self.metadata.partition_state(TopicPartition(TRANSACTION_STATE_TOPIC_NAME,
                                                          tc.partition_for(transactional_id)))
        return st.leader if st is not None and st.leader >= 0 else None

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """An error code per partition from the coordinator: NONE when the partition is in the producer's ongoing
        transaction, INVALID_TXN_STATE when it is not, PRODUCER_FENCED / INVALID_PRODUCER_ID_MAPPING, or why the
        coordinator could not say (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS,
        NETWORK_EXCEPTION: the caller answers the producer with a retriable error)."""
        tps = set(partitions)
        coordinator = self.coordinator_of(transactional_id)
        if coordinator is None:
            return dict.fromkeys(tps, E.COORDINATOR_NOT_AVAILABLE)
        if coordinator == self.node_id:
            return self.txn_coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, tps)
        ch = self._channels.get(coordinator)
        if ch is None:
            return dict.fromkeys(tps, E.COORDINATOR_NOT_AVAILABLE)
        topics: dict[str, list[int]] = {}
        for tp in sorted(tps):
            topics.setdefault(tp.topic, []).append(tp.partition)
        req = AddPartitionsToTxnRequest(transactions=[AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=True, topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                      for t, ps in topics.items()])])
        try:
            resp = await ch.request(ApiKey.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, req)
        except KafkaError as e:
            log.info("verifying the transaction of %s with broker %d failed: %s", transactional_id, coordinator, e)
            return dict.fromkeys(tps, E.NETWORK_EXCEPTION)
        if resp.error_code:
            return dict.fromkeys(tps, resp.error_code)
        out = dict.fromkeys(tps, E.UNKNOWN_SERVER_ERROR)
        for result in resp.results_by_transaction:
            for t in result.topic_results:
                for p in t.results_by_partition:
                    out[TopicPartition(t.name, p.partition_index)] = p.partition_error_code
        return out

    def close(self) -> None:
        self._channels.close()
