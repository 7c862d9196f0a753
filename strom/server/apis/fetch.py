"""Fetch (key 1): read batches straight from the segment files, long-polling for ``min_bytes``.

Kafka counterpart: ``KafkaApis.handleFetchRequest`` → ``ReplicaManager.fetchMessages`` + ``DelayedFetch``.
Fetch sessions (KIP-227) are not kept: every response carries session id 0, which tells clients to send full
fetch requests (see docs/divergences.md).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from strom.common.errors import BrokerResponseError
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from strom.server.apis import api

if TYPE_CHECKING:
    from strom.server.request_context import RequestContext

UNKNOWN_TOPIC_OR_PARTITION = 3
UNKNOWN_TOPIC_ID = 100
OFFSET_OUT_OF_RANGE = 1
ZERO_UUID = uuid.UUID(int=0)


def _read_all(ctx: RequestContext, request: FetchRequest) -> tuple[list[FetchResponse.FetchableTopicResponse], int,
                                                                     list[TopicPartition], bool]:
    broker = ctx.broker
    md, rm = broker.metadata, broker.replica_manager
    assert md is not None and rm is not None
    version = ctx.api_version
    remaining = request.max_bytes if version >= 3 else 2**31 - 1
    total = 0
    watched: list[TopicPartition] = []
    had_error = False
    out: list[FetchResponse.FetchableTopicResponse] = []
    for ft in request.topics:
        if version >= 13:
            info = md.topic_by_id(ft.topic_id)
            name = info.name if info else None
        else:
            name = ft.topic
            info = md.topic(name)
        parts: list[FetchResponse.PartitionData] = []
        for fp in ft.partitions:
            pidx = fp.partition
            if info is None or not 0 <= pidx < info.num_partitions:
                err = UNKNOWN_TOPIC_ID if version >= 13 and info is None else UNKNOWN_TOPIC_OR_PARTITION
                parts.append(FetchResponse.PartitionData(partition_index=pidx, error_code=err, high_watermark=-1,
                                                         records=b""))
                had_error = True
                continue
            tp = TopicPartition(info.name, pidx)
            lg = rm.get_log(tp)
            if lg is None:
                parts.append(FetchResponse.PartitionData(partition_index=pidx, error_code=UNKNOWN_TOPIC_OR_PARTITION,
                                                         high_watermark=-1, records=b""))
                had_error = True
                continue
            hw = lg.high_watermark
            lso = lg.log_start_offset
            records: bytes | memoryview | None = b""
            code = 0
            limit = min(fp.partition_max_bytes, remaining)
            if fp.fetch_offset == hw:
                watched.append(tp)
            else:
                try:
                    data = lg.read(fp.fetch_offset, max(limit, 0), max_offset=hw, min_one_message=(total == 0))
                    records = data.records
                except BrokerResponseError as e:
                    code = e.errno
                    records = b""
                    had_error = True
                if code == 0 and not records:
                    watched.append(tp)
            n = len(records) if records else 0
            total += n
            remaining -= n
            parts.append(FetchResponse.PartitionData(
                partition_index=pidx, error_code=code, high_watermark=hw, last_stable_offset=hw,
                log_start_offset=lso, aborted_transactions=None if version >= 4 else [], preferred_read_replica=-1,
                records=records,
            ))
        out.append(FetchResponse.FetchableTopicResponse(topic=name or "", topic_id=ft.topic_id if version >= 13
                                                        else ZERO_UUID, partitions=parts))
    return out, total, watched, had_error


@api(ApiKey.FETCH, 4)
async def handle(ctx: RequestContext, request: FetchRequest) -> FetchResponse:
    rm = ctx.broker.replica_manager
    assert rm is not None
    time = ctx.broker.time
    deadline = time.hi_res_milliseconds() + max(0, request.max_wait_ms)
    while True:
        responses, total, watched, had_error = _read_all(ctx, request)
        wait_ms = deadline - time.hi_res_milliseconds()
        if total >= request.min_bytes or had_error or wait_ms <= 0 or not watched or ctx.connection.closed:
            return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=responses)
        await rm.wait_for_append(watched, wait_ms / 1000.0)
        if time.hi_res_milliseconds() >= deadline:
            responses, total, watched, had_error = _read_all(ctx, request)
            return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=responses)
