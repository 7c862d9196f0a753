"""Transaction administration: list and describe transactions, describe a partition's producers, abort a hanging
transaction.

Kafka counterparts: ``KafkaAdminClient.listTransactions`` (Metadata for every broker, then ListTransactions to
each: every broker answers for the ids it coordinates), ``describeTransactions`` (FindCoordinator key type 1,
then DescribeTransactions to the coordinator), ``describeProducers`` (DescribeProducers to each partition's
leader) and ``abortTransaction`` (a WriteTxnMarkers ABORT to the partition's leader, for a transaction whose
coordinator no longer knows it: a "hanging" one).

I/O: calls run on the admin client's I/O thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.admin._support import FutureMap
from strom.admin.calls import (
    COORDINATOR_ERRORS,
    Call,
    ConstantNodeProvider,
    CoordinatorProvider,
    LeastLoadedNodeProvider,
)
from strom.admin.records import _by_topic, _leader_lookup
from strom.admin.results import KeyedResult
from strom.common.error_codes import ErrorCode
from strom.common.errors import KafkaError, for_code
from strom.common.structs import Node, TopicPartition
from strom.protocol.messages import (
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    ListTransactionsRequest,
    MetadataRequest,
    WriteTxnMarkersRequest,
)

if TYPE_CHECKING:
    from strom.admin.runnable import AdminClientRunnable

__all__ = ["TransactionListing", "TransactionDescription", "ProducerState", "AbortTransactionSpec",
           "list_transactions", "describe_transactions", "describe_producers", "abort_transaction"]


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str  # Kafka's names: Ongoing, PrepareCommit, CompleteAbort, ...
    coordinator_id: int = -1  # the broker that listed it


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int  # -1 when no transaction is open
    topic_partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_transaction_start_offset: int  # -1 when the producer has no open transaction here


@dataclass(frozen=True, slots=True)
class AbortTransactionSpec:
    topic_partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int = 0


def list_transactions(rt: AdminClientRunnable, states: Iterable[str], producer_ids: Iterable[int],
                      duration_ms: int, timeout_ms: int | None) -> Future[list[TransactionListing]]:
    result: Future[list[TransactionListing]] = Future()
    deadline = rt.calc_deadline(timeout_ms)
    state_filter, pid_filter = list(states), list(producer_ids)
    lock = threading.Lock()
    listings: dict[str, TransactionListing] = {}
    failures: list[BaseException] = []
    remaining = [0]

    def finish_one() -> None:
        with lock:
            remaining[0] -= 1
            if remaining[0] > 0:
                return
        if failures:
            result.set_exception(failures[0])
        else:
            result.set_result(sorted(listings.values(), key=lambda t: t.transactional_id))

    def list_on(node: Node) -> Call:
        def request(_timeout: int) -> Any:
            return ListTransactionsRequest(state_filters=state_filter, producer_id_filters=pid_filter,
                                           duration_filter=duration_ms)

        def response(body: Any, _version: int) -> None:
            if body.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                raise for_code(body.error_code)
            if body.error_code:
                failures.append(for_code(body.error_code))
            elif body.unknown_state_filters:
                failures.append(KafkaError(f"Unknown transaction state(s): {', '.join(body.unknown_state_filters)}"))
            else:
                for s in body.transaction_states:
                    listings[s.transactional_id] = TransactionListing(s.transactional_id, s.producer_id,
                                                                      s.transaction_state, node.node_id)
            finish_one()

        def failure(e: BaseException) -> None:
            failures.append(e)
            finish_one()

        return Call("listTransactions", deadline, ConstantNodeProvider(node), request, response, failure,
                    min_version=1 if duration_ms >= 0 else None)

    def brokers_response(body: Any, _version: int) -> None:
        nodes = [Node(b.node_id, b.host, b.port, b.rack) for b in body.brokers]
        if not nodes:
            raise KafkaError("No brokers in the metadata response")
        remaining[0] = len(nodes)
        for node in nodes:
            rt.enqueue_internal(list_on(node), 0)

    rt.submit(Call("findAllBrokers", deadline, LeastLoadedNodeProvider(),
                   lambda _t: MetadataRequest(topics=[], allow_auto_topic_creation=False), brokers_response,
                   result.set_exception, min_version=1))
    return result


def describe_transactions(rt: AdminClientRunnable, transactional_ids: Iterable[str],
                          timeout_ms: int | None) -> KeyedResult[str, TransactionDescription]:
    futures: FutureMap[str] = FutureMap(transactional_ids)
    deadline = rt.calc_deadline(timeout_ms)
    for tid in futures.undone():
        provider = CoordinatorProvider(tid, key_type=1)

        def response(body: Any, _version: int, tid: str = tid, provider: CoordinatorProvider = provider) -> None:
            s = next((s for s in body.transaction_states if s.transactional_id == tid), None)
            if s is None:
                futures.fail(tid, KafkaError(f"DescribeTransactions response does not describe '{tid}'"))
                return
            if s.error_code in COORDINATOR_ERRORS:
                provider.invalidate()
                raise for_code(s.error_code)
            if s.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                raise for_code(s.error_code)
            if s.error_code:
                futures.fail(tid, for_code(s.error_code, f"Transactional id '{tid}': "
                                           f"{for_code(s.error_code).description}"))
                return
            node = provider.node
            futures.complete(tid, TransactionDescription(
                node.node_id if node is not None else -1, s.transaction_state, s.producer_id, s.producer_epoch,
                s.transaction_timeout_ms, s.transaction_start_time_ms,
                frozenset(TopicPartition(t.topic, p) for t in s.topics for p in t.partitions)))

        rt.submit(Call("describeTransactions", deadline, provider,
                       lambda _t, tid=tid: DescribeTransactionsRequest(transactional_ids=[tid]), response,
                       lambda e, tid=tid: futures.fail(tid, e)))
    return KeyedResult(futures.futures)


def _per_leader(rt: AdminClientRunnable, name: str, partitions: Iterable[TopicPartition], timeout_ms: int | None,
                make_request: Callable[[list[TopicPartition]], Any],
                handle: Callable[[Any, FutureMap[TopicPartition], list[TopicPartition]], None],
                ) -> KeyedResult[TopicPartition, Any]:
    wanted = list(dict.fromkeys(partitions))
    futures: FutureMap[TopicPartition] = FutureMap(wanted)
    if not wanted:
        return KeyedResult({})
    deadline = rt.calc_deadline(timeout_ms)

    def make_call(leader: Node, tps: list[TopicPartition], retry: Callable[[list[TopicPartition]], None]) -> Call:
        def response(body: Any, _version: int) -> None:
            again: list[TopicPartition] = []
            handle(body, futures, again)
            retry(again)

        def failure(e: BaseException) -> None:
            for tp in tps:
                futures.fail(tp, e)

        return Call(name, deadline, ConstantNodeProvider(leader), lambda _t: make_request(tps), response, failure)

    rt.submit(_leader_lookup(rt, name, deadline, futures, make_call, wanted))
    return KeyedResult(futures.futures)


def _partition_error(futures: FutureMap[TopicPartition], again: list[TopicPartition], tp: TopicPartition,
                     code: int, message: str | None = None) -> bool:
    if not code:
        return False
    error = for_code(code, message)
    if error.invalid_metadata and error.retriable and code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        again.append(tp)
    else:
        futures.fail(tp, error)
    return True


def describe_producers(rt: AdminClientRunnable, partitions: Iterable[TopicPartition],
                       timeout_ms: int | None) -> KeyedResult[TopicPartition, list[ProducerState]]:
    R = DescribeProducersRequest

    def make_request(tps: list[TopicPartition]) -> Any:
        return R(topics=[R.TopicRequest(name=t, partition_indexes=ps) for t, ps in _by_topic(tps).items()])

    def handle(body: Any, futures: FutureMap[TopicPartition], again: list[TopicPartition]) -> None:
        for t in body.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if not _partition_error(futures, again, tp, p.error_code, p.error_message):
                    futures.complete(tp, [ProducerState(s.producer_id, s.producer_epoch, s.last_sequence,
                                                        s.last_timestamp, s.coordinator_epoch,
                                                        s.current_txn_start_offset) for s in p.active_producers])

    return _per_leader(rt, "describeProducers", partitions, timeout_ms, make_request, handle)


def abort_transaction(rt: AdminClientRunnable, spec: AbortTransactionSpec,
                      timeout_ms: int | None) -> KeyedResult[TopicPartition, None]:
    R = WriteTxnMarkersRequest

    def make_request(tps: list[TopicPartition]) -> Any:
        return R(markers=[R.WritableTxnMarker(
            producer_id=spec.producer_id, producer_epoch=spec.producer_epoch, transaction_result=False,
            coordinator_epoch=spec.coordinator_epoch,
            topics=[R.WritableTxnMarkerTopic(name=t, partition_indexes=ps) for t, ps in _by_topic(tps).items()])])

    def handle(body: Any, futures: FutureMap[TopicPartition], again: list[TopicPartition]) -> None:
        for m in body.markers:
            for t in m.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if not _partition_error(futures, again, tp, p.error_code):
                        futures.complete(tp, None)

    return _per_leader(rt, "abortTransaction", [spec.topic_partition], timeout_ms, make_request, handle)
