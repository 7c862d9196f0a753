"""Partition reassignment: move replicas between brokers (KIP-455).

Kafka counterparts: ``KafkaAdminClient.alterPartitionReassignments`` and ``listPartitionReassignments``: one
request to the controller named by the latest Metadata (NOT_CONTROLLER refreshes the metadata and retries). A
target of ``None`` cancels a partition's ongoing reassignment.

I/O: the calls run on the admin client's I/O thread; this module only builds and submits them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.admin._support import FutureMap
from strom.admin.calls import Call, ControllerNodeProvider
from strom.admin.results import KeyedResult
from strom.common.error_codes import ErrorCode, NotControllerError
from strom.common.errors import for_code
from strom.common.structs import TopicPartition
from strom.protocol.messages import AlterPartitionReassignmentsRequest, ListPartitionReassignmentsRequest

if TYPE_CHECKING:
    from strom.admin.runnable import AdminClientRunnable

__all__ = ["PartitionReassignment", "alter_partition_reassignments", "list_partition_reassignments"]


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """An ongoing reassignment (Kafka's ``PartitionReassignment``): all replicas now, and those being added and
    removed."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


def _not_controller(rt: AdminClientRunnable) -> NotControllerError:
    rt.metadata_manager.clear_controller()
    rt.metadata_manager.request_update()
    return NotControllerError("The controller moved; retrying")


def alter_partition_reassignments(rt: AdminClientRunnable, targets: Mapping[TopicPartition, Sequence[int] | None],
                                  timeout_ms: int | None) -> KeyedResult[TopicPartition, None]:
    wanted = dict(targets)
    futures: FutureMap[TopicPartition] = FutureMap(list(wanted))
    R = AlterPartitionReassignmentsRequest

    def request(timeout: int) -> Any:
        topics: dict[str, list[Any]] = {}
        for tp, replicas in sorted(wanted.items()):
            topics.setdefault(tp.topic, []).append(R.ReassignablePartition(
                partition_index=tp.partition, replicas=None if replicas is None else list(replicas)))
        return R(timeout_ms=timeout, topics=[R.ReassignableTopic(name=t, partitions=ps) for t, ps in topics.items()])

    def response(body: Any, _version: int) -> None:
        if body.error_code == ErrorCode.NOT_CONTROLLER:
            raise _not_controller(rt)
        if body.error_code:
            futures.fail_all(for_code(body.error_code, body.error_message))
            return
        for t in body.responses:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if p.error_code:
                    futures.fail(tp, for_code(p.error_code, p.error_message))
                else:
                    futures.complete(tp, None)

    rt.submit(Call("alterPartitionReassignments", rt.calc_deadline(timeout_ms), ControllerNodeProvider(), request,
                   response, futures.fail_all))
    return KeyedResult(futures.futures)


def list_partition_reassignments(rt: AdminClientRunnable, partitions: Sequence[TopicPartition] | None,
                                 timeout_ms: int | None) -> Future[dict[TopicPartition, PartitionReassignment]]:
    futures: FutureMap[str] = FutureMap(["all"])
    R = ListPartitionReassignmentsRequest

    def request(timeout: int) -> Any:
        if partitions is None:
            return R(timeout_ms=timeout, topics=None)
        topics: dict[str, list[int]] = {}
        for tp in sorted(set(partitions)):
            topics.setdefault(tp.topic, []).append(tp.partition)
        return R(timeout_ms=timeout, topics=[R.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps)
                                             for t, ps in topics.items()])

    def response(body: Any, _version: int) -> None:
        if body.error_code == ErrorCode.NOT_CONTROLLER:
            raise _not_controller(rt)
        if body.error_code:
            raise for_code(body.error_code, body.error_message)
        futures.complete("all", {
            TopicPartition(t.name, p.partition_index): PartitionReassignment(
                tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas))
            for t in body.topics for p in t.partitions})

    rt.submit(Call("listPartitionReassignments", rt.calc_deadline(timeout_ms), ControllerNodeProvider(), request,
                   response, futures.fail_all))
    return futures.futures["all"]
