"""DescribeLogDirs (key 35): this broker's log directories, the partitions in each with their size on disk, and
(v4) each directory's total and usable bytes — what ``kafka-log-dirs.sh --describe`` and monitoring consoles show.

Kafka counterpart: ``KafkaApis.handleDescribeLogDirsRequest`` → ``ReplicaManager.describeLogDirs``. DESCRIBE on
the cluster is required: without it the response has no directories (v3+: CLUSTER_AUTHORIZATION_FAILED as the
top-level error). ``OffsetLag`` is how far the replica's log end is behind the partition's high watermark (0 on the
leader), as Kafka's ``getLogEndOffsetLag`` for a current (not future) log. Topics null = every partition. A log
dir that failed (KIP-112) is listed with KAFKA_STORAGE_ERROR and no partitions, as Kafka's.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import TYPE_CHECKING, Any

from strom.common.error_codes import ErrorCode
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.describe_log_dirs import DescribeLogDirsRequest, DescribeLogDirsResponse
from strom.server.apis import api
from strom.server.security.request_auth import Op, allowed_cluster

if TYPE_CHECKING:
    from strom.server.replica_manager import ReplicaManager
    from strom.server.request_context import RequestContext
    from strom.storage.log import Log

R = DescribeLogDirsResponse


@api(ApiKey.DESCRIBE_LOG_DIRS, 0)
async def handle(ctx: RequestContext, request: DescribeLogDirsRequest, *, replica_manager: ReplicaManager,
                 authorizer: Any) -> DescribeLogDirsResponse:
    if not allowed_cluster(authorizer, ctx, Op.DESCRIBE):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=[])
    wanted: set[TopicPartition] | None = None
    if request.topics is not None:
        wanted = {TopicPartition(t.topic, p) for t in request.topics for p in t.partitions}
    log_manager = replica_manager.log_manager
    # (partition, log, the log end a future log lags behind: its current log's; None for a current log)
    by_dir: dict[str, list[tuple[TopicPartition, Log, int | None]]] = {d: [] for d in log_manager.log_dirs}
    for tp, lg in log_manager.all_logs():
        if wanted is None or tp in wanted:
            by_dir.setdefault(os.path.dirname(lg.dir), []).append((tp, lg, None))
    for tp, lg in log_manager.all_future_logs():
        current = log_manager.get_log(tp)
        if (wanted is None or tp in wanted) and current is not None:
            by_dir.setdefault(os.path.dirname(lg.dir), []).append((tp, lg, current.log_end_offset))
    # sizes and disk usage stat files: in a thread, off the event loop
    offline = set(log_manager.offline_log_dirs)
    return await asyncio.get_running_loop().run_in_executor(None, _describe, by_dir, offline)


def _describe(by_dir: dict[str, list[tuple[TopicPartition, Log, int | None]]], offline: set[str],
              ) -> DescribeLogDirsResponse:
    results = []
    for log_dir, logs in by_dir.items():
        try:
            usage = None if log_dir in offline else shutil.disk_usage(log_dir)
        except OSError:
            usage = None
        if usage is None:
            results.append(R.DescribeLogDirsResult(error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=log_dir,
                                                   topics=[]))
            continue
        topics: dict[str, list[Any]] = {}
        for tp, lg, current_end in sorted(logs, key=lambda e: (e[0], e[2] is not None)):
            size = lg.size_in_bytes
            # Kafka's offset lag: to the high watermark for a current log, to the current log's end for a future
            # one (KIP-113: how far the copy has to go)
            end = lg.high_watermark if current_end is None else current_end
            topics.setdefault(tp.topic, []).append(R.DescribeLogDirsPartition(
                partition_index=tp.partition, partition_size=size, offset_lag=max(end - lg.log_end_offset, 0),
                is_future_key=current_end is not None))
        results.append(R.DescribeLogDirsResult(
            error_code=ErrorCode.NONE, log_dir=log_dir,
            topics=[R.DescribeLogDirsTopic(name=t, partitions=ps) for t, ps in topics.items()],
            total_bytes=usage.total, usable_bytes=usage.free))
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, results=results)
