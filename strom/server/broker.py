"""The broker process: wiring of config, storage, metadata, request handlers and listeners.

Kafka counterpart: ``BrokerServer`` + ``KafkaApis`` (dispatch). Everything runs on one asyncio event loop;
blocking disk work that can take long (fsync of many segments at shutdown) runs in a thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
from pathlib import Path

from strom.common.errors import ProtocolError
from strom.common.time import SYSTEM_TIME, Time
from strom.protocol.api_keys import ApiKey
from strom.protocol.headers import decode_request_header, response_header_version
from strom.server.apis import ApiSpec, load_all
from strom.server.broker_config import BrokerConfig
from strom.server.coordinator.group_coordinator import GroupCoordinator
from strom.server.coordinator.offsets_log import create_group_coordinator
from strom.server.metadata_cache import MetadataCache
from strom.server.replica_manager import ReplicaManager
from strom.server.request_context import RequestContext
from strom.server.socket_server import ConnectionClosed, ConnectionContext, KafkaServerProtocol
from strom.storage.log_config import LogConfig
from strom.storage.log_manager import LogManager

__all__ = ["BrokerServer"]

log = logging.getLogger("strom.server")
_RESP_V0 = struct.Struct(">ii")


class BrokerServer:
    """One strom broker. Create, ``await start()``, then ``await stop()``; not thread-safe (event loop only)."""

    def __init__(self, config: BrokerConfig, time: Time = SYSTEM_TIME) -> None:
        self.config = config
        self.time = time
        self.node_id = config.node_id
        self.apis: dict[int, ApiSpec] = load_all()
        self.log_dirs = [Path(d).absolute() for d in config.log_dirs]
        self.default_log_config = LogConfig.from_broker_props(config.originals)
        self.metadata: MetadataCache | None = None
        self.log_manager: LogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self._servers: list[asyncio.base_events.Server] = []
        self._connections: set[KafkaServerProtocol] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self.bound_ports: list[int] = []
        self.advertised = config.advertised_listeners
        self._stopped = asyncio.Event()

    # -- lifecycle --------------------------------------------------------------------------------------------
    async def start(self) -> None:
        for d in self.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
        self.metadata = MetadataCache(self.log_dirs[0])
        c = self.config
        self.log_manager = LogManager(
            [str(d) for d in self.log_dirs],
            self.default_log_config,
            self.time,
            flush_check_ms=int(c["log.flush.scheduler.interval.ms"]),
            retention_check_ms=int(c["log.retention.check.interval.ms"]),
        )
        self.log_manager.load_logs()
        self.replica_manager = ReplicaManager(self)
        self.replica_manager.open_all()
        self.group_coordinator = create_group_coordinator(self)
        await self.group_coordinator.start()
        loop = asyncio.get_running_loop()
        for lst in c.listeners:
            server = await loop.create_server(self._new_protocol, host=lst.host or None, port=lst.port, backlog=512,
                                              reuse_address=True)
            self._servers.append(server)
            self.bound_ports.append(server.sockets[0].getsockname()[1])
        if any(a.port == 0 for a in self.advertised):
            # Port 0 means "pick one": advertise what was bound (tests start brokers this way).
            from strom.server.broker_config import Listener

            self.advertised = [
                Listener(a.name, a.host, self.bound_ports[i] if a.port == 0 else a.port)
                for i, a in enumerate(self.advertised)
            ]
        self._tasks.append(loop.create_task(self._housekeeping()))
        log.info("strom broker %d started, listening on %s, data in %s", self.node_id,
                 ", ".join(f"{a.host}:{a.port}" for a in self.advertised), ", ".join(map(str, self.log_dirs)))

    def _new_protocol(self) -> KafkaServerProtocol:
        proto = KafkaServerProtocol(self._dispatch, int(self.config["socket.request.max.bytes"]), self._connections.discard)
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
        """Retention, time-based flush and checkpoints (Kafka's LogManager scheduler)."""
        assert self.log_manager is not None
        lm = self.log_manager
        c = self.config
        retention_every = int(c["log.retention.check.interval.ms"])
        flush_every = min(int(c["log.flush.scheduler.interval.ms"]), 1000)
        checkpoint_every = int(c["log.flush.offset.checkpoint.interval.ms"])
        now = self.time.hi_res_milliseconds()
        next_retention, next_checkpoint = now + retention_every, now + checkpoint_every
        while True:
            await asyncio.sleep(max(0.05, min(flush_every, retention_every, 1000) / 1000.0))
            now = self.time.hi_res_milliseconds()
            try:
                await asyncio.get_running_loop().run_in_executor(None, lm.flush_dirty_logs)
                if now >= next_retention:
                    next_retention = now + retention_every
                    lm.cleanup_logs()
                if now >= next_checkpoint:
                    next_checkpoint = now + checkpoint_every
                    lm.checkpoint_recovery_points()
                    lm.checkpoint_log_start_offsets()
            except Exception:
                log.exception("background log maintenance failed")

    # -- dispatch ---------------------------------------------------------------------------------------------
    async def _dispatch(self, conn: ConnectionContext, frame: memoryview) -> bytes | bytearray | None:
        try:
            header, body_offset = decode_request_header(frame)
        except ProtocolError as e:
            log.warning("closing connection %s: unreadable request header (%s)", conn.peer, e)
            raise ConnectionClosed() from None
        key, version = header.api_key, header.api_version
        spec = self.apis.get(key)
        if spec is None or not spec.min_version <= version <= spec.max_version:
            if key == ApiKey.API_VERSIONS and spec is not None:
                # KIP-511: answer an unsupported ApiVersions version with a v0 body carrying UNSUPPORTED_VERSION.
                from strom.server.apis.api_versions import unsupported_version_response

                return self._frame(header.correlation_id, 0, unsupported_version_response(self), key, 0)
            log.warning("closing connection %s: unsupported %s v%d", conn.peer,
                        _api_name(key), version)
            raise ConnectionClosed()
        try:
            request = spec.request_cls.decode(frame[body_offset:], version)
        except ProtocolError as e:
            log.warning("closing connection %s: malformed %s v%d request (%s)", conn.peer, _api_name(key), version, e)
            raise ConnectionClosed() from None
        ctx = RequestContext(key, version, header.correlation_id, header.client_id, conn, self)
        response = await spec.handler(ctx, request)
        if response is None:
            return None
        return self._frame(header.correlation_id, response_header_version(key, version), response, key, version)

    @staticmethod
    def _frame(correlation_id: int, header_version: int, response: object, key: int, version: int) -> bytearray:
        # One buffer for size + header + body: Fetch bodies carry megabytes of records, copy them once only.
        head = 8 if header_version == 0 else 9
        out = bytearray(head)
        response.encode_into(out, version)  # type: ignore[attr-defined]
        _RESP_V0.pack_into(out, 0, len(out) - 4, correlation_id)
        return out


def _api_name(key: int) -> str:
    try:
        return ApiKey(key).name
    except ValueError:
        return f"api key {key}"


def pid_file_path(log_dir: str | os.PathLike[str]) -> Path:
    return Path(log_dir) / "strom-broker.pid"
