"""The broker process: builds every collaborator, hands each to what uses it, runs the listeners.

Kafka counterpart: ``KafkaServer`` (ZooKeeper mode) / ``BrokerServer``. This module is the only place that knows
the whole broker; request handlers get their collaborators from :class:`KafkaApis`, never from here. Everything
runs on one asyncio event loop; blocking disk work that can take long runs in a thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from strom.common.time import SYSTEM_TIME, Time
from strom.server.admin_manager import AdminManager, StandaloneAdminManager
from strom.server.broker_config import BrokerConfig, Listener
from strom.server.coordinator.group_coordinator import GroupCoordinator
from strom.server.coordinator.offsets_log import create_group_coordinator
from strom.server.kafka_apis import ApiCollaborators, KafkaApis
from strom.server.metadata_cache import MetadataCache, StandaloneMetadata
from strom.server.producer_id_manager import ProducerIdManager
from strom.server.replica_manager import ReplicaManager
from strom.server.socket_server import ConnectionContext, KafkaServerProtocol
from strom.storage.log_config import LogConfig
from strom.storage.log_manager import LogManager

__all__ = ["BrokerServer", "pid_file_path"]

log = logging.getLogger("strom.server")


class BrokerServer:
    """One strom broker. Create, ``await start()``, then ``await stop()``; not thread-safe (event loop only)."""

    def __init__(self, config: BrokerConfig, time: Time = SYSTEM_TIME) -> None:
        self.config = config
        self.time = time
        self.node_id = config.node_id
        self.log_dirs = [Path(d).absolute() for d in config.log_dirs]
        self.default_log_config = LogConfig.from_broker_props(config.originals)
        self.metadata: MetadataCache | None = None
        self.log_manager: LogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.admin: AdminManager | None = None
        self.apis: KafkaApis | None = None
        self._servers: list[asyncio.base_events.Server] = []
        self._connections: set[KafkaServerProtocol] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self.bound_ports: list[int] = []
        self.advertised = config.advertised_listeners
        self._stopped = asyncio.Event()

    # -- lifecycle --------------------------------------------------------------------------------------------
    async def start(self) -> None:
        c = self.config
        for d in self.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
        self.log_manager = LogManager(
            [str(d) for d in self.log_dirs],
            self.default_log_config,
            self.time,
            flush_check_ms=int(c["log.flush.scheduler.interval.ms"]),
            retention_check_ms=int(c["log.retention.check.interval.ms"]),
        )
        self.log_manager.load_logs()
        await self._bind_listeners()
        metadata = StandaloneMetadata(self.log_dirs[0], self.node_id, self._endpoints(), c["broker.rack"])
        self.metadata = metadata
        rm = ReplicaManager(self.node_id, self.log_manager, metadata, self.time, self.default_log_config,
                            replica_lag_time_max_ms=int(c["replica.lag.time.max.ms"]))
        self.replica_manager = rm
        rm.open_standalone()
        self.admin = StandaloneAdminManager(
            metadata, rm, self.default_log_config, num_partitions=int(c["num.partitions"]),
            default_replication_factor=int(c["default.replication.factor"]),
            auto_create_enable=bool(c["auto.create.topics.enable"]))
        producer_ids = ProducerIdManager(metadata.allocate_producer_id_block)
        self.group_coordinator = create_group_coordinator(c, self.time, metadata, rm)
        await self.group_coordinator.start()
        self.apis = KafkaApis(ApiCollaborators(
            config=c, time=self.time, node_id=self.node_id, metadata=metadata, replica_manager=rm, admin=self.admin,
            group_coordinator=self.group_coordinator, producer_ids=producer_ids,
            default_log_config=self.default_log_config))
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._housekeeping()))
        for s in self._servers:
            await s.start_serving()
        log.info("strom broker %d started, listening on %s, data in %s", self.node_id,
                 ", ".join(f"{a.host}:{a.port}" for a in self.advertised), ", ".join(map(str, self.log_dirs)))

    async def _bind_listeners(self) -> None:
        """Bind every listener (not serving yet) so port 0 resolves before the broker advertises itself."""
        loop = asyncio.get_running_loop()
        for lst in self.config.listeners:
            server = await loop.create_server(lambda lst=lst: self._new_protocol(lst.name), host=lst.host or None,
                                              port=lst.port, backlog=512, reuse_address=True, start_serving=False)
            self._servers.append(server)
            self.bound_ports.append(server.sockets[0].getsockname()[1])
        if any(a.port == 0 for a in self.advertised):
            # Port 0 means "pick one": advertise what was bound (tests start brokers this way).
            self.advertised = [
                Listener(a.name, a.host, self.bound_ports[i] if a.port == 0 else a.port)
                for i, a in enumerate(self.advertised)
            ]

    def _endpoints(self) -> dict[str, tuple[str, int]]:
        return {a.name: (a.host, a.port) for a in self.advertised}

    def _new_protocol(self, listener_name: str) -> KafkaServerProtocol:
        async def dispatch(conn: ConnectionContext, frame: memoryview) -> bytes | bytearray | None:
            assert self.apis is not None
            return await self.apis.handle(conn, frame, listener_name)

        proto = KafkaServerProtocol(dispatch, int(self.config["socket.request.max.bytes"]), self._connections.discard)
        self._connections.add(proto)
        return proto

    async def stop(self) -> None:
        """Stop accepting, finish in-flight requests, flush and close the logs."""
        for s in self._servers:
            s.close()
        if self.group_coordinator is not None:
            self.group_coordinator.shutdown()  # answers parked JoinGroup/SyncGroup before the drain
        await asyncio.gather(*(c.drain_and_close() for c in list(self._connections)), return_exceptions=True)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.replica_manager is not None:
            self.replica_manager.shutdown()
        if self.log_manager is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.log_manager.shutdown)
        self._stopped.set()
        log.info("strom broker %d stopped", self.node_id)

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def _housekeeping(self) -> None:
        """Retention, time-based flush, checkpoints and ISR checks (Kafka's LogManager / ReplicaManager schedulers)."""
        assert self.log_manager is not None and self.replica_manager is not None
        lm, rm = self.log_manager, self.replica_manager
        c = self.config
        retention_every = int(c["log.retention.check.interval.ms"])
        flush_every = min(int(c["log.flush.scheduler.interval.ms"]), 1000)
        checkpoint_every = int(c["log.flush.offset.checkpoint.interval.ms"])
        isr_every = max(int(c["replica.lag.time.max.ms"]) // 2, 50)
        now = self.time.hi_res_milliseconds()
        next_retention, next_checkpoint, next_isr = now + retention_every, now + checkpoint_every, now + isr_every
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(max(0.05, min(flush_every, retention_every, isr_every, 1000) / 1000.0))
            now = self.time.hi_res_milliseconds()
            try:
                await loop.run_in_executor(None, lm.flush_dirty_logs)
                if now >= next_isr:
                    next_isr = now + isr_every
                    rm.maybe_shrink_isr()
                if now >= next_retention:
                    next_retention = now + retention_every
                    await loop.run_in_executor(None, lm.cleanup_logs)
                if now >= next_checkpoint:
                    next_checkpoint = now + checkpoint_every
                    await loop.run_in_executor(None, self._checkpoint)
            except Exception:
                log.exception("background log maintenance failed")

    def _checkpoint(self) -> None:
        assert self.log_manager is not None and self.replica_manager is not None
        self.log_manager.checkpoint_recovery_points()
        self.log_manager.checkpoint_log_start_offsets()
        self.replica_manager.checkpoint_high_watermarks()


def pid_file_path(log_dir: str | os.PathLike[str]) -> Path:
    return Path(log_dir) / "strom-broker.pid"
