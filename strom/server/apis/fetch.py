"""Fetch (key 1): read batches straight from the segment files, long-polling for ``min_bytes``.

Kafka counterpart: ``KafkaApis.handleFetchRequest`` → ``ReplicaManager.fetchMessages`` + ``DelayedFetch``.
Consumers read up to the high watermark; followers (``replica_id >= 0``) read up to the log end and, by the
offset they fetch at, tell the leader how far they have replicated. Fetch sessions (KIP-227): the request's
session id and epoch pick a :class:`~strom.server.fetch_session.FetchContext` from the ``FetchManager``; it says
which partitions to read (an incremental request's are its session's) and shapes the response (an incremental one
carries only the partitions with news). The reading itself does not depend on the kind of context.

Zero-copy: with ``ConnectionContext.zero_copy`` (every listener's connections, unless a plaintext one could not
get its socket writer) the records of each partition are read as a file region (Kafka's ``FileRecords.slice``)
that the socket server sends from the segment file with ``sendfile`` on plaintext, or reads when it writes the
response over TLS (handed to the TLS layer as they are, not copied into the frame). Regions of a read that is
not answered (a long poll that reads again, a throttled response, a partition an incremental response leaves
out) are released here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.fetch_metadata import FetchMetadata
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from strom.protocol.send import TransferableRecords
from strom.server.apis import api
from strom.server.fetch_session import (
    FetchContext,
    FetchManager,
    PartitionKey,
    PartitionRequest,
    SessionErrorContext,
    SessionlessFetchContext,
    TopicKey,
)
from strom.server.replica_manager import FetchPartition
from strom.server.security.request_auth import Op, allowed_cluster, allowed_topics

if TYPE_CHECKING:
    from strom.common.time import Time
    from strom.server.broker_metrics import BrokerMetrics
    from strom.server.metadata_cache import MetadataCache
    from strom.server.replica_manager import ReplicaManager
    from strom.server.request_context import RequestContext

ZERO_UUID = uuid.UUID(int=0)


def _fetch_context(fetch_manager: FetchManager | None, version: int, request: FetchRequest,
                   replica_id: int) -> FetchContext:
    """The request's partitions keyed as its session would key them (topic id from v13, name before), and the
    context its session id and epoch call for. Without a FetchManager no session is ever opened."""
    by_id = version >= 13
    fetch_data: dict[PartitionKey, PartitionRequest] = {}
    for ft in request.topics:
        topic: TopicKey = ft.topic_id if by_id else ft.topic
        for fp in ft.partitions:
            fetch_data[(topic, fp.partition)] = fp
    if version < 7:
        return SessionlessFetchContext(fetch_data)
    meta = FetchMetadata(request.session_id, request.session_epoch)
    if fetch_manager is None:
        return SessionlessFetchContext(fetch_data) if meta.is_full \
            else SessionErrorContext(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, meta)
    to_forget: list[PartitionKey] = [(ft.topic_id if by_id else ft.topic, p)
                                     for ft in request.forgotten_topics_data for p in ft.partitions]
    return fetch_manager.new_context(version, meta, replica_id >= 0, fetch_data, to_forget)


def _by_topic(partitions: Iterable[tuple[TopicKey, PartitionRequest]]) -> list[tuple[TopicKey, list[PartitionRequest]]]:
    """Consecutive partitions of one topic share a topic entry, as in Kafka's ``FetchResponse.of`` (a session's
    order may visit a topic more than once)."""
    out: list[tuple[TopicKey, list[PartitionRequest]]] = []
    for topic, fp in partitions:
        if out and out[-1][0] == topic:
            out[-1][1].append(fp)
        else:
            out.append((topic, [fp]))
    return out


_ZSTD_MIN_VERSION = 10  # the first Fetch version whose clients can read zstd batches (KIP-110)


def _read_all(version: int, topics: list[tuple[TopicKey, list[PartitionRequest]]], request: FetchRequest,
              replica_id: int, metadata: MetadataCache, rm: ReplicaManager, readable: set[str] | None = None,
              zero_copy: bool = False,
              ) -> tuple[list[FetchResponse.FetchableTopicResponse], int, list[TopicPartition], bool]:
    """``topics``: what the fetch context says to read, topics keyed by id from v13, by name before.
    ``readable``: the topics the principal may read (None: all); the others answer TOPIC_AUTHORIZATION_FAILED
    without being read or waited on, as Kafka's erroneous partitions."""
    remaining = request.max_bytes if version >= 3 else 2**31 - 1
    total = 0
    throttled_bytes = 0  # records of throttled replicas sent to a follower (KIP-73)
    leader_quota = rm.leader_quota if replica_id >= 0 else None
    watched: list[TopicPartition] = []
    had_error = False
    out: list[FetchResponse.FetchableTopicResponse] = []
    for topic, fps in topics:
        if isinstance(topic, uuid.UUID):  # v13+
            info = metadata.topic_by_id(topic)
            name = info.name if info else None
        else:
            name = topic
            info = metadata.topic(name)
        parts: list[FetchResponse.PartitionData] = []
        for fp in fps:
            pidx = fp.partition
            if readable is not None and name is not None and name not in readable:  # before existence: no leak
                parts.append(FetchResponse.PartitionData(partition_index=pidx, high_watermark=-1, records=b"",
                                                         error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            if info is None or not 0 <= pidx < info.num_partitions:
                err = ErrorCode.UNKNOWN_TOPIC_ID if version >= 13 and info is None \
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                parts.append(FetchResponse.PartitionData(partition_index=pidx, error_code=err, high_watermark=-1,
                                                         records=b""))
                had_error = True
                continue
            tp = TopicPartition(info.name, pidx)
            if version < _ZSTD_MIN_VERSION and replica_id < 0 and rm.log_config(info.name).compression_type == "zstd":
                # Kafka (KIP-110): a client too old for zstd may not read a topic whose compression.type is zstd
                parts.append(FetchResponse.PartitionData(partition_index=pidx, high_watermark=-1, records=b"",
                                                         error_code=ErrorCode.UNSUPPORTED_COMPRESSION_TYPE))
                had_error = True
                continue
            part = FetchPartition(tp, fp.fetch_offset, fp.partition_max_bytes,
                                  fp.current_leader_epoch if version >= 9 else -1)
            r = rm.read(replica_id, part, min(fp.partition_max_bytes, remaining), min_one=(total == 0),
                        client_rack=request.rack_id or None if version >= 11 else None, follower_reads=version >= 11,
                        isolation_level=request.isolation_level, zero_copy=zero_copy)
            if leader_quota is not None and r.records and not r.error_code and leader_quota.is_throttled(tp):
                p = rm.get_partition(tp)
                if p is None or replica_id not in p.isr:  # a reassignment's new replica: within the rate
                    if leader_quota.is_quota_exceeded():
                        if isinstance(r.records, TransferableRecords):
                            r.records.release()
                        r.records = b""
                    else:
                        throttled_bytes += len(r.records)
            if r.error_code:
                had_error = True
            elif not r.records and r.preferred_read_replica < 0:
                watched.append(tp)
            n = len(r.records)
            total += n
            remaining -= n
            pd = FetchResponse.PartitionData(
                partition_index=pidx, error_code=r.error_code, high_watermark=r.high_watermark,
                last_stable_offset=r.last_stable_offset, log_start_offset=r.log_start_offset,
                aborted_transactions=_aborted(r.aborted_transactions, version),
                preferred_read_replica=r.preferred_read_replica,
                records=r.records)
            if r.error_code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH) and version >= 12:
                st = metadata.partition_state(tp)
                if st is not None:
                    pd.current_leader = FetchResponse.LeaderIdAndEpoch(leader_id=st.leader,
                                                                       leader_epoch=st.leader_epoch)
            parts.append(pd)
        out.append(FetchResponse.FetchableTopicResponse(topic=name or "", topic_id=topic if version >= 13
                                                        else ZERO_UUID, partitions=parts))
    if leader_quota is not None:
        leader_quota.record(throttled_bytes)
    return out, total, watched, had_error


def _release(responses: list[FetchResponse.FetchableTopicResponse]) -> None:
    """Give back the file regions of a read that will not be sent."""
    for t in responses:
        for p in t.partitions:
            if isinstance(p.records, TransferableRecords):
                p.records.release()


def _aborted(aborted: list[tuple[int, int]] | None, version: int) -> list[FetchResponse.AbortedTransaction] | None:
    # Kafka answers null for read_uncommitted (v4+) and the list, maybe empty, for read_committed.
    if aborted is None:
        return None if version >= 4 else []
    return [FetchResponse.AbortedTransaction(producer_id=pid, first_offset=first) for pid, first in aborted]


def _respond(context: FetchContext, quotas: Any, ctx: RequestContext, replica_id: int, total: int,
             responses: list[FetchResponse.FetchableTopicResponse], metrics: BrokerMetrics | None) -> FetchResponse:
    """consumer_byte_rate (KIP-13): over quota, the consumer gets no data and the throttle time, and the bytes are
    not counted (Kafka's ``getThrottledResponse``; the session, if any, is not told of what was read, so the next
    response sends it); followers are not subject to client quotas. Each partition read is counted in
    BrokerTopicMetrics, once per request, before an incremental context leaves the unchanged ones out."""
    throttle_ms = quotas.record_fetch(ctx, total) if quotas is not None and replica_id < 0 else 0
    if throttle_ms > 0:
        _release(responses)
        return context.get_throttled_response(throttle_ms)
    if metrics is not None:
        metrics.topic_stats.record_fetch(responses, replica_id >= 0)
    response = context.update_and_generate_response_data(responses)
    if response.responses is not responses:  # an incremental response left partitions out: free their regions
        sent = {id(p.records) for t in response.responses for p in t.partitions}
        for t in responses:
            for p in t.partitions:
                if isinstance(p.records, TransferableRecords) and id(p.records) not in sent:
                    p.records.release()
    return response


@api(ApiKey.FETCH, 4)
async def handle(ctx: RequestContext, request: FetchRequest, *, metadata: MetadataCache,
                 replica_manager: ReplicaManager, time: Time, authorizer: Any, quotas: Any,
                 metrics: BrokerMetrics | None, fetch_manager: FetchManager | None) -> FetchResponse:
    version = ctx.api_version
    replica_id = request.replica_state.replica_id if version >= 15 else request.replica_id
    context = _fetch_context(fetch_manager, version, request, replica_id)
    if context.error_code:  # the session could not be used: nothing is read
        return context.update_and_generate_response_data([])
    topics = _by_topic(context.partitions())
    readable: set[str] | None = None
    if authorizer is not None:
        if replica_id >= 0:  # a follower: CLUSTER_ACTION or nothing
            readable = set() if not allowed_cluster(authorizer, ctx, Op.CLUSTER_ACTION) else None
        else:
            names = [(i.name if (i := metadata.topic_by_id(t)) else None) if isinstance(t, uuid.UUID) else t
                     for t, _fps in topics]
            readable = allowed_topics(authorizer, ctx, Op.READ, names)
    if quotas is not None and replica_id < 0:  # consumer_byte_rate: never more than one quota window's bytes
        request.max_bytes = quotas.fetch_max_bytes(ctx, request.max_bytes)
    deadline = time.hi_res_milliseconds() + max(0, request.max_wait_ms)
    zero_copy = ctx.connection.zero_copy
    while True:
        responses, total, watched, had_error = _read_all(version, topics, request, replica_id, metadata,
                                                         replica_manager, readable, zero_copy)
        wait_ms = deadline - time.hi_res_milliseconds()
        redirected = any(p.preferred_read_replica >= 0 for t in responses for p in t.partitions)
        if total >= request.min_bytes or had_error or redirected or wait_ms <= 0 or not watched \
                or ctx.connection.closed:
            return _respond(context, quotas, ctx, replica_id, total, responses, metrics)
        _release(responses)
        await replica_manager.wait_for_data(watched, wait_ms / 1000.0)
        if time.hi_res_milliseconds() >= deadline:
            responses, total, watched, had_error = _read_all(version, topics, request, replica_id, metadata,
                                                             replica_manager, readable, zero_copy)
            return _respond(context, quotas, ctx, replica_id, total, responses, metrics)
