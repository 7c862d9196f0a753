"""Moving replicas between this broker's log dirs (KIP-113; Kafka's ``ReplicaAlterLogDirsManager`` and
``ReplicaAlterLogDirsThread``).

AlterReplicaLogDirs names a partition and a log dir: the broker creates a *future* log in that dir
(``<topic>-<partition>.<uuid>-future``) and copies the current log into it batch by batch, as a follower copies
its leader, while the partition goes on taking appends and serving reads from the current log. Once the future
log has caught up, the swap happens on the event loop with no append in between: the future log becomes the
partition's log under its final name and the old directory is removed after ``file.delete.delay.ms`` (reads in
flight keep their files). A truncation of the partition (a follower dropping a divergent tail) truncates the
future log too. A replica that does not exist yet is created in the named dir when it is. A move the broker stops
in resumes once the partition is hosted again after a restart, from what the future log holds. The copy is held to
``replica.alter.log.dirs.io.max.bytes.per.second`` (a dynamic broker config, unlimited by default): while the
bytes copied over the quota window are over it, no step runs (Kafka's AlterLogDirs replication quota).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

from strom.common.error_codes import ErrorCode
from strom.common.structs import TopicPartition

if TYPE_CHECKING:
    from strom.server.replica_manager import ReplicaManager

__all__ = ["ReplicaAlterLogDirsManager"]

log = logging.getLogger("strom.server")
CHUNK_BYTES = 1 << 20  # per copy step, as a follower's replica.fetch.max.bytes
THROTTLE_CHECK_S = 0.1  # how often a throttled move looks whether it may copy again


class ReplicaAlterLogDirsManager:
    """Event loop only (copy steps run in worker threads)."""

    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.rm = replica_manager
        self._moves: dict[TopicPartition, asyncio.Task[None]] = {}

    async def alter(self, tp: TopicPartition, log_dir: str) -> int:
        """Start moving ``tp`` to ``log_dir``; the error code of AlterReplicaLogDirs."""
        lm = self.rm.log_manager
        target = os.path.abspath(log_dir)
        if target not in lm.log_dirs:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if target not in lm.live_log_dirs or tp in self.rm.offline_partitions:
            return ErrorCode.KAFKA_STORAGE_ERROR  # an offline dir on either side, as Kafka's
        current = lm.get_log(tp)
        if current is None:  # not here (yet): created in that dir when it is, as Kafka's preferred log dir
            lm.preferred_dirs[tp] = target
            return ErrorCode.REPLICA_NOT_AVAILABLE
        future = lm.future_log(tp)
        if future is not None:
            if os.path.dirname(future.dir) == target:
                return ErrorCode.NONE  # already on its way there
            await self._abort(tp)
        if os.path.dirname(current.dir) == target:
            return ErrorCode.NONE
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, lm.create_future_log, tp, target)
        except Exception as e:
            log.error("cannot start moving %s to %s: %s", tp, target, e)
            return ErrorCode.KAFKA_STORAGE_ERROR
        log.info("moving %s from %s to %s", tp, os.path.dirname(current.dir), target)
        self._moves[tp] = loop.create_task(self._run(tp))
        return ErrorCode.NONE

    def resume(self, tp: TopicPartition) -> None:
        """Go on with a move whose future log was loaded at start (the partition is hosted again)."""
        if tp not in self._moves:
            log.info("resuming the move of %s to another log dir", tp)
            self._moves[tp] = asyncio.get_running_loop().create_task(self._run(tp))

    async def _abort(self, tp: TopicPartition) -> None:
        task = self._moves.pop(tp, None)
        if task is not None:
            task.cancel()
        await asyncio.get_running_loop().run_in_executor(None, self.rm.log_manager.abort_future_log, tp)

    async def _run(self, tp: TopicPartition) -> None:
        lm = self.rm.log_manager
        loop = asyncio.get_running_loop()
        quota = self.rm.alter_log_dirs_quota
        try:
            while True:
                while quota.is_quota_exceeded():
                    await asyncio.sleep(THROTTLE_CHECK_S)
                copied = await loop.run_in_executor(None, lm.copy_to_future, tp, CHUNK_BYTES)
                if copied < 0:
                    return  # the move was given up (the partition deleted, or sent elsewhere)
                if copied:
                    quota.record(copied)
                    continue
                current, future = lm.get_log(tp), lm.future_log(tp)
                if current is None or future is None:
                    return
                if future.log_end_offset == current.log_end_offset:
                    # No await between the check and the swap: no append can come in between.
                    new, old = lm.replace_current_with_future(tp)
                    partition = self.rm.get_partition(tp)
                    if partition is not None:
                        partition.log = new
                    delay_s = new.config.file_delete_delay_ms / 1000
                    loop.call_later(delay_s, loop.run_in_executor, None, lm.delete_replaced_log, old)
                    return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("moving %s to another log dir failed; the replica stays where it is", tp)
            await loop.run_in_executor(None, lm.abort_future_log, tp)
        finally:
            if self._moves.get(tp) is asyncio.current_task():
                del self._moves[tp]

    def remove_partition(self, tp: TopicPartition) -> None:
        """Stop moving ``tp`` (its log dir or its future log's failed: the log manager drops the future log)."""
        task = self._moves.pop(tp, None)
        if task is not None:
            task.cancel()

    def moving(self) -> set[TopicPartition]:
        return set(self._moves)

    def shutdown(self) -> None:
        for task in self._moves.values():
            task.cancel()
        self._moves.clear()
