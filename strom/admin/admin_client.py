"""The admin client: manage topics, configs, consumer groups, offsets and records.

Kafka counterpart: ``org.apache.kafka.clients.admin.Admin`` / ``KafkaAdminClient`` (3.x). Every method returns at
once with futures — one per resource (topic, config resource, group, partition) — that complete on the client's
I/O thread (``kafka-admin-client-thread | <client.id>``), which owns the one :class:`NetworkClient` (with
ApiVersions negotiation) and fetches cluster metadata through :class:`AdminMetadataManager`. Topic creation,
deletion and partition changes go to the controller; group operations to the group coordinator found with
FindCoordinator; offsets and record deletion to the partition leaders; the rest to the least loaded broker.
Failures are the broker's error classes (``strom.common.error_codes``) carrying the broker's message,
:class:`KafkaTimeoutError` when ``timeout_ms`` (default ``default.api.timeout.ms``) passes, or
:class:`ConfigError` for a bad configuration at construction.

Usage::

    with AdminClient({"bootstrap.servers": "localhost:9092"}) as admin:
        admin.create_topics([NewTopic("sanguo", 3, 1)]).all().result()
        print(admin.describe_topics(["sanguo"])["sanguo"].result().partitions)

Thread-safety: thread-safe; any thread may call any method. ``close`` waits for the calls in progress (up to its
timeout) and fails the rest.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from datetime import timedelta
from typing import Any

from strom.admin import acls as _acls
from strom.admin import client_quotas as _quotas
from strom.admin import cluster as _cluster
from strom.admin import configs as _configs
from strom.admin import elections as _elections
from strom.admin import groups as _groups
from strom.admin import log_dirs as _log_dirs
from strom.admin import reassignments as _reassignments
from strom.admin import records as _records
from strom.admin import scram as _scram
from strom.admin import topics as _topics
from strom.admin import transactions as _transactions
from strom.admin.config import AdminClientConfig
from strom.admin.metadata_manager import AdminMetadataManager
from strom.admin.models import (
    AlterConfigOp,
    Config,
    ConfigResource,
    ConsumerGroupDescription,
    ConsumerGroupState,
    CreatedTopic,
    DeletedRecords,
    ElectionType,
    ListOffsetsResultInfo,
    LogDirDescription,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    RecordsToDelete,
    TopicDescription,
    TopicPartitionReplica,
)
from strom.admin.results import (
    DescribeClusterResult,
    ElectLeadersResult,
    KeyedResult,
    ListConsumerGroupOffsetsResult,
    ListConsumerGroupsResult,
    ListTopicsResult,
)
from strom.admin.runnable import AdminClientRunnable
from strom.common.acl import AclBinding, AclBindingFilter
from strom.common.errors import IllegalStateError, KafkaError
from strom.common.structs import OffsetAndMetadata, TopicPartition
from strom.common.time import SYSTEM_TIME, Time
from strom.config.common_client_configs import parse_bootstrap_servers
from strom.metrics import KafkaMetric, MetricName
from strom.metrics.client_metrics import new_client_metrics
from strom.network.api_versions import ApiVersions, NodeApiVersions
from strom.network.channel_builder import ClientChannelBuilder
from strom.network.kafka_client import KafkaClient
from strom.network.network_client import NetworkClient
from strom.network.selector import Selector
from strom.network.telemetry_sender import ClientTelemetrySender

__all__ = ["AdminClient", "KafkaAdminClient", "NETWORK_THREAD_PREFIX"]

log = logging.getLogger(__name__)
NETWORK_THREAD_PREFIX = "kafka-admin-client-thread"
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def _ms(timeout: float | timedelta | None) -> int | None:
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        return int(timeout.total_seconds() * 1000)
    return int(timeout * 1000)


class AdminClient:
    """Kafka's ``Admin`` (``KafkaAdminClient``). Thread-safe; use as a context manager to ``close()``."""

    def __init__(self, config: Mapping[str, Any] | AdminClientConfig | None = None, *, time: Time | None = None,
                 client: KafkaClient | None = None, **kwargs: Any) -> None:
        # Configuration errors are raised as they are (before anything is built), as in Kafka.
        if isinstance(config, AdminClientConfig) and not kwargs:
            cfg = config
        else:
            base = dict(config.originals) if isinstance(config, AdminClientConfig) else dict(config or {})
            cfg = AdminClientConfig(base, **kwargs)
        self.config = cfg
        values = cfg.values
        self.client_id: str = values["client.id"]
        self._time = time or SYSTEM_TIME
        self._log_context = f"[AdminClient clientId={self.client_id}] "
        self._closed = False
        self._thread: threading.Thread | None = None
        self._close_lock = threading.Lock()
        try:
            self._metrics = new_client_metrics(values, self.client_id, self._time, "admin.client")
            self._metadata = AdminMetadataManager(values["retry.backoff.ms"], values["metadata.max.age.ms"])
            self._metadata.bootstrap(parse_bootstrap_servers(values["bootstrap.servers"]))
            if client is not None and getattr(client, "metadata", "unset") is None:
                client.metadata = self._metadata  # a MockClient created without metadata: it reads our nodes
            self._client = client or self._new_network_client(values)
            self._runnable = AdminClientRunnable(
                self._client, self._metadata, self._time, values["request.timeout.ms"],
                values["default.api.timeout.ms"], values["retry.backoff.ms"], values["retry.backoff.max.ms"],
                values["retries"], self._log_context)
            name = f"{NETWORK_THREAD_PREFIX} | {self.client_id}"
            self._thread = threading.Thread(target=self._runnable.run, name=name, daemon=True)
            self._thread.start()
        except Exception as e:
            raise KafkaError("Failed to create new KafkaAdminClient") from e
        log.debug("%sKafka admin client initialized", self._log_context)

    def _new_network_client(self, values: Mapping[str, Any]) -> NetworkClient:
        selector = Selector(values["connections.max.idle.ms"], self._time, log_context=self._log_context,
                            metrics=self._metrics, metric_grp_prefix="admin-client",
                            channel_builder=ClientChannelBuilder.from_config(values))
        return NetworkClient(
            selector, self._metadata, self.client_id, 100, values["reconnect.backoff.ms"],
            values["reconnect.backoff.max.ms"], values["send.buffer.bytes"], values["receive.buffer.bytes"],
            values["request.timeout.ms"], values["socket.connection.setup.timeout.ms"],
            values["socket.connection.setup.timeout.max.ms"], self._time, True, ApiVersions(),
            log_context=self._log_context,
            telemetry=ClientTelemetrySender(self._metrics, self._time) if values["enable.metrics.push"] else None)

    # ------------------------------------------------------------------------------------------ topics

    def create_topics(self, new_topics: Iterable[NewTopic], *, validate_only: bool = False,
                      timeout_ms: int | None = None, retry_on_quota_violation: bool = True,
                      ) -> KeyedResult[str, CreatedTopic]:
        """Create topics; each future resolves to what the broker created (id, partitions, configs). Topics the
        broker refuses for the principal's ``controller_mutation_rate`` quota are sent again after the throttle
        time unless ``retry_on_quota_violation`` is False (then, or past the timeout, they fail with
        ``ThrottlingQuotaExceededError``, whose ``throttle_time_ms`` says how long to wait)."""
        return _topics.create_topics(self._runnable, list(new_topics), validate_only, timeout_ms,
                                     retry_on_quota_violation)

    def delete_topics(self, topics: Iterable[str], *, timeout_ms: int | None = None,
                      retry_on_quota_violation: bool = True) -> KeyedResult[str, None]:
        """Delete topics (``retry_on_quota_violation`` as for :meth:`create_topics`)."""
        return _topics.delete_topics(self._runnable, list(topics), timeout_ms, retry_on_quota_violation)

    def list_topics(self, *, list_internal: bool = False, timeout_ms: int | None = None) -> ListTopicsResult:
        return _topics.list_topics(self._runnable, list_internal, timeout_ms)

    def describe_topics(self, topics: Iterable[str], *, include_authorized_operations: bool = False,
                        timeout_ms: int | None = None) -> KeyedResult[str, TopicDescription]:
        return _topics.describe_topics(self._runnable, list(topics), include_authorized_operations, timeout_ms)

    def create_partitions(self, new_partitions: Mapping[str, NewPartitions | int], *, validate_only: bool = False,
                          timeout_ms: int | None = None, retry_on_quota_violation: bool = True,
                          ) -> KeyedResult[str, None]:
        """Grow topics to the given partition counts (Kafka refuses to shrink: INVALID_PARTITIONS;
        ``retry_on_quota_violation`` as for :meth:`create_topics`)."""
        wanted = {t: (p if isinstance(p, NewPartitions) else NewPartitions.increase_to(int(p)))
                  for t, p in new_partitions.items()}
        return _topics.create_partitions(self._runnable, wanted, validate_only, timeout_ms, retry_on_quota_violation)

    # ----------------------------------------------------------------------------------------- configs

    def describe_configs(self, resources: Iterable[ConfigResource], *, include_synonyms: bool = False,
                         include_documentation: bool = False,
                         timeout_ms: int | None = None) -> KeyedResult[ConfigResource, Config]:
        return _configs.describe_configs(self._runnable, list(resources), include_synonyms, include_documentation,
                                         timeout_ms)

    def incremental_alter_configs(self, configs: Mapping[ConfigResource, Iterable[AlterConfigOp]], *,
                                  validate_only: bool = False,
                                  timeout_ms: int | None = None) -> KeyedResult[ConfigResource, None]:
        return _configs.incremental_alter_configs(self._runnable, configs, validate_only, timeout_ms)

    def alter_configs(self, configs: Mapping[ConfigResource, Config | Mapping[str, str]], *,
                      validate_only: bool = False, timeout_ms: int | None = None) -> KeyedResult[ConfigResource, None]:
        """Kafka's deprecated whole-set ``alterConfigs``: keys not given go back to their defaults."""
        return _configs.alter_configs(self._runnable, configs, validate_only, timeout_ms)

    # ------------------------------------------------------------------------------------------ groups

    def list_consumer_groups(self, *, states: Iterable[ConsumerGroupState] | None = None,
                             timeout_ms: int | None = None) -> ListConsumerGroupsResult:
        return _groups.list_consumer_groups(self._runnable, states, timeout_ms)

    def describe_consumer_groups(self, group_ids: Iterable[str], *, include_authorized_operations: bool = False,
                                 timeout_ms: int | None = None) -> KeyedResult[str, ConsumerGroupDescription]:
        """An unknown group is described with state ``DEAD`` and no members (as brokers report it)."""
        return _groups.describe_consumer_groups(self._runnable, list(group_ids), include_authorized_operations,
                                                timeout_ms)

    def delete_consumer_groups(self, group_ids: Iterable[str], *,
                               timeout_ms: int | None = None) -> KeyedResult[str, None]:
        return _groups.delete_consumer_groups(self._runnable, list(group_ids), timeout_ms)

    def list_consumer_group_offsets(self, group_id: str | Mapping[str, Iterable[TopicPartition] | None], *,
                                    partitions: Iterable[TopicPartition] | None = None, require_stable: bool = False,
                                    timeout_ms: int | None = None) -> ListConsumerGroupOffsetsResult:
        """Committed offsets of one group (optionally only ``partitions``) or of several (``{group: partitions or
        None}``). A requested partition without a committed offset maps to ``None``."""
        specs = {group_id: partitions} if isinstance(group_id, str) else dict(group_id)
        return _groups.list_consumer_group_offsets(self._runnable, specs, require_stable, timeout_ms)

    def alter_consumer_group_offsets(self, group_id: str,
                                     offsets: Mapping[TopicPartition, OffsetAndMetadata | int], *,
                                     timeout_ms: int | None = None) -> KeyedResult[TopicPartition, None]:
        """Set committed offsets of an inactive group (the broker refuses while it has members)."""
        return _groups.alter_consumer_group_offsets(self._runnable, group_id, offsets, timeout_ms)

    def delete_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition], *,
                                      timeout_ms: int | None = None) -> KeyedResult[TopicPartition, None]:
        """Delete committed offsets of ``partitions`` (Kafka's ``deleteConsumerGroupOffsets``, KIP-496). Refused
        per partition with ``GroupSubscribedToTopicError`` while a member of the group consumes its topic, and for
        every partition with the group's error (e.g. ``GroupIdNotFoundError``)."""
        return _groups.delete_consumer_group_offsets(self._runnable, group_id, list(partitions), timeout_ms)

    # --------------------------------------------------------------------------------------- log dirs

    def describe_log_dirs(self, broker_ids: Iterable[int], *,
                          timeout_ms: int | None = None) -> KeyedResult[int, dict[str, LogDirDescription]]:
        """Each broker's log directories with the replicas in them (Kafka's ``describeLogDirs``): per broker id,
        ``{log dir: LogDirDescription}``. Needs DESCRIBE on the cluster (else ``ClusterAuthorizationFailedError``)."""
        return _log_dirs.describe_log_dirs(self._runnable, list(broker_ids), timeout_ms)

    def alter_replica_log_dirs(self, replica_dirs: Mapping[TopicPartitionReplica, str], *,
                               timeout_ms: int | None = None) -> KeyedResult[TopicPartitionReplica, None]:
        """Move replicas between their brokers' log dirs (Kafka's ``alterReplicaLogDirs``, KIP-113): the move
        runs in the background; ``describe_log_dirs`` shows the replica being copied as a future replica until it
        is done. Needs ALTER on the cluster."""
        return _log_dirs.alter_replica_log_dirs(self._runnable, replica_dirs, timeout_ms)

    # ---------------------------------------------------------------------------------------- records

    def list_offsets(self, topic_partition_offsets: Mapping[TopicPartition, OffsetSpec], *,
                     isolation_level: str | int = "read_uncommitted",
                     timeout_ms: int | None = None) -> KeyedResult[TopicPartition, ListOffsetsResultInfo]:
        level = isolation_level if isinstance(isolation_level, int) else (
            READ_COMMITTED if str(isolation_level).lower() == "read_committed" else READ_UNCOMMITTED)
        return _records.list_offsets(self._runnable, topic_partition_offsets, level, timeout_ms)

    def delete_records(self, records_to_delete: Mapping[TopicPartition, RecordsToDelete | int], *,
                       timeout_ms: int | None = None) -> KeyedResult[TopicPartition, DeletedRecords]:
        """Advance each partition's log start offset to the given offset (-1 = the high watermark)."""
        return _records.delete_records(self._runnable, records_to_delete, timeout_ms)

    # ----------------------------------------------------------------------------------- transactions

    def list_transactions(self, *, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          duration_ms: int = -1, timeout_ms: int | None = None,
                          ) -> Future[list[_transactions.TransactionListing]]:
        """Every broker's transactional ids (filtered by state name, producer id, and open for at least
        ``duration_ms``)."""
        return _transactions.list_transactions(self._runnable, states, producer_ids, duration_ms, timeout_ms)

    def describe_transactions(self, transactional_ids: Iterable[str], *, timeout_ms: int | None = None,
                              ) -> KeyedResult[str, _transactions.TransactionDescription]:
        return _transactions.describe_transactions(self._runnable, list(transactional_ids), timeout_ms)

    def describe_producers(self, partitions: Iterable[TopicPartition], *, timeout_ms: int | None = None,
                           ) -> KeyedResult[TopicPartition, list[_transactions.ProducerState]]:
        return _transactions.describe_producers(self._runnable, partitions, timeout_ms)

    def abort_transaction(self, spec: _transactions.AbortTransactionSpec, *, timeout_ms: int | None = None,
                          ) -> KeyedResult[TopicPartition, None]:
        """Write an ABORT marker for ``spec``'s producer to its partition (a hanging transaction, one its
        coordinator no longer completes)."""
        return _transactions.abort_transaction(self._runnable, spec, timeout_ms)

    # ---------------------------------------------------------------------------------------- cluster

    def describe_cluster(self, *, include_authorized_operations: bool = False,
                         timeout_ms: int | None = None) -> DescribeClusterResult:
        return _cluster.describe_cluster(self._runnable, include_authorized_operations, timeout_ms)

    def describe_broker_api_versions(self, broker_ids: Iterable[int], *,
                                     timeout_ms: int | None = None) -> KeyedResult[int, NodeApiVersions]:
        """The API versions each broker supports (what Kafka's kafka-broker-api-versions.sh prints; not part of
        Java's ``Admin``): one ApiVersions request per broker id, answered as a :class:`NodeApiVersions`."""
        return _cluster.describe_broker_api_versions(self._runnable, list(broker_ids), timeout_ms)

    # -------------------------------------------------------------------------------------------- ACLs

    def create_acls(self, bindings: Iterable[AclBinding], *,
                    timeout_ms: int | None = None) -> KeyedResult[AclBinding, None]:
        """Add ACL bindings (Kafka's ``createAcls``): one future per binding."""
        return _acls.create_acls(self._runnable, list(bindings), timeout_ms)

    def describe_acls(self, acl_filter: AclBindingFilter | None = None, *,
                      timeout_ms: int | None = None) -> Future[list[AclBinding]]:
        """The bindings matching ``acl_filter`` (default: all)."""
        return _acls.describe_acls(self._runnable, acl_filter or AclBindingFilter(), timeout_ms)

    def delete_acls(self, filters: Iterable[AclBindingFilter], *,
                    timeout_ms: int | None = None) -> KeyedResult[AclBindingFilter, list[AclBinding]]:
        """Remove the bindings each filter matches; per filter, a future of what it removed."""
        return _acls.delete_acls(self._runnable, filters, timeout_ms)

    def alter_partition_reassignments(self, reassignments: Mapping[TopicPartition, Sequence[int] | None], *,
                                      timeout_ms: int | None = None) -> KeyedResult[TopicPartition, None]:
        """Move partitions to new replica lists (Kafka's ``alterPartitionReassignments``, KIP-455); ``None``
        cancels a partition's ongoing reassignment. Each future completes once the controller accepted it."""
        return _reassignments.alter_partition_reassignments(self._runnable, reassignments, timeout_ms)

    def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None = None, *,
                                     timeout_ms: int | None = None,
                                     ) -> Future[dict[TopicPartition, _reassignments.PartitionReassignment]]:
        """Reassignments in progress (all, or of ``partitions``)."""
        return _reassignments.list_partition_reassignments(
            self._runnable, None if partitions is None else list(partitions), timeout_ms)

    def elect_leaders(self, election_type: ElectionType | int | str,
                      partitions: Iterable[TopicPartition] | None = None, *,
                      timeout_ms: int | None = None) -> ElectLeadersResult:
        """Ask the controller to elect leaders (Kafka's ``electLeaders``, KIP-460): ``PREFERRED`` gives each
        partition back to its first replica, ``UNCLEAN`` elects a leader for partitions without one from any live
        replica. ``partitions=None`` means every partition of the cluster."""
        if isinstance(election_type, str):
            try:
                election_type = ElectionType[election_type.upper()]
            except KeyError:
                raise ValueError(f"Unknown election type {election_type!r}: expected 'preferred' or "
                                 "'unclean'") from None
        return _elections.elect_leaders(self._runnable, ElectionType(election_type),
                                        None if partitions is None else list(partitions), timeout_ms)

    # --------------------------------------------------------------------------------- SCRAM users

    def alter_user_scram_credentials(
            self, alterations: Iterable[_scram.UserScramCredentialUpsertion | _scram.UserScramCredentialDeletion],
            *, timeout_ms: int | None = None) -> KeyedResult[str, None]:
        """Add, replace or delete users' SCRAM credentials (KIP-554); one future per user."""
        return _scram.alter_user_scram_credentials(self._runnable, alterations, timeout_ms)

    def describe_user_scram_credentials(self, users: list[str] | None = None, *, timeout_ms: int | None = None,
                                        ) -> Future[dict[str, list[_scram.ScramCredentialInfo]]]:
        """Mechanisms and iteration counts per user (all users when ``users`` is ``None``)."""
        return _scram.describe_user_scram_credentials(self._runnable, users, timeout_ms)

    # ---------------------------------------------------------------------------------- client quotas

    def alter_client_quotas(self, alterations: Iterable[_quotas.ClientQuotaAlteration], *,
                            validate_only: bool = False, timeout_ms: int | None = None,
                            ) -> KeyedResult[_quotas.ClientQuotaEntity, None]:
        """Set or remove produce / fetch byte-rate and request-percentage quotas (KIP-546); one future per
        entity."""
        return _quotas.alter_client_quotas(self._runnable, alterations, validate_only, timeout_ms)

    def describe_client_quotas(self, quota_filter: _quotas.ClientQuotaFilter | None = None, *,
                               timeout_ms: int | None = None,
                               ) -> Future[dict[_quotas.ClientQuotaEntity, dict[str, float]]]:
        """The quotas of the entities ``quota_filter`` matches (all when ``None``)."""
        return _quotas.describe_client_quotas(self._runnable, quota_filter or _quotas.ClientQuotaFilter.all(),
                                              timeout_ms)

    # ------------------------------------------------------------------------------------- life cycle

    def close(self, timeout: float | timedelta | None = None) -> None:
        """Stop: calls in progress may finish within ``timeout`` seconds (default: forever); the rest fail."""
        with self._close_lock:
            self._closed = True
        timeout_ms = _ms(timeout)
        telemetry = getattr(self._runnable.client, "telemetry", None)
        thread = self._thread
        if telemetry is not None and thread is not None and thread.is_alive():
            # KIP-714: the last push of the client's metrics, marked terminating, while the I/O thread runs
            started = time.monotonic()
            telemetry.initiate_close()
            limit = self._runnable.client.default_request_timeout_ms if timeout_ms is None else timeout_ms
            telemetry.wait_terminated(limit / 1000)
            if timeout_ms is not None:
                timeout_ms = max(0, timeout_ms - int((time.monotonic() - started) * 1000))
        self._runnable.initiate_close(2**62 if timeout_ms is None else timeout_ms)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._metrics.close()
        log.debug("%sKafka admin client closed.", self._log_context)

    def client_instance_id(self, timeout: float) -> uuid.UUID:
        """The id the cluster gave this client for its metrics (KIP-714, Java's ``clientInstanceId``): waits up to
        ``timeout`` seconds; :class:`IllegalStateError` when the client does not push metrics."""
        telemetry = getattr(self._runnable.client, "telemetry", None)
        if telemetry is None:
            raise IllegalStateError("Telemetry is not enabled. Set config enable.metrics.push to true.")
        return telemetry.client_instance_id(int(timeout * 1000))

    def metrics(self) -> dict[MetricName, KafkaMetric]:
        """The admin client's metrics by :class:`MetricName` (Kafka's ``metrics()``): ``admin-client-metrics``
        and ``admin-client-node-metrics`` (connections, bytes, requests, per-node request latency) and
        ``app-info``. Thread-safe."""
        return self._metrics.metrics()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"AdminClient(client_id={self.client_id!r})"


KafkaAdminClient = AdminClient
