"""Partition-leader operations: list offsets (earliest / latest / by timestamp) and delete records.

Kafka counterparts: ``KafkaAdminClient.listOffsets`` and ``deleteRecords`` (``PartitionLeaderStrategy``): a
Metadata call for the topics finds each partition's leader, then one request per leader. Partitions of unknown
topics fail with UNKNOWN_TOPIC_OR_PARTITION; a partition without a leader, or answered with NOT_LEADER /
LEADER_NOT_AVAILABLE style errors (``invalid_metadata``), is looked up again after the retry backoff while the
deadline allows.

I/O: calls run on the admin client's I/O thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from strom.admin._support import FutureMap
from strom.admin.calls import Call, ConstantNodeProvider, LeastLoadedNodeProvider
from strom.admin.models import DeletedRecords, ListOffsetsResultInfo, OffsetSpec, RecordsToDelete
from strom.admin.results import KeyedResult
from strom.common.error_codes import LeaderNotAvailableError, UnknownTopicOrPartitionError
from strom.common.errors import for_code
from strom.common.structs import Node, TopicPartition
from strom.protocol.messages import DeleteRecordsRequest, ListOffsetsRequest, MetadataRequest

if TYPE_CHECKING:
    from strom.admin.runnable import AdminClientRunnable

__all__ = ["list_offsets", "delete_records"]

# (leader, partitions) -> the per-leader call
LeaderCallFactory = Callable[[Node, list[TopicPartition], Callable[[list[TopicPartition]], None]], Call]


def _by_topic(tps: list[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in sorted(tps):
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


def _leader_lookup(rt: AdminClientRunnable, name: str, deadline: int, futures: FutureMap[TopicPartition],
                   make_call: LeaderCallFactory, tps: list[TopicPartition]) -> Call:
    """A Metadata call for partitions ``tps``; its answer starts one ``make_call`` per leader. Partitions
    without a leader, or that a leader answers with a metadata error, are looked up again (``retry``) after the
    retry backoff."""

    def retry(again: list[TopicPartition]) -> None:
        again = [tp for tp in again if tp in futures.undone()]
        if again:
            call = _leader_lookup(rt, name, deadline, futures, make_call, again)
            call.next_allowed_try_ms = rt.time.hi_res_milliseconds() + rt.retry_backoff_ms
            rt.enqueue_internal(call, 0)

    def request(_timeout: int) -> Any:
        topics = sorted({tp.topic for tp in tps})
        return MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                               allow_auto_topic_creation=False)

    def response(body: Any, _version: int) -> None:
        nodes = {b.node_id: Node(b.node_id, b.host, b.port, b.rack) for b in body.brokers}
        topics = {t.name: t for t in body.topics}
        by_leader: dict[int, list[TopicPartition]] = {}
        no_leader: list[TopicPartition] = []
        undone = set(futures.undone())
        for tp in tps:
            if tp not in undone:
                continue
            t = topics.get(tp.topic)
            if t is None or t.error_code:
                code = t.error_code if t is not None else 3
                if code == LeaderNotAvailableError.errno:
                    no_leader.append(tp)
                else:
                    futures.fail(tp, for_code(code, f"Topic {tp.topic} not found." if code == 3 else None))
                continue
            p = next((p for p in t.partitions if p.partition_index == tp.partition), None)
            if p is None:
                futures.fail(tp, UnknownTopicOrPartitionError(f"Partition {tp} does not exist."))
            elif p.leader_id < 0 or p.leader_id not in nodes:
                no_leader.append(tp)
            else:
                by_leader.setdefault(p.leader_id, []).append(tp)
        for leader_id, group in by_leader.items():
            rt.enqueue_internal(make_call(nodes[leader_id], group, retry), 0)
        retry(no_leader)

    def failure(e: BaseException) -> None:
        for tp in tps:
            futures.fail(tp, e)

    return Call(f"{name}.metadata", deadline, LeastLoadedNodeProvider(), request, response, failure,
                min_version=1)


def list_offsets(rt: AdminClientRunnable, specs: Mapping[TopicPartition, OffsetSpec], isolation_level: int,
                 timeout_ms: int | None) -> KeyedResult[TopicPartition, ListOffsetsResultInfo]:
    wanted = dict(specs)
    futures: FutureMap[TopicPartition] = FutureMap(wanted)
    if not wanted:
        return KeyedResult({})
    deadline = rt.calc_deadline(timeout_ms)
    R = ListOffsetsRequest
    needs_max_ts = any(s.timestamp == OffsetSpec.MAX_TIMESTAMP for s in wanted.values())

    def make_call(leader: Node, tps: list[TopicPartition], retry: Callable[[list[TopicPartition]], None]) -> Call:
        def request(timeout: int) -> Any:
            return R(replica_id=-1, isolation_level=isolation_level, timeout_ms=timeout, topics=[
                R.ListOffsetsTopic(name=t, partitions=[
                    R.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1,
                                           timestamp=wanted[TopicPartition(t, p)].timestamp, max_num_offsets=1)
                    for p in ps]) for t, ps in _by_topic(tps).items()])

        def response(body: Any, version: int) -> None:
            again = []
            seen = []
            for t in body.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    seen.append(tp)
                    if p.error_code:
                        error = for_code(p.error_code)
                        if error.invalid_metadata and error.retriable and p.error_code != 3:
                            again.append(tp)
                        else:
                            futures.fail(tp, error)
                    elif version == 0:
                        offset = p.old_style_offsets[0] if p.old_style_offsets else -1
                        futures.complete(tp, ListOffsetsResultInfo(offset, -1, None))
                    else:
                        epoch = p.leader_epoch if version >= 4 and p.leader_epoch >= 0 else None
                        futures.complete(tp, ListOffsetsResultInfo(p.offset, p.timestamp, epoch))
            futures.fail_missing(seen, "partition", tps)
            retry(again)

        def failure(e: BaseException) -> None:
            for tp in tps:
                futures.fail(tp, e)

        return Call("listOffsets", deadline, ConstantNodeProvider(leader), request, response, failure,
                    min_version=7 if needs_max_ts else (2 if isolation_level else 1))

    rt.submit(_leader_lookup(rt, "listOffsets", deadline, futures, make_call, list(wanted)))
    return KeyedResult(futures.futures)


def delete_records(rt: AdminClientRunnable, records: Mapping[TopicPartition, RecordsToDelete | int],
                   timeout_ms: int | None) -> KeyedResult[TopicPartition, DeletedRecords]:
    wanted = {tp: (r.before_offset if isinstance(r, RecordsToDelete) else int(r)) for tp, r in records.items()}
    futures: FutureMap[TopicPartition] = FutureMap(wanted)
    if not wanted:
        return KeyedResult({})
    deadline = rt.calc_deadline(timeout_ms)
    R = DeleteRecordsRequest

    def make_call(leader: Node, tps: list[TopicPartition], retry: Callable[[list[TopicPartition]], None]) -> Call:
        def request(timeout: int) -> Any:
            return R(timeout_ms=timeout, topics=[
                R.DeleteRecordsTopic(name=t, partitions=[
                    R.DeleteRecordsPartition(partition_index=p, offset=wanted[TopicPartition(t, p)]) for p in ps])
                for t, ps in _by_topic(tps).items()])

        def response(body: Any, _version: int) -> None:
            again = []
            seen = []
            for t in body.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    seen.append(tp)
                    if p.error_code:
                        error = for_code(p.error_code)
                        if error.invalid_metadata and error.retriable and p.error_code != 3:
                            again.append(tp)
                        else:
                            futures.fail(tp, error)
                    else:
                        futures.complete(tp, DeletedRecords(p.low_watermark))
            futures.fail_missing(seen, "partition", tps)
            retry(again)

        def failure(e: BaseException) -> None:
            for tp in tps:
                futures.fail(tp, e)

        return Call("deleteRecords", deadline, ConstantNodeProvider(leader), request, response, failure)

    rt.submit(_leader_lookup(rt, "deleteRecords", deadline, futures, make_call, list(wanted)))
    return KeyedResult(futures.futures)
