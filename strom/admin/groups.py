"""Consumer group administration: list, describe, delete groups; list and alter their committed offsets.

Kafka counterparts: ``KafkaAdminClient.listConsumerGroups`` (a Metadata call for every broker, then ListGroups
to each), ``describeConsumerGroups`` / ``deleteConsumerGroups`` / ``listConsumerGroupOffsets`` /
``alterConsumerGroupOffsets`` (``DescribeConsumerGroupsHandler`` etc.: FindCoordinator, then the request to the
group coordinator; NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE look the coordinator up again,
COORDINATOR_LOAD_IN_PROGRESS retries). Member assignments are decoded from the consumer protocol's bytes.

I/O: calls run on the admin client's I/O thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from strom.admin._support import FutureMap
from strom.admin.calls import (
    COORDINATOR_ERRORS,
    Call,
    ConstantNodeProvider,
    CoordinatorProvider,
    LeastLoadedNodeProvider,
)
from strom.admin.models import (
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ConsumerGroupState,
    MemberAssignment,
    MemberDescription,
)
from strom.admin.results import KeyedResult, ListConsumerGroupOffsetsResult, ListConsumerGroupsResult
from strom.common.error_codes import ErrorCode
from strom.common.errors import KafkaError, for_code
from strom.common.structs import Node, OffsetAndMetadata, TopicPartition
from strom.protocol.messages import (
    ConsumerProtocolAssignment,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
)

if TYPE_CHECKING:
    from strom.admin.runnable import AdminClientRunnable

__all__ = ["list_consumer_groups", "describe_consumer_groups", "delete_consumer_groups",
           "list_consumer_group_offsets", "alter_consumer_group_offsets", "decode_assignment"]

CONSUMER_PROTOCOL_TYPE = "consumer"
_RETRIABLE_GROUP = COORDINATOR_ERRORS | {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}


def _check_group_error(provider: CoordinatorProvider, code: int, message: str | None = None) -> None:
    """Raise a retriable error after invalidating the coordinator when it moved; else return."""
    if code in COORDINATOR_ERRORS:
        provider.invalidate()
    if code in _RETRIABLE_GROUP:
        raise for_code(code, message)


def decode_assignment(data: bytes | memoryview | None) -> frozenset[TopicPartition]:
    """The partitions of a consumer-protocol assignment (empty for no / undecodable bytes)."""
    if not data:
        return frozenset()
    try:
        _v, msg = ConsumerProtocolAssignment.decode_versioned(data)
    except KafkaError:
        return frozenset()
    return frozenset(TopicPartition(t.topic, p) for t in msg.assigned_partitions for p in t.partitions)


# --------------------------------------------------------------------------------------------- listing

def list_consumer_groups(rt: AdminClientRunnable, states: Iterable[ConsumerGroupState] | None,
                         timeout_ms: int | None) -> ListConsumerGroupsResult:
    valid: Future[list[ConsumerGroupListing]] = Future()
    errors: Future[list[BaseException]] = Future()
    deadline = rt.calc_deadline(timeout_ms)
    state_filter = [s.value for s in states or ()]
    lock = threading.Lock()
    listings: dict[str, ConsumerGroupListing] = {}
    failures: list[BaseException] = []
    remaining = [0]

    def finish_one() -> None:
        with lock:
            remaining[0] -= 1
            if remaining[0] > 0:
                return
        # errors first: all() reads them when valid completes
        errors.set_result(list(failures))
        valid.set_result(sorted(listings.values(), key=lambda g: g.group_id))

    def list_on(node: Node) -> Call:
        def request(_timeout: int) -> Any:
            return ListGroupsRequest(states_filter=state_filter, types_filter=[])

        def response(body: Any, version: int) -> None:
            if body.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                raise for_code(body.error_code)
            if body.error_code:
                failures.append(for_code(body.error_code))
            else:
                for g in body.groups:
                    if g.protocol_type in (CONSUMER_PROTOCOL_TYPE, ""):
                        state = ConsumerGroupState.parse(g.group_state) if version >= 4 else None
                        if state_filter and state is not None and state.value not in state_filter:
                            continue
                        listings[g.group_id] = ConsumerGroupListing(
                            g.group_id, g.protocol_type == "", state,
                            g.group_type if version >= 5 and g.group_type else None)
            finish_one()

        def failure(e: BaseException) -> None:
            failures.append(e)
            finish_one()

        return Call("listConsumerGroups", deadline, ConstantNodeProvider(node), request, response, failure,
                    min_version=4 if state_filter else None)

    def brokers_request(_timeout: int) -> Any:
        return MetadataRequest(topics=[], allow_auto_topic_creation=True)

    def brokers_response(body: Any, _version: int) -> None:
        nodes = [Node(b.node_id, b.host, b.port, b.rack) for b in body.brokers]
        if not nodes:
            raise KafkaError("No brokers in the metadata response")
        remaining[0] = len(nodes)
        for node in nodes:
            rt.enqueue_internal(list_on(node), 0)

    def brokers_failure(e: BaseException) -> None:
        errors.set_result([e])
        valid.set_exception(e)

    rt.submit(Call("findAllBrokers", deadline, LeastLoadedNodeProvider(), brokers_request, brokers_response,
                   brokers_failure, min_version=1))
    return ListConsumerGroupsResult(valid, errors)


# ------------------------------------------------------------------------------------------ per group

def _per_group(rt: AdminClientRunnable, name: str, group_ids: Iterable[str], timeout_ms: int | None,
               build: Any, handle: Any, min_version: int | None = None) -> FutureMap[str]:
    """One coordinator-bound call per group: ``build(group)`` the request, ``handle(group, provider, body,
    version, futures)`` the response."""
    futures: FutureMap[str] = FutureMap(group_ids)
    deadline = rt.calc_deadline(timeout_ms)
    for group in futures.undone():
        if not isinstance(group, str) or not group:
            from strom.common.error_codes import InvalidGroupIdError

            futures.fail(group, InvalidGroupIdError(f"The given group id '{group}' cannot be represented in a "
                                                    "request."))
            continue
        provider = CoordinatorProvider(group)

        def response(body: Any, version: int, group: str = group, provider: CoordinatorProvider = provider) -> None:
            handle(group, provider, body, version, futures)

        rt.submit(Call(name, deadline, provider, lambda _t, g=group: build(g), response,
                       lambda e, g=group: futures.fail(g, e), min_version=min_version))
    return futures


def describe_consumer_groups(rt: AdminClientRunnable, group_ids: Iterable[str], include_authorized_operations: bool,
                             timeout_ms: int | None) -> KeyedResult[str, ConsumerGroupDescription]:
    def build(group: str) -> Any:
        return DescribeGroupsRequest(groups=[group], include_authorized_operations=include_authorized_operations)

    def handle(group: str, provider: CoordinatorProvider, body: Any, version: int, futures: FutureMap[str]) -> None:
        g = next((g for g in body.groups if g.group_id == group), None)
        if g is None:
            futures.fail_missing([], "group", [group])
            return
        _check_group_error(provider, g.error_code)
        if g.error_code:
            futures.fail(group, for_code(g.error_code))
            return
        if g.protocol_type not in (CONSUMER_PROTOCOL_TYPE, ""):
            futures.fail(group, ValueError(f"GroupId {group} is not a consumer group ({g.protocol_type})."))
            return
        members = tuple(
            MemberDescription(m.member_id, m.group_instance_id if version >= 4 else None, m.client_id,
                              m.client_host, MemberAssignment(
                                  decode_assignment(m.member_assignment)
                                  if g.protocol_type == CONSUMER_PROTOCOL_TYPE else frozenset()))
            for m in g.members)
        ops = None
        if include_authorized_operations and version >= 3 and g.authorized_operations != -(2**31):
            ops = frozenset(i for i in range(32) if g.authorized_operations & (1 << i))
        futures.complete(group, ConsumerGroupDescription(
            group, g.protocol_type == "", members, g.protocol_data, ConsumerGroupState.parse(g.group_state),
            provider.node, ops))

    return KeyedResult(_per_group(rt, "describeConsumerGroups", group_ids, timeout_ms, build, handle).futures)


def delete_consumer_groups(rt: AdminClientRunnable, group_ids: Iterable[str], timeout_ms: int | None,
                           ) -> KeyedResult[str, None]:
    def build(group: str) -> Any:
        return DeleteGroupsRequest(groups_names=[group])

    def handle(group: str, provider: CoordinatorProvider, body: Any, _version: int, futures: FutureMap[str]) -> None:
        r = next((r for r in body.results if r.group_id == group), None)
        if r is None:
            futures.fail_missing([], "group", [group])
            return
        _check_group_error(provider, r.error_code)
        if r.error_code:
            futures.fail(group, for_code(r.error_code))
        else:
            futures.complete(group, None)

    return KeyedResult(_per_group(rt, "deleteConsumerGroups", group_ids, timeout_ms, build, handle).futures)


# -------------------------------------------------------------------------------------------- offsets

def list_consumer_group_offsets(rt: AdminClientRunnable, specs: Mapping[str, Iterable[TopicPartition] | None],
                                require_stable: bool, timeout_ms: int | None) -> ListConsumerGroupOffsetsResult:
    """Committed offsets per group (value ``None`` for a requested partition without a committed offset)."""
    wanted = {g: (None if tps is None else sorted(set(tps))) for g, tps in specs.items()}

    def topics_of(group: str) -> dict[str, list[int]] | None:
        tps = wanted[group]
        if tps is None:
            return None
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return by_topic

    def build(group: str) -> Any:
        by_topic = topics_of(group)
        R = OffsetFetchRequest
        old = None if by_topic is None else [R.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                                             for t, ps in by_topic.items()]
        new = None if by_topic is None else [R.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                                             for t, ps in by_topic.items()]
        return R(group_id=group, topics=old, require_stable=require_stable,
                 groups=[R.OffsetFetchRequestGroup(group_id=group, topics=new)])

    def handle(group: str, provider: CoordinatorProvider, body: Any, version: int, futures: FutureMap[str]) -> None:
        if version >= 8:
            g = next((g for g in body.groups if g.group_id == group), None)
            if g is None:
                futures.fail_missing([], "group", [group])
                return
            code, topics = g.error_code, g.topics
        else:
            code, topics = (body.error_code if version >= 2 else 0), body.topics
        _check_group_error(provider, code)
        if code:
            futures.fail(group, for_code(code))
            return
        offsets: dict[TopicPartition, OffsetAndMetadata | None] = {}
        for t in topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if p.error_code in _RETRIABLE_GROUP:
                    _check_group_error(provider, p.error_code)
                if p.error_code:
                    continue  # Kafka logs "Skipping return offset for tp due to error"
                epoch = p.committed_leader_epoch if version >= 5 and p.committed_leader_epoch >= 0 else None
                offsets[tp] = (OffsetAndMetadata(p.committed_offset, p.metadata or "", epoch)
                               if p.committed_offset >= 0 else None)
        futures.complete(group, dict(sorted(offsets.items())))

    min_version = 2 if any(v is None for v in wanted.values()) else None
    futures = _per_group(rt, "listConsumerGroupOffsets", wanted, timeout_ms, build, handle, min_version)
    return ListConsumerGroupOffsetsResult(futures.futures)


def alter_consumer_group_offsets(rt: AdminClientRunnable, group_id: str,
                                 offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
                                 timeout_ms: int | None) -> KeyedResult[TopicPartition, None]:
    """Commit ``offsets`` for an inactive group (generation -1, no member id: a "simple" commit)."""
    values = {tp: (o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o))) for tp, o in offsets.items()}
    partition_futures: FutureMap[TopicPartition] = FutureMap(values)
    R = OffsetCommitRequest

    def build(group: str) -> Any:
        by_topic: dict[str, list[Any]] = {}
        for tp in partition_futures.undone():
            o = values[tp]
            by_topic.setdefault(tp.topic, []).append(R.OffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=o.offset,
                committed_leader_epoch=-1 if o.leader_epoch is None else o.leader_epoch,
                committed_metadata=o.metadata))
        return R(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                 topics=[R.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()])

    def handle(group: str, provider: CoordinatorProvider, body: Any, _version: int, futures: FutureMap[str]) -> None:
        retry = _partition_results(body.topics, partition_futures, _RETRIABLE_GROUP)
        if retry is not None:
            _check_group_error(provider, retry)
        futures.complete(group, None)

    return _one_group_by_partition(rt, "alterConsumerGroupOffsets", group_id, partition_futures, timeout_ms, build,
                                   handle)


def _partition_results(topics: Any, partition_futures: FutureMap[TopicPartition],
                       retriable: Iterable[int] = ()) -> int | None:
    """Complete or fail each partition of a response's ``topics`` (and fail those it left out); a partition with a
    ``retriable`` error stays undone and its code is returned (the call is then retried)."""
    retriable = set(retriable)
    seen = []
    retry = None
    for t in topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            seen.append(tp)
            if p.error_code in retriable:
                retry = p.error_code
            elif p.error_code:
                partition_futures.fail(tp, for_code(p.error_code))
            else:
                partition_futures.complete(tp, None)
    if retry is None:
        partition_futures.fail_missing(seen, "partition")
    return retry


def _one_group_by_partition(rt: AdminClientRunnable, name: str, group_id: str,
                            partition_futures: FutureMap[TopicPartition], timeout_ms: int | None, build: Any,
                            handle: Any) -> KeyedResult[TopicPartition, None]:
    """A call for one group whose results are per partition: a failure of the call fails every partition."""
    if not partition_futures.futures:
        return KeyedResult({})
    group_future = _per_group(rt, name, [group_id], timeout_ms, build, handle)
    group_future.futures[group_id].add_done_callback(
        lambda f: partition_futures.fail_all(f.exception()) if f.exception() is not None else None)
    return KeyedResult(partition_futures.futures)


def delete_consumer_group_offsets(rt: AdminClientRunnable, group_id: str, partitions: Iterable[TopicPartition],
                                  timeout_ms: int | None) -> KeyedResult[TopicPartition, None]:
    """OffsetDelete (KIP-496): drop the committed offsets of ``partitions``. The broker refuses a group with
    members subscribed to the topic (GROUP_SUBSCRIBED_TO_TOPIC for its partitions) and answers a group-level error
    (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP for a non-consumer group with members, ...) for every partition."""
    wanted = list(dict.fromkeys(partitions))
    partition_futures: FutureMap[TopicPartition] = FutureMap(wanted)
    R = OffsetDeleteRequest

    def build(group: str) -> Any:
        by_topic: dict[str, list[Any]] = {}
        for tp in partition_futures.undone():
            by_topic.setdefault(tp.topic, []).append(R.OffsetDeleteRequestPartition(partition_index=tp.partition))
        return R(group_id=group, topics=[R.OffsetDeleteRequestTopic(name=t, partitions=ps)
                                         for t, ps in by_topic.items()])

    def handle(group: str, provider: CoordinatorProvider, body: Any, _version: int, futures: FutureMap[str]) -> None:
        _check_group_error(provider, body.error_code)
        if body.error_code:
            error = for_code(body.error_code)
            partition_futures.fail_all(error)
            futures.fail(group, error)
            return
        _partition_results(body.topics, partition_futures)
        futures.complete(group, None)

    return _one_group_by_partition(rt, "deleteConsumerGroupOffsets", group_id, partition_futures, timeout_ms, build,
                                   handle)
