"""Partition logs as the request handlers see them: append, read, and the fetch purgatory.

Kafka counterpart: ``ReplicaManager`` (appendRecords / fetchMessages) with ``DelayedFetch`` in a purgatory.
A single broker leads every partition, so the high watermark is the log end offset once the append is done
(and flushed when the flush policy says so). Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from strom.common.errors import BrokerResponseError, KafkaError
from strom.common.structs import TopicPartition
from strom.server.metadata_cache import TopicInfo
from strom.storage.log_config import LogConfig

if TYPE_CHECKING:
    from strom.server.broker import BrokerServer
    from strom.storage.log import Log

__all__ = ["ReplicaManager", "LEADER_EPOCH"]

log = logging.getLogger("strom.server")
LEADER_EPOCH = 0


class ReplicaManager:
    def __init__(self, broker: BrokerServer) -> None:
        self.broker = broker
        assert broker.log_manager is not None and broker.metadata is not None
        self.log_manager = broker.log_manager
        self.metadata = broker.metadata
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}
        self._configs: dict[str, LogConfig] = {}

    # -- logs -------------------------------------------------------------------------------------------------
    def open_all(self) -> None:
        """Create or open the log of every known partition; delete logs whose topic no longer exists."""
        known = {t.name: t for t in self.metadata.topics()}
        for lg_tp in list(self._all_log_tps()):
            info = known.get(lg_tp.topic)
            if info is None or lg_tp.partition >= info.num_partitions:
                log.info("deleting log of %s: its topic was deleted", lg_tp)
                self.log_manager.delete_log(lg_tp)
        for info in known.values():
            self.ensure_logs(info)

    def _all_log_tps(self) -> list[TopicPartition]:
        return [lg_tp for lg_tp, _ in self.log_manager.all_logs()]

    def log_config(self, topic: str) -> LogConfig:
        cfg = self._configs.get(topic)
        if cfg is None:
            info = self.metadata.topic(topic)
            cfg = LogConfig.from_props(info.configs if info else {}, self.broker.default_log_config)
            self._configs[topic] = cfg
        return cfg

    def ensure_logs(self, info: TopicInfo) -> None:
        cfg = self.log_config(info.name)
        for p in range(info.num_partitions):
            lg = self.log_manager.get_or_create_log(TopicPartition(info.name, p), cfg)
            lg.update_high_watermark(lg.log_end_offset)

    def topic_config_changed(self, topic: str) -> None:
        self._configs.pop(topic, None)
        self.log_manager.update_topic_config(topic, self.log_config(topic))

    def delete_topic(self, info: TopicInfo) -> None:
        self._configs.pop(info.name, None)
        for p in range(info.num_partitions):
            tp = TopicPartition(info.name, p)
            self.log_manager.delete_log(tp)
            self._wake(tp)

    def get_log(self, tp: TopicPartition) -> Log | None:
        return self.log_manager.get_log(tp)

    # -- append -----------------------------------------------------------------------------------------------
    def append(self, tp: TopicPartition, records: memoryview | bytes) -> tuple[int, object | None, str | None]:
        """Append one partition's batches. Returns ``(error_code, LogAppendInfo|None, error_message)``."""
        lg = self.log_manager.get_log(tp)
        if lg is None:
            return 3, None, None  # UNKNOWN_TOPIC_OR_PARTITION
        try:
            info = lg.append_as_leader(records, leader_epoch=LEADER_EPOCH)
        except BrokerResponseError as e:
            log.info("rejected produce to %s: %s", tp, e)
            return e.errno, None, e.message
        except KafkaError as e:
            log.warning("produce to %s failed: %s", tp, e)
            return -1, None, str(e)
        except OSError as e:
            log.error("produce to %s failed with a storage error: %s", tp, e)
            return 56, None, f"I/O error: {e}"  # KAFKA_STORAGE_ERROR
        lg.update_high_watermark(lg.log_end_offset)
        self._wake(tp)
        return 0, info, None

    # -- fetch purgatory --------------------------------------------------------------------------------------
    def _wake(self, tp: TopicPartition) -> None:
        waiters = self._waiters.pop(tp, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait_for_append(self, tps: list[TopicPartition], timeout_s: float) -> None:
        """Park until one of ``tps`` gets an append, or the timeout passes (Kafka's DelayedFetch)."""
        if timeout_s <= 0 or not tps:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for tp in tps:
            self._waiters.setdefault(tp, set()).add(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            pass
        finally:
            for tp in tps:
                s = self._waiters.get(tp)
                if s is not None:
                    s.discard(fut)
                    if not s:
                        del self._waiters[tp]

    def shutdown(self) -> None:
        for waiters in self._waiters.values():
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        self._waiters.clear()
