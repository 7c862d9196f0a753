"""The broker process: builds every collaborator, hands each to what uses it, runs the listeners.

Kafka counterpart: ``KafkaServer`` (ZooKeeper mode) / ``BrokerServer``. This module is the only place that knows
the whole broker; request handlers get their collaborators from :class:`KafkaApis`, never from here. Everything
runs on one asyncio event loop; blocking disk work that can take long runs in a thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strom.common.error_codes import KafkaStorageError
from strom.common.errors import ConfigError
from strom.common.structs import TopicPartition
from strom.common.time import SYSTEM_TIME, Time
from strom.server.add_partitions_to_txn_manager import AddPartitionsToTxnManager
from strom.server.admin_manager import AdminManager, StandaloneAdminManager
from strom.server.broker_config import BrokerConfig
from strom.server.broker_metrics import BrokerMetrics
from strom.server.client_metrics_manager import ClientMetricsConfigError, ClientMetricsManager
from strom.server.client_metrics_store import FileClientMetricsStore, ZkClientMetricsStore
from strom.server.controller.kafka_controller import KafkaController
from strom.server.controller_channel import ControllerChannel
from strom.server.coordinator.group_coordinator import GroupCoordinator
from strom.server.coordinator.offset_config import GROUP_METADATA_TOPIC_NAME
from strom.server.coordinator.offsets_log import create_group_coordinator
from strom.server.coordinator.transaction_coordinator import (
    TransactionCoordinator,
    create_transaction_coordinator,
)
from strom.server.coordinator.transaction_metadata import TRANSACTION_STATE_TOPIC_NAME
from strom.server.dynamic_broker_config import (
    CLEANER_CONFIGS,
    DEFAULT_ENTITY,
    LOG_CONFIGS,
    PRODUCER_STATE_CONFIGS,
    REPLICATION_QUOTA_CONFIGS,
    SOCKET_CONFIGS,
    DynamicBrokerConfig,
    FileDynamicConfigStore,
    ZkDynamicConfigStore,
    listener_ssl_config,
)
from strom.server.fetch_session import FetchManager, FetchSessionCache
from strom.server.kafka_apis import ApiCollaborators, KafkaApis
from strom.server.meta_properties import check_meta_properties
from strom.server.metadata_cache import BrokerInfo, MetadataCache, StandaloneMetadata
from strom.server.producer_id_manager import ProducerIdManager
from strom.server.replica_fetcher import ReplicaFetcherManager
from strom.server.replica_manager import ReplicaManager
from strom.server.security.authorizer import create_authorizer
from strom.server.security.channel_builders import build_socket_servers
from strom.server.security.client_quotas import ClientQuotaManagers
from strom.server.security.credentials import default_credential_store
from strom.server.security.inter_broker import InterBrokerSecurity
from strom.server.security.quota_store import FileQuotaStore, ZkQuotaStore
from strom.server.security.zk_acl_store import ZkAclStore
from strom.server.security.zk_credentials import ZkCredentialStore
from strom.server.socket_server import ConnectionContext, SocketServer
from strom.server.zk.config_change import ConfigChangeWatcher
from strom.server.zk.kafka_zk_client import KafkaZkClient
from strom.server.zk.znodes import BrokerRegistration, EndPoint, desanitize
from strom.server.zk_admin_manager import ZkAdminManager
from strom.server.zk_metadata_cache import ZkMetadataCache
from strom.storage.fs import raise_open_file_limit
from strom.storage.log_cleaner import CleanerConfig
from strom.storage.log_dir_failure_channel import LogDirFailureChannel
from strom.storage.log_manager import LogManager

__all__ = ["BrokerServer", "pid_file_path"]

log = logging.getLogger("strom.server")
_SWITCH_INTERVAL_S = 0.0005


class BrokerServer:
    """One strom broker. Create, ``await start()``, then ``await stop()``; not thread-safe (event loop only)."""

    def __init__(self, config: BrokerConfig, time: Time = SYSTEM_TIME) -> None:
        self.config = config
        self.time = time
        self.node_id = config.node_id
        self.log_dirs = [Path(d).absolute() for d in config.log_dirs]
        # server.properties with the dynamic broker configs over it (read at start); ConfigError on a bad value
        self.dynamic_config = DynamicBrokerConfig(config)
        self.default_log_config = self.dynamic_config.log_config
        self.cleaner_config = self.dynamic_config.cleaner_config
        self.metadata: MetadataCache | None = None
        self.log_manager: LogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.txn_coordinator: TransactionCoordinator | None = None
        self.admin: AdminManager | None = None
        self.apis: KafkaApis | None = None
        self.fetch_manager: FetchManager | None = None  # fetch sessions (KIP-227), built at start
        self.zk: KafkaZkClient | None = None
        self.controller: KafkaController | None = None
        self.controller_channel: ControllerChannel | None = None
        self.inter_broker_security: InterBrokerSecurity | None = None
        self._config_watch: ConfigChangeWatcher | None = None
        self.credentials: Any = None
        self._acl_store: ZkAclStore | None = None
        self.quotas = ClientQuotaManagers(config, time)
        self.client_metrics: ClientMetricsManager | None = None  # KIP-714 subscriptions, built at start
        self.log_dir_failures = LogDirFailureChannel()  # log dirs that failed (KIP-112)
        self.halt: Callable[[int], None] = os._exit  # all log dirs failed (Kafka's Exit.halt)
        self.socket_servers: list[SocketServer] = []
        self._ready = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.bound_ports: list[int] = []
        self.advertised = config.advertised_listeners
        self._stopped = asyncio.Event()
        try:
            self.metrics = BrokerMetrics.from_config(config, time)
        except (ValueError, TypeError, ImportError) as e:
            raise ConfigError(str(e)) from None

    # -- lifecycle --------------------------------------------------------------------------------------------
    async def start(self) -> None:
        c = self.config
        loop = asyncio.get_running_loop()
        # A bad inter-broker setting stops the start here. A standalone broker has no peer to connect to, so its
        # configs are not held to it (Kafka, always clustered, refuses e.g. a SASL inter-broker listener without a
        # usable sasl.mechanism.inter.broker.protocol).
        inter_broker = InterBrokerSecurity.from_config(c) if c["zookeeper.connect"] else None
        raise_open_file_limit()
        # Disk work runs in threads (the log flusher, the cleaner, executor jobs) that need the GIL back for a
        # moment after each fsync while the event loop thread is busy: with CPython's default 5 ms switch interval
        # every such handoff can wait 5 ms, which would hold every flush.messages ack that long. (The log cleaner's
        # record work runs in worker processes, so it does not compete for the GIL: strom/storage/cleaner_records.py.)
        sys.setswitchinterval(min(sys.getswitchinterval(), _SWITCH_INTERVAL_S))
        failures = self.log_dir_failures
        for d in self.log_dirs:
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as e:  # the dir goes offline; the broker starts while one dir is usable (KIP-112)
                failures.maybe_add_offline_log_dir(str(d), "cannot create the log dir", e)
        self.metrics.start_http()  # first: a taken metrics.prometheus.listener port stops the start here
        cluster_id = None
        if c["zookeeper.connect"]:
            self.zk = await loop.run_in_executor(None, self._connect_zookeeper)
            cluster_id = self.zk.get_or_create_cluster_id(c["cluster.id"])
            check_meta_properties([d for d in self.log_dirs if not failures.has_offline_log_dir(str(d))],
                                  cluster_id, self.node_id, on_io_error=lambda d, e: failures.maybe_add_offline_log_dir(
                                      str(d), "cannot read or write meta.properties", e))
        await self._load_dynamic_configs()
        c = self.dynamic_config.current
        if inter_broker is not None:  # a keystore set as a dynamic config counts from the start
            inter_broker.reload_ssl_context(c)
        self.inter_broker_security = inter_broker
        self.log_manager = LogManager(
            [str(d) for d in self.log_dirs],
            self.default_log_config,
            self.time,
            flush_check_ms=int(c["log.flush.scheduler.interval.ms"]),
            retention_check_ms=int(c["log.retention.check.interval.ms"]),
            cleaner_config=self.cleaner_config,
            failure_channel=failures,
        )
        # a standalone broker has no other replica to hand its partitions to: a full disk fails writes only
        self.log_manager.full_disk_goes_offline = self.zk is not None
        first = str(self.log_dirs[0])
        if self.zk is None and failures.has_offline_log_dir(first):
            # Its topic registry is there: starting without it would take every topic for deleted.
            self.log_manager.shutdown()
            raise KafkaStorageError(f"log dir {first} holds this standalone broker's topic registry and cannot be "
                                    f"used ({failures.reason(first)}); the broker does not start without it")
        await loop.run_in_executor(None, self.log_manager.load_logs)
        self.log_manager.startup()  # the log cleaner threads
        await self._bind_listeners()
        admin_kw = dict(num_partitions=int(c["num.partitions"]),
                        default_replication_factor=int(c["default.replication.factor"]),
                        auto_create_enable=bool(c["auto.create.topics.enable"]))
        if self.zk is None:
            metadata: MetadataCache = StandaloneMetadata(self.log_dirs[0], self.node_id, self._endpoints(),
                                                         c["broker.rack"])
            rm = self._replica_manager(metadata)
            rm.open_standalone()
            assert isinstance(metadata, StandaloneMetadata)
            self.admin = StandaloneAdminManager(metadata, rm, self.default_log_config, **admin_kw)
            producer_ids = ProducerIdManager(metadata.allocate_producer_id_block)
        else:
            assert cluster_id is not None
            zk = self.zk
            metadata = ZkMetadataCache(self.node_id, cluster_id, zk,
                                       BrokerInfo(self.node_id, self._endpoints(), c["broker.rack"]))
            rm = self._replica_manager(metadata)
            listener = self.inter_broker_listener
            self.controller = KafkaController(
                self.node_id, zk, self.time, inter_broker_listener=listener, security=inter_broker,
                unclean_leader_election=bool(c["unclean.leader.election.enable"]),
                auto_leader_rebalance=bool(c["auto.leader.rebalance.enable"]),
                imbalance_check_interval_s=int(c["leader.imbalance.check.interval.seconds"]),
                imbalance_percentage=int(c["leader.imbalance.per.broker.percentage"]),
                socket_timeout_ms=int(c["controller.socket.timeout.ms"]))
            self.controller_channel = ControllerChannel(self.node_id, metadata, listener, self.controller,
                                                        timeout_s=int(c["replica.socket.timeout.ms"]) / 1000,
                                                        security=inter_broker)
            rm.set_alter_partition(self.controller_channel.alter_partition)
            rm.fetcher_manager = ReplicaFetcherManager(
                self.node_id, rm, metadata, self.time, listener=listener,
                wait_max_ms=int(c["replica.fetch.wait.max.ms"]), min_bytes=int(c["replica.fetch.min.bytes"]),
                max_bytes=int(c["replica.fetch.max.bytes"]),
                response_max_bytes=int(c["replica.fetch.response.max.bytes"]),
                backoff_ms=int(c["replica.fetch.backoff.ms"]), socket_timeout_ms=int(c["replica.socket.timeout.ms"]),
                security=inter_broker)
            self.admin = ZkAdminManager(metadata, zk, self.default_log_config, self._apply_topic_config, **admin_kw)
            producer_ids = ProducerIdManager(
                lambda size: zk.allocate_producer_id_block(self.node_id, size).first_producer_id, blocking=True)
        self.metadata = metadata
        self.group_coordinator = create_group_coordinator(c, self.time, metadata, rm)
        await self.group_coordinator.start(load_all=self.zk is None)
        self.txn_coordinator = create_transaction_coordinator(c, self.time, metadata, rm, self.group_coordinator,
                                                              producer_ids, self.inter_broker_listener, inter_broker)
        await self.txn_coordinator.start(load_all=self.zk is None)
        rm.txn_verifier = AddPartitionsToTxnManager(self.node_id, metadata, self.txn_coordinator,
                                                    self.inter_broker_listener, security=inter_broker)
        rm.on_leadership_change = self._on_leadership_change
        self.fetch_manager = FetchManager(self.time, FetchSessionCache(
            int(c["max.incremental.fetch.session.cache.slots"]), int(c["min.incremental.fetch.session.eviction.ms"])))
        self.apis = KafkaApis(ApiCollaborators(
            config=c, time=self.time, node_id=self.node_id, metadata=metadata, replica_manager=rm, admin=self.admin,
            group_coordinator=self.group_coordinator, producer_ids=producer_ids,
            dynamic_config=self.dynamic_config, controller=self.controller,
            authorizer=self._authorizer(), credentials=self.credentials, txn_coordinator=self.txn_coordinator,
            metrics=self.metrics, quotas=await self._client_quotas(), fetch_manager=self.fetch_manager,
            client_metrics=await self._client_metrics()))
        failures.add_listener(lambda d: loop.call_soon_threadsafe(self._on_log_dir_failure, d))
        for d in self.log_manager.offline_log_dirs:  # failed while loading, before the listener: nothing to move
            log.error("log dir %s is offline: %s", d, failures.reason(d))
        self.metrics.add_replica_manager(rm)
        self.metrics.add_log_manager(self.log_manager)
        self.metrics.add_fetch_session_cache(self.fetch_manager.cache)
        self.metrics.add_controller(self.controller)
        self.metrics.add_group_coordinator(self.group_coordinator)
        self.group_coordinator.manager.on_offsets_stored = self.metrics.offset_commits.record
        self.metrics.add_socket_servers(self.socket_servers)
        self.metrics.start_event_loop_probe()
        self._add_reconfigurables()
        self._tasks.append(loop.create_task(self._housekeeping()))
        self._ready.set()
        if self.zk is not None:
            await self._join_cluster()
        log.info("strom broker %d started, listening on %s, data in %s%s", self.node_id,
                 ", ".join(f"{a.host}:{a.port}" for a in self.advertised), ", ".join(map(str, self.log_dirs)),
                 f", cluster {cluster_id} via ZooKeeper {c['zookeeper.connect']}" if self.zk is not None else "")

    async def _load_dynamic_configs(self) -> None:
        """The dynamic broker configs (ZooKeeper's /config/brokers, or the data dir's file) over server.properties,
        before anything is built from them (Kafka's ``DynamicBrokerConfig.initialize``)."""
        dc = self.dynamic_config
        store = ZkDynamicConfigStore(self.zk) if self.zk is not None else FileDynamicConfigStore(self.log_dirs[0])
        dc.store = store
        entities = (DEFAULT_ENTITY, str(self.node_id))
        stored = await asyncio.get_running_loop().run_in_executor(None, lambda: [store.read(e) for e in entities])
        for entity, props in zip(entities, stored, strict=True):
            dc.update(entity, props)
        self.default_log_config, self.cleaner_config = dc.log_config, dc.cleaner_config

    def _add_reconfigurables(self) -> None:
        """What follows a dynamic broker config change (Kafka's ``addReconfigurables``)."""
        dc = self.dynamic_config

        def log_defaults(d: DynamicBrokerConfig, keys: frozenset[str]) -> None:
            self.default_log_config = d.log_config
            if self.admin is not None:
                self.admin.default_log_config = d.log_config
            if self.replica_manager is not None:
                self.replica_manager.default_log_config_changed(d.log_config)
            if self.controller is not None and "unclean.leader.election.enable" in keys:
                self.controller.set_unclean_leader_election(bool(d.current["unclean.leader.election.enable"]))

        def cleaner(d: DynamicBrokerConfig, _keys: frozenset[str]) -> None:
            self.cleaner_config = d.cleaner_config
            if self.log_manager is not None:  # joins the cleaner threads: not on the event loop
                self._tasks.append(asyncio.get_running_loop().create_task(asyncio.to_thread(
                    self._cleaner_reconfigure, d.cleaner_config)))

        def connections(d: DynamicBrokerConfig, _keys: frozenset[str]) -> None:
            if self.socket_servers:
                self.socket_servers[0].quotas.reconfigure(d.current)  # one ConnectionQuotas for every listener

        def tls(d: DynamicBrokerConfig, keys: frozenset[str]) -> None:
            listeners = {listener_ssl_config(k) for k in keys}
            for server in self.socket_servers:
                if server.listener.name in listeners and server.listener.uses_ssl:
                    try:
                        server.set_ssl_context(d.check_ssl(d.current, server.listener.name))
                        d.remember_keystore(server.listener.name)
                        log.info("listener %s: new keystore / truststore loaded", server.listener.name)
                        ib = self.inter_broker_security
                        if server.listener.name == self.inter_broker_listener and ib is not None \
                                and ib.reload_ssl_context(d.current):
                            log.info("inter-broker connections made from now on use the new keystore")
                    except ConfigError as e:
                        log.error("listener %s keeps its TLS context: %s", server.listener.name, e)

        dc.add_reconfigurable(LOG_CONFIGS, log_defaults)
        dc.add_reconfigurable(lambda key: listener_ssl_config(key) is not None, tls)
        dc.add_reconfigurable(CLEANER_CONFIGS, cleaner)
        dc.add_reconfigurable(SOCKET_CONFIGS, connections)
        dc.add_reconfigurable(REPLICATION_QUOTA_CONFIGS, self._update_replication_quotas)
        dc.add_reconfigurable(PRODUCER_STATE_CONFIGS, self._update_producer_state_configs)

    def _update_producer_state_configs(self, d: DynamicBrokerConfig, _keys: frozenset[str]) -> None:
        if self.replica_manager is not None:
            self.replica_manager.transaction_verification_enabled = bool(
                d.current["transaction.partition.verification.enable"])

    def _update_replication_quotas(self, d: DynamicBrokerConfig, _keys: frozenset[str]) -> None:
        if self.replica_manager is not None:
            self.replica_manager.leader_quota.update_quota(float(d.current["leader.replication.throttled.rate"]))
            self.replica_manager.follower_quota.update_quota(float(d.current["follower.replication.throttled.rate"]))
            self.replica_manager.alter_log_dirs_quota.update_quota(
                float(d.current["replica.alter.log.dirs.io.max.bytes.per.second"]))

    def _cleaner_reconfigure(self, config: CleanerConfig) -> None:
        assert self.log_manager is not None
        self.log_manager.cleaner.reconfigure(config)

    def _authorizer(self) -> Any:
        """authorizer.class.name: ACLs in the data dir, or in ZooKeeper (shared by the cluster, reloaded on every
        broker when they change)."""
        if self.zk is None:
            return create_authorizer(self.config, self.log_dirs[0])
        self._acl_store = ZkAclStore(self.zk)
        authorizer = create_authorizer(self.config, self.log_dirs[0], store=self._acl_store)
        if authorizer is not None:
            self._acl_store.start(authorizer.reload)
        return authorizer

    async def _client_metrics(self) -> ClientMetricsManager:
        """Client metrics subscriptions (KIP-714) from ``<data dir>/client-metrics.json`` or ZooKeeper's
        ``/config/client-metrics``; pushed metrics go to the Prometheus endpoint and ``metric.reporters``."""
        cm = self.client_metrics = ClientMetricsManager(self.metrics.telemetry_receivers(),
                                                        int(self.config["telemetry.max.bytes"]), self.time)
        cm.store = ZkClientMetricsStore(self.zk) if self.zk is not None else FileClientMetricsStore(self.log_dirs[0])
        cm.load_subscriptions(await asyncio.get_running_loop().run_in_executor(None, cm.store.subscriptions))
        self.metrics.add_client_metrics(cm)
        return cm

    def _on_client_metrics_notification(self, name: str) -> None:
        """A ``client-metrics/<name>`` change notification (kazoo's thread): read it, apply it on the event loop."""
        cm = self.client_metrics
        loop = self._config_watch.loop if self._config_watch is not None else None
        if cm is None or cm.store is None or loop is None or loop.is_closed():
            return
        try:
            configs = cm.store.read(desanitize(name))
        except Exception as e:  # ZooKeeper unreachable: a restart reads it again
            log.error("cannot read client metrics subscription %s: %s", name, e)
            return

        def apply() -> None:
            try:
                cm.update_subscription(desanitize(name), configs)
            except ClientMetricsConfigError as e:
                log.warning("skipping client metrics subscription %s: %s", name, e)
        loop.call_soon_threadsafe(apply)

    async def _client_quotas(self) -> ClientQuotaManagers:
        """Client quotas from ``<data dir>/client-quotas.json``, or from ZooKeeper's ``/config`` (every broker
        applies a change when it sees the notification)."""
        if self.zk is None:
            self.quotas.store = FileQuotaStore(self.log_dirs[0])
        else:
            self.quotas.store = ZkQuotaStore(self.zk, asyncio.get_running_loop(), self.quotas.set_entity)
        self.quotas.load(await asyncio.get_running_loop().run_in_executor(None, self.quotas.store.entities))
        return self.quotas

    def _replica_manager(self, metadata: MetadataCache) -> ReplicaManager:
        assert self.log_manager is not None
        self.replica_manager = ReplicaManager(
            self.node_id, self.log_manager, metadata, self.time, self.default_log_config,
            replica_lag_time_max_ms=int(self.config["replica.lag.time.max.ms"]), metrics=self.metrics,
            replication_quota_window=(int(self.config["replication.quota.window.num"]),
                                      int(self.config["replication.quota.window.size.seconds"])))
        self._update_replication_quotas(self.dynamic_config, frozenset())
        self._update_producer_state_configs(self.dynamic_config, frozenset())
        self.replica_manager.rack_aware_selector = str(self.config["replica.selector.class"] or "").endswith(
            "RackAwareReplicaSelector")
        return self.replica_manager

    @property
    def inter_broker_listener(self) -> str:
        return self.config.inter_broker_listener_name

    # -- cluster mode -----------------------------------------------------------------------------------------
    def _connect_zookeeper(self) -> KafkaZkClient:
        c = self.config
        session = int(c["zookeeper.session.timeout.ms"])
        conn = c["zookeeper.connection.timeout.ms"]
        zk = KafkaZkClient.connect(c["zookeeper.connect"], session, int(conn) if conn is not None else None)
        zk.create_top_level_paths()
        return zk

    def _registration(self) -> BrokerRegistration:
        return BrokerRegistration(self.node_id, tuple(EndPoint(a.host, a.port, a.name, a.security_protocol)
                                                      for a in self.advertised), self.config["broker.rack"])

    async def _join_cluster(self) -> None:
        """Register in ZooKeeper (ephemeral /brokers/ids/<id>), watch config changes, run for controller."""
        assert self.zk is not None and self.controller is not None and self.controller_channel is not None
        zk, loop = self.zk, asyncio.get_running_loop()
        wait_ms = int(self.config["zookeeper.session.timeout.ms"]) + 2000
        # A killed broker's registration lingers until its session expires: wait that long before giving up.
        epoch = await loop.run_in_executor(None, zk.register_broker, self._registration(), wait_ms)
        self.controller_channel.broker_epoch = epoch
        assert isinstance(self.metadata, ZkMetadataCache)
        metadata = self.metadata
        metadata.set_broker_epoch(epoch)
        self.controller.on_controller_change = metadata.set_controller_id
        credentials = self.credentials
        self._config_watch = ConfigChangeWatcher(
            zk, loop, self._apply_topic_config, on_broker_change=self._on_broker_config_notification,
            on_user_change=credentials.refresh if isinstance(credentials, ZkCredentialStore) else None,
            on_quota_change=self.quotas.store.on_notification,
            on_client_metrics_change=self._on_client_metrics_notification)
        self._config_watch.start()
        # A quota or broker config changed between the first read and the watch is in ZooKeeper by now: read
        # them once more.
        self.quotas.load(await loop.run_in_executor(None, self.quotas.store.entities))
        if self.client_metrics is not None and self.client_metrics.store is not None:
            self.client_metrics.load_subscriptions(
                await loop.run_in_executor(None, self.client_metrics.store.subscriptions))
        await self._load_dynamic_configs()

        def after_new_session() -> None:
            # A new ZooKeeper session (the old one expired): register again, then run for controller again.
            try:
                e = zk.register_broker(self._registration(), wait_ms)
                if self.controller_channel is not None:
                    self.controller_channel.broker_epoch = e
                loop.call_soon_threadsafe(metadata.set_broker_epoch, e)
            except Exception:
                log.exception("cannot re-register broker %d after a new ZooKeeper session", self.node_id)
            if self.controller is not None:
                self.controller._enqueue("reelect")

        zk.register_state_change_handler("broker", after_new_session)
        await self.controller.startup()

    def _on_broker_config_notification(self, entity: str) -> None:
        """A ``brokers/<id>`` or ``brokers/<default>`` config change (kazoo's thread): read it, apply it on the
        event loop."""
        name = DEFAULT_ENTITY if entity == "<default>" else entity
        if name not in (DEFAULT_ENTITY, str(self.node_id)) or self.dynamic_config.store is None:
            return
        try:
            props = self.dynamic_config.store.read(name)
        except Exception as e:  # ZooKeeper unreachable: the next notification (or restart) reads it again
            log.error("cannot read the dynamic config of %s: %s", entity, e)
            return
        loop = self._config_watch.loop if self._config_watch is not None else None
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.dynamic_config.update, name, props)

    def _apply_topic_config(self, topic: str, configs: dict[str, str]) -> None:
        if isinstance(self.metadata, ZkMetadataCache):
            self.metadata.set_topic_configs(topic, configs)
        if self.controller is not None and configs.get("unclean.leader.election.enable", "").lower() == "true":
            self.controller.topic_unclean_leader_election_enabled(topic)
        if self.replica_manager is not None and self.metadata is not None and topic in self.metadata:
            self.replica_manager.topic_config_changed(topic)

    def _on_leadership_change(self, leaders: list[TopicPartition], followers: list[TopicPartition]) -> None:
        tc = self.txn_coordinator
        if tc is not None:
            for tp in leaders:
                if tp.topic == TRANSACTION_STATE_TOPIC_NAME:
                    tc.on_election(tp.partition)
            for tp in followers:
                if tp.topic == TRANSACTION_STATE_TOPIC_NAME:
                    tc.on_resignation(tp.partition)
        gc = self.group_coordinator
        if gc is None:
            return
        for tp in leaders:
            if tp.topic == GROUP_METADATA_TOPIC_NAME:
                gc.on_election(tp.partition)
        for tp in followers:
            if tp.topic == GROUP_METADATA_TOPIC_NAME:
                gc.on_resignation(tp.partition)

    def _on_log_dir_failure(self, log_dir: str) -> None:
        """A log dir failed (event loop): its partitions go offline and the controller hears of it; with no dir
        left the broker halts (Kafka's ``LogDirFailureHandler``)."""
        lm, rm = self.log_manager, self.replica_manager
        if lm is None or rm is None or self._stopped.is_set():
            return
        rm.handle_log_dir_failure(log_dir)
        if not lm.live_log_dirs:
            log.critical("Shutdown broker because all log dirs in %s have failed",
                         ", ".join(map(str, self.log_dirs)))
            logging.shutdown()
            self.halt(1)
            return
        if self.zk is not None:
            zk, node_id = self.zk, self.node_id
            self._tasks.append(asyncio.get_running_loop().create_task(
                asyncio.to_thread(zk.propagate_log_dir_event, node_id)))

    async def _bind_listeners(self) -> None:
        """Start a socket server per listener (TLS, SASL, quotas, idle expiry); requests wait for ``_ready``.

        Port 0 means "pick one": what was bound is advertised (tests start brokers this way)."""

        async def dispatch(conn: ConnectionContext, frame: memoryview) -> bytes | bytearray | None:
            if self.apis is None:
                await self._ready.wait()
            assert self.apis is not None
            return await self.apis.handle(conn, frame, conn.listener_name)

        if self.zk is not None:
            self.credentials = ZkCredentialStore(self.zk)  # SCRAM users live in the cluster's metadata
        else:
            self.credentials = default_credential_store(self.config, self.log_dirs[0])
        self.socket_servers = build_socket_servers(self.dynamic_config.current, dispatch, time=self.time,
                                                   data_dir=self.log_dirs[0], credentials=self.credentials,
                                                   connection_rate=self.quotas.connection_rate)
        for server in self.socket_servers:
            await server.start()
            self.bound_ports.append(server.bound_port or 0)
            if server.listener.uses_ssl:  # a new keystore must keep this certificate's identity
                self.dynamic_config.remember_keystore(server.listener.name)
        bound = {s.listener.name: s.bound_port for s in self.socket_servers}
        self.advertised = [dataclasses.replace(a, port=bound.get(a.name, a.port)) if a.port == 0 else a
                           for a in self.advertised]

    def _endpoints(self) -> dict[str, tuple[str, int]]:
        return {a.name: (a.host, a.port) for a in self.advertised}

    async def stop(self) -> None:
        """Controlled shutdown (cluster), stop accepting, finish in-flight requests, flush and close the logs."""
        c = self.config
        if self.controller_channel is not None and c["controlled.shutdown.enable"]:
            moved = await self.controller_channel.controlled_shutdown(int(c["controlled.shutdown.max.retries"]),
                                                                      int(c["controlled.shutdown.retry.backoff.ms"]))
            if not moved:
                log.warning("controlled shutdown did not complete; shutting down anyway")
        if self._config_watch is not None:
            self._config_watch.stop()
        if self._acl_store is not None:
            self._acl_store.stop()
        if self.controller is not None:
            await self.controller.shutdown()
        for server in self.socket_servers:
            server.close_listening()
        if self.replica_manager is not None:
            # Parked acks=all produces and long-poll fetches answer now (NOT_LEADER_OR_FOLLOWER / what is there)
            # instead of holding the connection drain until their timeouts: leadership has moved away.
            self.replica_manager.complete_delayed_operations()
        if self.group_coordinator is not None:
            self.group_coordinator.shutdown()  # answers parked JoinGroup/SyncGroup before the drain
        if self.txn_coordinator is not None:
            await self.txn_coordinator.shutdown()
        await asyncio.gather(*(server.stop() for server in self.socket_servers), return_exceptions=True)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.replica_manager is not None:
            self.replica_manager.shutdown()
            if self.replica_manager.txn_verifier is not None:
                self.replica_manager.txn_verifier.close()
        if self.controller_channel is not None:
            self.controller_channel.close()
        if self.log_manager is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.log_manager.shutdown)
        if self.zk is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.zk.close)
        self.metrics.close()
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
