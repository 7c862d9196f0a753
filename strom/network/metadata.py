"""Client-side cluster metadata: versioned snapshots, refresh scheduling and topic errors.

Kafka counterpart: ``org.apache.kafka.clients.Metadata`` (3.x) with ``MetadataCache``. The current
:class:`~strom.network.cluster.Cluster` is replaced wholesale by each successful update, which increments
``update_version`` by exactly one and wakes every thread waiting on the condition (SPEC §4.3-4.5, §18 items
23-31). Refresh scheduling: :meth:`Metadata.time_to_next_update` is 0 when an update was requested, else the
time until ``metadata.max.age.ms`` since the last successful refresh — in both cases at least
``retry.backoff.ms`` after the previous attempt. A response with no brokers is a failed update (no version
bump). Invalid and unauthorized topics are remembered and raised once to callers waiting for that topic
(:meth:`maybe_throw_exception_for_topic`); a fatal error (authentication) to every caller. Leader epochs:
partition metadata with an older leader epoch than already seen is ignored (stale broker).

Subclasses choose which topics to ask for (:meth:`new_metadata_request`, :meth:`retain_topic`); the
producer's is :class:`strom.producer.internals.producer_metadata.ProducerMetadata`.

Thread-safety: thread-safe; one re-entrant lock and condition. :meth:`fetch` is lock-free.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterable
from typing import Any, NamedTuple

from strom.common.error_codes import ErrorCode, InvalidTopicExceptionError, TopicAuthorizationFailedError
from strom.common.errors import IllegalStateError, error_class
from strom.common.structs import Node, TopicPartition
from strom.common.time import SYSTEM_TIME, Time
from strom.network.cluster import Cluster, PartitionInfo
from strom.protocol.messages import MetadataRequest
from strom.protocol.primitives import ZERO_UUID

__all__ = ["Metadata", "MetadataRequestAndVersion", "metadata_request"]

log = logging.getLogger(__name__)


class MetadataRequestAndVersion(NamedTuple):
    request: Any
    request_version: int
    is_partial_update: bool


def metadata_request(topics: Iterable[str] | None, allow_auto_topic_creation: bool = True) -> Any:
    """A MetadataRequest for ``topics`` (``None`` = all topics; empty = brokers only)."""
    return MetadataRequest(
        topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
        allow_auto_topic_creation=allow_auto_topic_creation)


class Metadata:
    """Kafka's ``Metadata``. Thread-safe."""

    def __init__(self, refresh_backoff_ms: int, metadata_expire_ms: int, time: Time = SYSTEM_TIME, *,
                 log_context: str = "", cluster_resource_listeners: Iterable[Any] = ()) -> None:
        self.refresh_backoff_ms = refresh_backoff_ms
        self.metadata_expire_ms = metadata_expire_ms
        self.time = time
        self.log_context = log_context
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._update_version = 0
        self._request_version = 0
        self._last_refresh_ms = 0
        self._last_successful_refresh_ms = 0
        self._attempts = 0
        self._fatal_exception: BaseException | None = None
        self._invalid_topics: set[str] = set()
        self._unauthorized_topics: set[str] = set()
        self._cluster = Cluster.empty()
        self._bootstrap_addresses: list[tuple[str, int]] = []
        self.can_rebootstrap = False  # metadata.recovery.strategy=rebootstrap (see bootstrap)
        self._need_full_update = False
        self._need_partial_update = False
        self._closed = False
        self._last_seen_leader_epochs: dict[TopicPartition, int] = {}
        self._listeners = list(cluster_resource_listeners)

    # --------------------------------------------------------------------------------------- reads

    def fetch(self) -> Cluster:
        """The current snapshot (lock-free)."""
        return self._cluster

    @property
    def update_version(self) -> int:
        return self._update_version

    @property
    def request_version(self) -> int:
        return self._request_version

    def last_successful_update(self) -> int:
        return self._last_successful_refresh_ms

    def is_closed(self) -> bool:
        return self._closed

    def topic_ids(self) -> dict[str, uuid.UUID]:
        return self._cluster.topic_ids()

    def last_seen_leader_epoch(self, tp: TopicPartition) -> int | None:
        return self._last_seen_leader_epochs.get(tp)

    def current_leader(self, tp: TopicPartition) -> tuple[Node | None, int | None]:
        info = self._cluster.partition(tp)
        if info is None:
            return None, self._last_seen_leader_epochs.get(tp)
        return info.leader, info.leader_epoch

    # ---------------------------------------------------------------------------------- scheduling

    def bootstrap(self, addresses: Iterable[tuple[str, int]], *, recovery_strategy: str = "none") -> None:
        """Seed the snapshot with the bootstrap servers (no network I/O) and ask for a full update.
        ``recovery_strategy`` is ``metadata.recovery.strategy``: with ``rebootstrap`` (KIP-899) the client goes
        back to these addresses when no broker it knows of can be reached (:meth:`rebootstrap`)."""
        with self._lock:
            self._bootstrap_addresses = list(addresses)
            self.can_rebootstrap = recovery_strategy.lower() == "rebootstrap"
            self._need_full_update = True
            self._update_version += 1
            self._cluster = Cluster.bootstrap(self._bootstrap_addresses)

    def rebootstrap(self) -> None:
        """Forget the brokers the metadata named and start again from the bootstrap servers (Kafka's
        ``Metadata.rebootstrap``): every broker this client knew of may be gone while the cluster lives on
        elsewhere, e.g. a metadata answer taken while the other brokers were down."""
        with self._lock:
            log.info("Rebootstrapping with %s", self._bootstrap_addresses)
            self._need_full_update = True
            self._update_version += 1
            self._cluster = Cluster.bootstrap(self._bootstrap_addresses)

    def request_update(self) -> int:
        """Ask for a full update at the next opportunity; returns the current update version."""
        with self._lock:
            self._need_full_update = True
            return self._update_version

    def request_update_for_new_topics(self) -> int:
        """Ask for a partial update (new topics) at once, skipping the refresh backoff."""
        with self._lock:
            self._last_refresh_ms = 0
            self._need_partial_update = True
            self._request_version += 1
            return self._update_version

    def update_requested(self) -> bool:
        return self._need_full_update or self._need_partial_update

    def time_to_allow_update(self, now_ms: int) -> int:
        return max(self._last_refresh_ms + self.refresh_backoff_ms - now_ms, 0)

    def time_to_next_update(self, now_ms: int) -> int:
        """0 when an update is due; never less than the refresh backoff after the last attempt."""
        with self._lock:
            if self._need_full_update or self._need_partial_update:
                time_to_expire = 0
            else:
                time_to_expire = max(self._last_successful_refresh_ms + self.metadata_expire_ms - now_ms, 0)
            return max(time_to_expire, self.time_to_allow_update(now_ms))

    def new_metadata_request_and_version(self, now_ms: int) -> MetadataRequestAndVersion:
        with self._lock:
            request = None
            is_partial = False
            if not self._need_full_update and self._last_successful_refresh_ms + self.metadata_expire_ms > now_ms:
                request = self.new_metadata_request_for_new_topics()
                is_partial = request is not None
            if request is None:
                request = self.new_metadata_request()
            return MetadataRequestAndVersion(request, self._request_version, is_partial)

    def new_metadata_request(self) -> Any:
        """The full request (base: all topics). Subclasses ask for their topics."""
        return metadata_request(None)

    def new_metadata_request_for_new_topics(self) -> Any:
        """A request for new topics only, or ``None`` if partial updates are not supported."""
        return None

    def retain_topic(self, topic: str, is_internal: bool, now_ms: int) -> bool:
        return True

    # -------------------------------------------------------------------------------------- updates

    def failed_update(self, now_ms: int) -> None:
        """A metadata request failed (or its response had no brokers): back off, no version bump."""
        with self._lock:
            self._last_refresh_ms = now_ms
            self._attempts += 1

    def fatal_error(self, exception: BaseException) -> None:
        with self._lock:
            self._fatal_exception = exception
            self._cond.notify_all()

    def update(self, request_version: int, response: Any, is_partial_update: bool, now_ms: int) -> None:
        """Install the snapshot described by a MetadataResponse and wake waiters."""
        if response is None:
            raise ValueError("Metadata response cannot be null")
        with self._lock:
            if self._closed:
                raise IllegalStateError("Update requested after metadata close")
            self._need_partial_update = request_version < self._request_version
            self._last_refresh_ms = now_ms
            self._attempts = 0
            self._update_version += 1
            if not is_partial_update:
                self._need_full_update = False
                self._last_successful_refresh_ms = now_ms
            previous_cluster_id = self._cluster.cluster_id
            self._cluster = self._handle_metadata_response(response, is_partial_update, now_ms)
            self._invalid_topics = set(self._cluster.invalid_topics)
            self._unauthorized_topics = set(self._cluster.unauthorized_topics)
            if self._invalid_topics:
                log.error("%sMetadata response reported invalid topics %s", self.log_context,
                          sorted(self._invalid_topics))
            if self._unauthorized_topics:
                log.error("%sTopic authorization failed for topics %s", self.log_context,
                          sorted(self._unauthorized_topics))
            for tp in [tp for tp in self._last_seen_leader_epochs if not self.retain_topic(tp.topic, False, now_ms)]:
                del self._last_seen_leader_epochs[tp]
            if previous_cluster_id != self._cluster.cluster_id:
                log.info("%sCluster ID: %s", self.log_context, self._cluster.cluster_id)
            for listener in self._listeners:
                listener(self._cluster)
            log.debug("%sUpdated cluster metadata updateVersion %d to %s", self.log_context, self._update_version,
                      self._cluster)
            self._cond.notify_all()

    def _handle_metadata_response(self, response: Any, is_partial_update: bool, now_ms: int) -> Cluster:
        nodes = {b.node_id: Node(b.node_id, b.host, b.port, b.rack) for b in response.brokers}
        topics_seen: set[str] = set()
        internal: set[str] = set()
        unauthorized: set[str] = set()
        invalid: set[str] = set()
        partitions: list[PartitionInfo] = []
        topic_ids: dict[str, uuid.UUID] = {}
        for topic in response.topics:
            name = topic.name
            if name is None:
                continue
            topics_seen.add(name)
            if topic.topic_id != ZERO_UUID:
                topic_ids[name] = topic.topic_id
            if not self.retain_topic(name, topic.is_internal, now_ms):
                continue
            if topic.is_internal:
                internal.add(name)
            if topic.error_code == ErrorCode.NONE:
                for p in topic.partitions:
                    info = self._partition_info(name, p, nodes)
                    if info is not None:
                        partitions.append(info)
                    if p.error_code and error_class(p.error_code).invalid_metadata:
                        log.debug("%sRequesting metadata update for partition %s-%d due to error %s",
                                  self.log_context, name, p.partition_index, error_class(p.error_code).name)
                        self._need_full_update = True
            else:
                cls = error_class(topic.error_code)
                if cls.invalid_metadata:
                    log.debug("%sRequesting metadata update for topic %s due to error %s", self.log_context, name,
                              cls.name)
                    self._need_full_update = True
                if topic.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION:
                    invalid.add(name)
                elif topic.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                    unauthorized.add(name)
        controller = nodes.get(getattr(response, "controller_id", -1))
        if is_partial_update:
            old = self._cluster
            for info in old.all_partitions():
                if info.topic not in topics_seen and self.retain_topic(info.topic, info.topic in old.internal_topics,
                                                                       now_ms):
                    leader = nodes.get(info.leader.node_id) if info.leader is not None else None
                    partitions.append(PartitionInfo(info.topic, info.partition, leader, info.replicas,
                                                    info.in_sync_replicas, info.offline_replicas, info.leader_epoch))
            for name, topic_id in old.topic_ids().items():
                if name not in topics_seen and self.retain_topic(name, False, now_ms):
                    topic_ids.setdefault(name, topic_id)
            keep = {t for t in old.unauthorized_topics if t not in topics_seen}
            unauthorized |= keep
            invalid |= {t for t in old.invalid_topics if t not in topics_seen}
            internal |= {t for t in old.internal_topics if t not in topics_seen}
        return Cluster(response.cluster_id, nodes.values(), partitions, unauthorized, invalid, internal,
                       controller, topic_ids)

    def _partition_info(self, topic: str, p: Any, nodes: dict[int, Node]) -> PartitionInfo | None:
        tp = TopicPartition(topic, p.partition_index)
        epoch = p.leader_epoch if p.leader_epoch is not None and p.leader_epoch >= 0 else None
        if epoch is not None:
            last = self._last_seen_leader_epochs.get(tp)
            if last is not None and epoch < last:
                log.debug("%sNot replacing existing epoch %d with new epoch %d for partition %s", self.log_context,
                          last, epoch, tp)
                return self._cluster.partition(tp)  # keep what we had (stale response)
            self._last_seen_leader_epochs[tp] = epoch
        leader = nodes.get(p.leader_id) if p.leader_id >= 0 else None

        def resolve(ids: Iterable[int]) -> tuple[Node, ...]:
            return tuple(nodes.get(i) or Node(i, "", -1) for i in ids)

        return PartitionInfo(topic, p.partition_index, leader, resolve(p.replica_nodes), resolve(p.isr_nodes),
                             resolve(getattr(p, "offline_replicas", ())), epoch)

    def update_last_seen_epoch_if_newer(self, tp: TopicPartition, leader_epoch: int) -> bool:
        with self._lock:
            old = self._last_seen_leader_epochs.get(tp)
            if old is None or leader_epoch > old:
                self._last_seen_leader_epochs[tp] = leader_epoch
                self._need_full_update = True
                return True
            return False

    # ---------------------------------------------------------------------------------------- errors

    def maybe_throw_any_exception(self) -> None:
        with self._lock:
            exc = self._fatal_exception
            if exc is None and self._invalid_topics:
                exc = InvalidTopicExceptionError(f"Invalid topics: {sorted(self._invalid_topics)}")
            elif exc is None and self._unauthorized_topics:
                exc = TopicAuthorizationFailedError(
                    f"Not authorized to access topics: {sorted(self._unauthorized_topics)}")
            self._clear_errors()
            if exc is not None:
                raise exc

    def maybe_throw_exception_for_topic(self, topic: str) -> None:
        """Raise (once) the fatal error, or ``topic``'s invalid / unauthorized error."""
        with self._lock:
            exc: BaseException | None = self._fatal_exception
            if exc is None:
                if topic in self._unauthorized_topics:
                    exc = TopicAuthorizationFailedError(f"Not authorized to access topics: [{topic}]")
                elif topic in self._invalid_topics:
                    exc = InvalidTopicExceptionError(f"Invalid topics: [{topic}]")
            self._clear_errors()
            if exc is not None:
                raise exc

    def maybe_throw_fatal_exception(self) -> None:
        with self._lock:
            exc = self._fatal_exception
            if exc is not None:
                self._fatal_exception = None
                raise exc

    def _clear_errors(self) -> None:
        self._fatal_exception = None
        self._invalid_topics = set()
        self._unauthorized_topics = set()

    # ----------------------------------------------------------------------------------------- close

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._cond.notify_all()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(updateVersion={self._update_version}, requestVersion="
                f"{self._request_version}, cluster={self._cluster})")

