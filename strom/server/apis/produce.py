"""Produce (key 0): validate and append each partition's batches; acks 0 gets no response.

Kafka counterpart: ``KafkaApis.handleProduceRequest`` → ``ReplicaManager.appendRecords``. acks=1 answers once the
leader has appended; acks=-1 waits (up to the request's timeout) until every in-sync replica has the records.
Transactional batches need the request's transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as in
Kafka); a transaction's first batch in a partition is appended once its coordinator confirmed the partition is in
the producer's ongoing transaction (KIP-890 part 1, ``ReplicaManager._verify_transactions``).
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.common.errors import BrokerResponseError
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from strom.record.compression import CompressionType
from strom.record.header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    TRANSACTIONAL_FLAG,
)
from strom.server.apis import api
from strom.server.metadata_cache import validate_topic_name
from strom.server.security.request_auth import Op, Res, allowed, allowed_cluster, allowed_topics
from strom.server.socket_server import ConnectionClosed

if TYPE_CHECKING:
    from strom.server.admin_manager import AdminManager
    from strom.server.metadata_cache import MetadataCache
    from strom.server.replica_manager import ReplicaManager
    from strom.server.request_context import RequestContext

PartitionResponse = ProduceResponse.PartitionProduceResponse
_I32 = struct.Struct(">i")
log = logging.getLogger("strom.server")


@api(ApiKey.PRODUCE, 3)
async def handle(ctx: RequestContext, request: ProduceRequest, *, metadata: MetadataCache,
                 replica_manager: ReplicaManager, admin: AdminManager, authorizer: Any,
                 quotas: Any) -> ProduceResponse | None:
    acks = request.acks
    errors: dict[tuple[str, int], tuple[int, str | None]] = {}
    entries: dict[TopicPartition, memoryview | bytes] = {}
    denied: set[str] = set()
    denied_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if request.transactional_id is None and any(_is_transactional(pd.records) for td in request.topic_data
                                                for pd in td.partition_data):
        # Kafka: transactional batches need the request's transactional id (and WRITE on it), with or without an
        # authorizer; so no batch can open a transaction past its coordinator's verification (KIP-890).
        denied = {td.name for td in request.topic_data}
        denied_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif authorizer is not None:
        txn_id = request.transactional_id
        if txn_id is not None and not allowed(authorizer, ctx, Op.WRITE, (Res.TRANSACTIONAL_ID, txn_id)):
            denied = {td.name for td in request.topic_data}
            denied_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        else:
            names = [td.name for td in request.topic_data]
            denied = set(names) - allowed_topics(authorizer, ctx, Op.WRITE, names)
    for td in request.topic_data:
        name = td.name
        info = None
        if denied and name in denied:
            for pd in td.partition_data:
                errors[(name, pd.index)] = (denied_code, None)
            continue
        hosted = False
        if acks in (-1, 0, 1) and validate_topic_name(name) is None:
            info = metadata.topic(name)
            # A partition this broker was told to lead is served even before the UpdateMetadata naming its topic
            # arrives (Kafka's ReplicaManager decides, not the metadata cache); nothing is auto-created for it.
            hosted = info is None and any(replica_manager.get_partition(TopicPartition(name, pd.index)) is not None
                                          for pd in td.partition_data)
            if info is None and not hosted and _may_create(authorizer, ctx, name):
                try:
                    info = await admin.auto_create_topic(name)
                except BrokerResponseError:
                    info = None
        for pd in td.partition_data:
            key = (name, pd.index)
            if acks not in (-1, 0, 1):
                errors[key] = (ErrorCode.INVALID_REQUIRED_ACKS, None)
            elif validate_topic_name(name) is not None:
                errors[key] = (ErrorCode.INVALID_TOPIC_EXCEPTION, None)
            elif (info is None and not hosted) or (info is not None and not 0 <= pd.index < info.num_partitions):
                errors[key] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
            elif pd.records is None or len(pd.records) == 0:
                errors[key] = (ErrorCode.INVALID_RECORD, f"Produce requests with version {ctx.api_version} must "
                                                         "have at least one record batch per partition")
            elif (problem := _not_one_v2_batch(pd.records, ctx.api_version)) is not None:
                errors[key] = (ErrorCode.INVALID_RECORD, problem)
            elif ctx.api_version < _ZSTD_MIN_VERSION and _has_zstd(pd.records):
                errors[key] = (ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                               f"zstd-compressed batches need Produce v{_ZSTD_MIN_VERSION} or later")
            else:
                entries[TopicPartition(name, pd.index)] = pd.records
    results = await replica_manager.append_records(entries, acks, request.timeout_ms, on_parked=ctx.connection.parked,
                                                   transactional_id=request.transactional_id) if entries else {}
    throttle_ms = quotas.record_produce(ctx, request) if quotas is not None else 0  # producer_byte_rate (KIP-13)
    if acks == 0 and not errors and not any(r.error_code for r in results.values()):
        return None
    responses: list[ProduceResponse.TopicProduceResponse] = []
    for td in request.topic_data:
        parts: list[PartitionResponse] = []
        for pd in td.partition_data:
            r = results.get(TopicPartition(td.name, pd.index))
            if r is None:
                code, message = errors[(td.name, pd.index)]
                parts.append(PartitionResponse(index=pd.index, error_code=code, base_offset=-1, error_message=message))
            elif r.error_code or r.info is None:
                parts.append(PartitionResponse(index=pd.index, error_code=r.error_code, base_offset=-1,
                                               error_message=r.error_message))
            else:
                parts.append(PartitionResponse(
                    index=pd.index, error_code=ErrorCode.NONE, base_offset=r.info.first_offset,
                    log_append_time_ms=r.info.log_append_time, log_start_offset=r.info.log_start_offset))
        responses.append(ProduceResponse.TopicProduceResponse(name=td.name, partition_responses=parts))
    response = ProduceResponse(responses=responses, throttle_time_ms=throttle_ms)
    if acks == 0:
        # No response tells an acks=0 producer of a failure: Kafka closes the connection, and the client reconnects
        # and refreshes its metadata.
        log.info("closing connection %s: a produce with acks=0 failed (%s)", ctx.connection.peer, ", ".join(
            f"{t.name}-{q.index}: {q.error_code}" for t in responses for q in t.partition_responses if q.error_code))
        raise ConnectionClosed(response)
    return response


def _not_one_v2_batch(records: memoryview | bytes, version: int) -> str | None:
    """Kafka's ``ProduceRequest.validateRecords`` (v3+): one partition's records are exactly one batch of magic 2.
    A header or a batch cut short is left to the log's validation (CORRUPT_MESSAGE)."""
    if len(records) < HEADER_SIZE:
        return None
    if records[MAGIC_OFFSET] != 2:
        return f"Produce requests with version {version} are only allowed to contain record batches with magic version 2"
    length = _I32.unpack_from(records, 8)[0]
    if length >= HEADER_SIZE - LOG_OVERHEAD and len(records) - LOG_OVERHEAD - length >= LOG_OVERHEAD:
        return f"Produce requests with version {version} are only allowed to contain exactly one record batch per partition"
    return None


def _is_transactional(records: memoryview | bytes | None) -> bool:
    return records is not None and len(records) >= HEADER_SIZE and \
        bool(records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG)


_ZSTD_MIN_VERSION = 7  # KIP-110: Produce v7 and Fetch v10 are the first versions that may carry zstd batches


def _has_zstd(records: memoryview | bytes) -> bool:
    """Whether the partition's batch (one: :func:`_not_one_v2_batch` ran first) is zstd-compressed."""
    return len(records) >= HEADER_SIZE and \
        records[ATTRIBUTES_OFFSET + 1] & COMPRESSION_MASK == CompressionType.ZSTD


def _may_create(authorizer: Any, ctx: RequestContext, name: str) -> bool:
    """Creating a topic on first use needs CREATE on the cluster or on the topic, as Metadata's auto-create does."""
    return authorizer is None or allowed_cluster(authorizer, ctx, Op.CREATE) or \
        allowed(authorizer, ctx, Op.CREATE, (Res.TOPIC, name))
