"""Topic administration: create, delete, list, describe topics and add partitions.

Kafka counterparts: ``KafkaAdminClient.createTopics`` / ``deleteTopics`` / ``listTopics`` / ``describeTopics`` /
``createPartitions``. Create, delete and create-partitions go to the controller (NOT_CONTROLLER refreshes the
metadata and retries the topics concerned); list and describe are Metadata requests to the least loaded broker.
Per-topic broker errors fail that topic's future with the broker's error class and message, except
THROTTLING_QUOTA_EXCEEDED (the principal's ``controller_mutation_rate``, KIP-599): with
``retry_on_quota_violation`` (the default, as Kafka's options) those topics are sent again once the response's
throttle time has passed, unless that is past the call's deadline.

I/O: the calls run on the admin client's I/O thread; these functions only build and submit them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from strom.admin._support import FutureMap
from strom.admin.calls import Call, ControllerNodeProvider, LeastLoadedNodeProvider
from strom.admin.models import (
    ConfigEntry,
    ConfigSource,
    CreatedTopic,
    NewPartitions,
    NewTopic,
    TopicDescription,
    TopicListing,
    TopicPartitionInfo,
)
from strom.admin.results import KeyedResult, ListTopicsResult
from strom.common.error_codes import (
    ErrorCode,
    InvalidTopicExceptionError,
    NotControllerError,
    ThrottlingQuotaExceededError,
    UnknownTopicOrPartitionError,
)
from strom.common.errors import KafkaError, for_code
from strom.common.structs import Node
from strom.protocol.messages import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    MetadataRequest,
)
from strom.protocol.primitives import ZERO_UUID

if TYPE_CHECKING:
    from strom.admin.runnable import AdminClientRunnable

__all__ = ["create_topics", "delete_topics", "list_topics", "describe_topics", "create_partitions",
           "topic_partition_infos"]

_RETRY_ON = {ErrorCode.NOT_CONTROLLER}


def _invalid_name(name: Any) -> bool:
    return not isinstance(name, str) or not name


def _controller_retry(rt: AdminClientRunnable, retry: list[str]) -> None:
    if retry:
        rt.metadata_manager.clear_controller()
        rt.metadata_manager.request_update()
        raise NotControllerError(f"The controller moved; retrying {', '.join(retry)}")


class _ThrottledRetry(KafkaError):
    """Send the call again after ``retry_after_ms`` (the broker's throttle time), not after the usual backoff."""

    retriable = True

    def __init__(self, message: str, retry_after_ms: int) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms


def _quota_retry(rt: AdminClientRunnable, futures: FutureMap, throttled: list[str], throttle_ms: int,
                 deadline_ms: int, retry_on_quota_violation: bool) -> None:
    """Topics refused with THROTTLING_QUOTA_EXCEEDED: retried after the throttle time when allowed and in time
    (Kafka's ``retryOnQuotaViolation``), else failed with the error, which carries ``throttle_time_ms``."""
    if not throttled:
        return
    if retry_on_quota_violation and rt.time.hi_res_milliseconds() + throttle_ms < deadline_ms:
        raise _ThrottledRetry(f"The throttling quota has been exceeded; retrying {', '.join(throttled)} in "
                              f"{throttle_ms} ms", throttle_ms)
    for name in throttled:
        error = ThrottlingQuotaExceededError(f"The throttling quota has been exceeded (throttle time {throttle_ms} "
                                             "ms).")
        error.throttle_time_ms = throttle_ms  # type: ignore[attr-defined]
        futures.fail(name, error)


def create_topics(rt: AdminClientRunnable, new_topics: Iterable[NewTopic], validate_only: bool,
                  timeout_ms: int | None, retry_on_quota_violation: bool = True) -> KeyedResult[str, CreatedTopic]:
    topics = {t.name: t for t in new_topics}
    futures = FutureMap(topics)
    for name in list(topics):
        if _invalid_name(name):
            futures.fail(name, InvalidTopicExceptionError(f"The given topic name '{name}' cannot be represented "
                                                          "in a request."))
    deadline = rt.calc_deadline(timeout_ms)
    T = CreateTopicsRequest

    def request(timeout: int) -> Any:
        wanted = []
        for name in futures.undone():
            t = topics[name]
            assignments = [T.CreatableReplicaAssignment(partition_index=p, broker_ids=list(ids))
                           for p, ids in sorted((t.replicas_assignments or {}).items())]
            wanted.append(T.CreatableTopic(
                name=name, num_partitions=-1 if t.num_partitions is None or assignments else t.num_partitions,
                replication_factor=-1 if t.replication_factor is None or assignments else t.replication_factor,
                assignments=assignments,
                configs=[T.CreatableTopicConfig(name=k, value=v) for k, v in t.configs.items()]))
        return T(topics=wanted, timeout_ms=timeout, validate_only=validate_only)

    def response(body: Any, version: int) -> None:
        retry, throttled = [], []
        for r in body.topics:
            if r.error_code in _RETRY_ON:
                retry.append(r.name)
            elif r.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED:
                throttled.append(r.name)
            elif r.error_code:
                futures.fail(r.name, for_code(r.error_code, r.error_message))
            else:
                configs = tuple(ConfigEntry(c.name, c.value, ConfigSource.of(c.config_source), c.is_sensitive,
                                            c.read_only) for c in (r.configs or ()))
                futures.complete(r.name, CreatedTopic(
                    r.name, r.topic_id if version >= 7 and r.topic_id != ZERO_UUID else None,
                    r.num_partitions if version >= 5 else -1, r.replication_factor if version >= 5 else -1,
                    configs))
        _controller_retry(rt, retry)
        _quota_retry(rt, futures, throttled, body.throttle_time_ms, deadline, retry_on_quota_violation)
        futures.fail_missing([r.name for r in body.topics], "topic")

    rt.submit(Call("createTopics", deadline, ControllerNodeProvider(), request, response, futures.fail_all))
    return KeyedResult(futures.futures)


def delete_topics(rt: AdminClientRunnable, topics: Iterable[str], timeout_ms: int | None,
                  retry_on_quota_violation: bool = True) -> KeyedResult[str, None]:
    futures = FutureMap(topics)
    for name in list(futures.futures):
        if _invalid_name(name):
            futures.fail(name, InvalidTopicExceptionError(f"The given topic name '{name}' cannot be represented "
                                                          "in a request."))
    D = DeleteTopicsRequest
    deadline = rt.calc_deadline(timeout_ms)

    def request(timeout: int) -> Any:
        names = futures.undone()
        return D(topics=[D.DeleteTopicState(name=n) for n in names], topic_names=names, timeout_ms=timeout)

    def response(body: Any, version: int) -> None:
        retry, throttled = [], []
        for r in body.responses:
            if r.error_code in _RETRY_ON:
                retry.append(r.name)
            elif r.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED:
                throttled.append(r.name)
            elif r.error_code:
                futures.fail(r.name, for_code(r.error_code, r.error_message if version >= 5 else None))
            else:
                futures.complete(r.name, None)
        _controller_retry(rt, retry)
        _quota_retry(rt, futures, throttled, body.throttle_time_ms, deadline, retry_on_quota_violation)
        futures.fail_missing([r.name for r in body.responses], "topic")

    rt.submit(Call("deleteTopics", deadline, ControllerNodeProvider(), request, response, futures.fail_all))
    return KeyedResult(futures.futures)


def _listing(t: Any) -> TopicListing:
    topic_id = getattr(t, "topic_id", None)
    return TopicListing(t.name, topic_id if topic_id not in (None, ZERO_UUID) else None, bool(t.is_internal))


def list_topics(rt: AdminClientRunnable, list_internal: bool, timeout_ms: int | None) -> ListTopicsResult:
    futures = FutureMap(["all"])

    def request(_timeout: int) -> Any:
        return MetadataRequest(topics=None, allow_auto_topic_creation=False)

    def response(body: Any, _version: int) -> None:
        listings = {}
        for t in body.topics:
            if t.error_code == 0 and (list_internal or not t.is_internal):
                listings[t.name] = _listing(t)
        futures.complete("all", dict(sorted(listings.items())))

    rt.submit(Call("listTopics", rt.calc_deadline(timeout_ms), LeastLoadedNodeProvider(), request, response,
                   futures.fail_all, min_version=1))
    return ListTopicsResult(futures.futures["all"])


def topic_partition_infos(body: Any, t: Any) -> tuple[TopicPartitionInfo, ...]:
    """The partitions of metadata topic ``t`` (Kafka's ``TopicPartitionInfo``; unknown brokers as
    ``Node(id, "", -1)`` like Kafka)."""
    nodes = {b.node_id: Node(b.node_id, b.host, b.port, b.rack) for b in body.brokers}

    def node(node_id: int) -> Node:
        return nodes.get(node_id) or Node(node_id, "", -1)

    return tuple(
        TopicPartitionInfo(p.partition_index, node(p.leader_id) if p.leader_id >= 0 else None,
                           tuple(node(i) for i in p.replica_nodes), tuple(node(i) for i in p.isr_nodes))
        for p in sorted(t.partitions, key=lambda p: p.partition_index))


def describe_topics(rt: AdminClientRunnable, topics: Iterable[str], include_authorized_operations: bool,
                    timeout_ms: int | None) -> KeyedResult[str, TopicDescription]:
    futures = FutureMap(topics)
    for name in list(futures.futures):
        if _invalid_name(name):
            futures.fail(name, InvalidTopicExceptionError(f"The given topic name '{name}' cannot be represented "
                                                          "in a request."))
    if not futures.undone():
        return KeyedResult(futures.futures)

    def request(_timeout: int) -> Any:
        return MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in futures.undone()],
                               allow_auto_topic_creation=False,
                               include_topic_authorized_operations=include_authorized_operations)

    def response(body: Any, version: int) -> None:
        by_name = {t.name: t for t in body.topics}
        for name in futures.undone():
            t = by_name.get(name)
            if t is None:
                futures.fail(name, UnknownTopicOrPartitionError(f"Topic {name} not found."))
            elif t.error_code:
                futures.fail(name, for_code(t.error_code))
            else:
                ops = None
                if include_authorized_operations and version >= 8 and t.topic_authorized_operations != -(2**31):
                    ops = frozenset(i for i in range(32) if t.topic_authorized_operations & (1 << i))
                listing = _listing(t)
                futures.complete(name, TopicDescription(name, listing.is_internal, topic_partition_infos(body, t),
                                                        listing.topic_id, ops))

    rt.submit(Call("describeTopics", rt.calc_deadline(timeout_ms), LeastLoadedNodeProvider(), request, response,
                   futures.fail_all, min_version=1))
    return KeyedResult(futures.futures)


def create_partitions(rt: AdminClientRunnable, new_partitions: Mapping[str, NewPartitions], validate_only: bool,
                      timeout_ms: int | None, retry_on_quota_violation: bool = True) -> KeyedResult[str, None]:
    wanted = dict(new_partitions)
    futures = FutureMap(wanted)
    C = CreatePartitionsRequest

    def request(timeout: int) -> Any:
        out = []
        for name in futures.undone():
            np = wanted[name]
            assignments = None if np.new_assignments is None else [
                C.CreatePartitionsAssignment(broker_ids=list(ids)) for ids in np.new_assignments]
            out.append(C.CreatePartitionsTopic(name=name, count=np.total_count, assignments=assignments))
        return C(topics=out, timeout_ms=timeout, validate_only=validate_only)

    deadline = rt.calc_deadline(timeout_ms)

    def response(body: Any, _version: int) -> None:
        retry, throttled = [], []
        for r in body.results:
            if r.error_code in _RETRY_ON:
                retry.append(r.name)
            elif r.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED:
                throttled.append(r.name)
            elif r.error_code:
                futures.fail(r.name, for_code(r.error_code, r.error_message))
            else:
                futures.complete(r.name, None)
        _controller_retry(rt, retry)
        _quota_retry(rt, futures, throttled, body.throttle_time_ms, deadline, retry_on_quota_violation)
        futures.fail_missing([r.name for r in body.results], "topic")

    if not wanted:
        return KeyedResult({})
    rt.submit(Call("createPartitions", deadline, ControllerNodeProvider(), request, response, futures.fail_all))
    return KeyedResult(futures.futures)
