"""Fetching: one FetchRequest per leader, responses buffered as :class:`CompletedFetch` es, records collected
up to ``max.poll.records``.

Kafka counterpart: ``org.apache.kafka.clients.consumer.internals.Fetcher`` (3.x: ``AbstractFetch`` +
``FetchCollector`` + ``FetchBuffer``), with fetch sessions (KIP-227): one
:class:`~strom.network.fetch_session_handler.FetchSessionHandler` per broker makes each request after the first a
small incremental one (only the partitions whose position changed, and those to forget); a session error or a
failed request makes the next one full again, and ``close`` ends the sessions with a final request (epoch -1).
As in Java, a partition with buffered records is left out of the next request, so it leaves the session until
its records are consumed. Unlike Java, no request goes to a broker whose partitions are all caught up while
records of other partitions are buffered (see ``_all_caught_up``). Each partition carries the leader epoch of our metadata
(``current_leader_epoch``, KIP-320 fencing); a partition whose leader changed is left out until the consumer's
OffsetFetcher has validated its position with OffsetsForLeaderEpoch (truncation detection).

``send_fetches`` builds a request per leader node for every fetchable partition (assigned, valid position,
not paused, not being revoked) that has no buffered data and whose node has no fetch in flight. Fetch v4..v12
is used (v13+ addresses topics by id; sessions are keyed by topic name); ``isolation.level``, ``fetch.min.bytes``, ``fetch.max.bytes``,
``fetch.max.wait.ms``, ``max.partition.fetch.bytes`` and ``client.rack`` go into the request. A partition whose
leader named a preferred read replica (KIP-392, the broker's ``replica.selector.class`` with ``client.rack``) is
fetched from that replica until ``metadata.max.age.ms`` has passed, the replica fails or answers an error (then
from the leader again; an offset out of range on a follower is retried on the leader before any reset).

``collect_fetch`` hands out records in partition order. A response partition is used only if the position
still equals its fetch offset (a ``seek`` in between discards it). Errors per partition: leadership /
unknown-partition errors (and FENCED_LEADER_EPOCH) refresh metadata, UNKNOWN_LEADER_EPOCH is retried; ``OFFSET_OUT_OF_RANGE`` resets the position per
``auto.offset.reset`` or, with ``none``, raises :class:`OffsetOutOfRangeError`; authorization and corruption
errors raise. An error met after records of other partitions were collected is raised by the next call.
Records of paused partitions stay buffered until ``resume``.

Threading: ``send_fetches`` / ``collect_fetch`` run on the consumer's thread; response handlers may run on the
heartbeat thread (whichever thread polls the network), so the buffer is guarded by a lock.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from strom.common import error_codes as ec
from strom.common.error_codes import ErrorCode
from strom.common.errors import IllegalStateError, KafkaError
from strom.common.structs import Node, TopicPartition
from strom.common.time import Time
from strom.consumer.errors import offset_out_of_range
from strom.consumer.internals.completed_fetch import CompletedFetch, RecordConverter
from strom.consumer.internals.consumer_network_client import ConsumerNetworkClient
from strom.consumer.internals.fetch_metrics import FetchMetricsManager, FetchResponseMetricAggregator
from strom.consumer.internals.offset_fetcher import current_leader
from strom.consumer.internals.subscription_state import SubscriptionState
from strom.consumer.internals.timer import Timer
from strom.metrics import Metrics
from strom.network.fetch_session_handler import FetchRequestData, FetchSessionHandler, PartitionData
from strom.protocol.messages import FetchRequest

__all__ = ["Fetcher", "FETCH_MIN_VERSION", "FETCH_MAX_VERSION"]

log = logging.getLogger(__name__)

FETCH_MIN_VERSION = 4   # isolation level, last stable offset, aborted transactions
FETCH_MAX_VERSION = 12  # v13+ identifies topics by id
_REFRESH_METADATA = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.INCONSISTENT_TOPIC_ID,
})


class Fetcher:
    """Kafka's ``Fetcher`` (see the module docstring)."""

    def __init__(self, client: ConsumerNetworkClient, metadata: Any, subscriptions: SubscriptionState, time: Time,
                 converter: RecordConverter, *, fetch_min_bytes: int = 1, fetch_max_bytes: int = 50 * 1024 * 1024,
                 fetch_max_wait_ms: int = 500, max_partition_fetch_bytes: int = 1024 * 1024,
                 max_poll_records: int = 500, check_crcs: bool = True, client_rack: str = "",
                 read_committed: bool = False, request_timeout_ms: int = 30_000,
                 metadata_max_age_ms: int = 300_000, metrics: FetchMetricsManager | None = None,
                 on_metadata_change: Callable[[], None] | None = None) -> None:
        self.client = client
        self.metadata = metadata
        self.subscriptions = subscriptions
        self.time = time
        self.converter = converter
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.check_crcs = check_crcs
        self.client_rack = client_rack
        self.read_committed = read_committed
        self.request_timeout_ms = request_timeout_ms
        self._lock = threading.Lock()
        self._completed: deque[CompletedFetch] = deque()
        self._next_in_line: CompletedFetch | None = None
        self._nodes_with_pending_fetch: set[int] = set()
        self._session_handlers: dict[int, FetchSessionHandler] = {}  # per node; used under self._lock
        # KIP-392: the replica a leader told us to fetch a partition from, until when (metadata.max.age.ms
        # after it said so, as Java) and in which leader epoch; used under self._lock
        self.metadata_max_age_ms = metadata_max_age_ms
        self._preferred_read_replicas: dict[TopicPartition, tuple[int, int, int]] = {}
        self.metrics_manager = metrics if metrics is not None else FetchMetricsManager(Metrics(time=time))
        # Compares positions with the leaders of fresh metadata (KIP-320): a partition whose leader changed is not
        # fetched until its position is validated (the consumer's OffsetFetcher.validate_positions_on_metadata_change)
        self._on_metadata_change = on_metadata_change

    # ------------------------------------------------------------------------------------ requests

    def _buffered_partitions(self) -> set[TopicPartition]:
        with self._lock:
            out = {cf.tp for cf in self._completed}
            nil = self._next_in_line
            if nil is not None and not nil.is_consumed:
                out.add(nil.tp)
            return out

    def send_fetches(self) -> int:
        """Send a FetchRequest to every leader with fetchable partitions; returns how many were sent."""
        requests = self._prepare_fetch_requests()
        for node, (request, data) in requests.items():
            with self._lock:
                self._nodes_with_pending_fetch.add(node.node_id)
            log.debug("Sending READ_%s %s to broker %s",
                      "COMMITTED" if self.read_committed else "UNCOMMITTED", data, node)
            timeout = self.request_timeout_ms + self.fetch_max_wait_ms
            sent_ms = self.time.milliseconds()
            future = self.client.send(node, request, timeout_ms=timeout, min_version=FETCH_MIN_VERSION,
                                      max_version=FETCH_MAX_VERSION)
            future.add_listener(lambda response, n=node, d=data, t=sent_ms:
                                self._handle_fetch_response(n, d, response, t),
                                lambda exc, n=node: self._handle_fetch_failure(n, exc))
        return len(requests)

    def _prepare_fetch_requests(self) -> dict[Node, tuple[Any, FetchRequestData]]:
        if self._on_metadata_change is not None:
            self._on_metadata_change()
        cluster = self.metadata.fetch()
        buffered = self._buffered_partitions()
        with self._lock:
            pending = set(self._nodes_with_pending_fetch)
        per_node: dict[Node, dict[TopicPartition, PartitionData]] = {}
        now = self.time.milliseconds()
        for tp in self.subscriptions.fetchable_partitions(lambda tp: tp not in buffered):
            position = self.subscriptions.position(tp)
            if position is None:
                continue
            leader = cluster.leader_for(tp)
            if leader is None:
                log.debug("Requesting metadata update for partition %s since the leader is unknown", tp)
                self.metadata.request_update()
                continue
            node = self._select_read_replica(tp, leader, cluster, now)
            if node.node_id in pending or self.client.is_unavailable(node):
                continue
            per_node.setdefault(node, {})[tp] = PartitionData(
                position, -1, self.max_partition_fetch_bytes, self._leader_epoch(tp))
        out = {}
        busy = bool(per_node) and self.has_available_fetches()
        for node, partitions in per_node.items():
            if busy and self._all_caught_up(partitions):
                log.debug("Not fetching from node %s yet: its partitions are caught up and records of others are "
                          "buffered", node)
                continue
            with self._lock:
                handler = self._session_handlers.get(node.node_id)
                if handler is None:
                    handler = self._session_handlers[node.node_id] = FetchSessionHandler(node.node_id)
                builder = handler.new_builder()
                for tp, pd in partitions.items():
                    builder.add(tp, pd)
                data = builder.build()
            out[node] = (self._fetch_request(data), data)
        return out

    def _select_read_replica(self, tp: TopicPartition, leader: Node, cluster: Any, now: int) -> Node:
        """Java's ``selectReadReplica`` (KIP-392): the preferred read replica the leader named, while it has not
        expired, the leader is the same one (a new leader epoch forgets it, as Java's position validation does) and
        our metadata knows it; else the leader (a replica gone from the metadata is forgotten)."""
        with self._lock:
            preferred = self._preferred_read_replicas.get(tp)
            if preferred is None:
                return leader
            node_id, expires_ms, leader_epoch = preferred
            if now >= expires_ms or leader_epoch != self._leader_epoch(tp):
                del self._preferred_read_replicas[tp]
                return leader
        node = cluster.node_by_id(node_id)
        if node is None:
            log.debug("Not fetching from %s for partition %s since it is missing from our metadata, using the "
                      "leader instead", node_id, tp)
            self.clear_preferred_read_replica(tp)
            return leader
        return node

    def read_replica(self, tp: TopicPartition) -> int:
        """The node ``tp`` is read from while the leader's choice holds (Java's ``preferredReadReplica``), -1 for
        the leader (the preferred-read-replica metric). Any thread."""
        with self._lock:
            preferred = self._preferred_read_replicas.get(tp)
        if preferred is None or self.time.milliseconds() >= preferred[1]:
            return -1
        return preferred[0]

    def clear_preferred_read_replica(self, tp: TopicPartition) -> int | None:
        """Fetch ``tp`` from its leader again; returns the replica it was read from, if any."""
        with self._lock:
            preferred = self._preferred_read_replicas.pop(tp, None)
        return preferred[0] if preferred is not None else None

    def _all_caught_up(self, partitions: dict[TopicPartition, PartitionData]) -> bool:
        """Every partition is at its high watermark (last stable offset for read_committed) as last fetched.

        Such a fetch, sent while records of other partitions are still buffered, would only park on the broker
        as a long poll; and while it is in flight no fetch can go to that broker for the partitions being drained,
        so they stall for up to ``fetch.max.wait.ms``. (Java sends it anyway; an incremental session, which leaves
        caught-up partitions out of responses, makes it frequent at the end of a backlog.) It goes out once the
        buffer is empty."""
        lag = self.subscriptions.partition_lag
        for tp in partitions:
            behind = lag(tp, self.read_committed)
            if behind is None or behind > 0:
                return False
        return True

    def _fetch_request(self, data: FetchRequestData) -> Any:
        topics: dict[str, list[Any]] = {}
        for tp, pd in data.to_send.items():
            topics.setdefault(tp.topic, []).append(FetchRequest.FetchPartition(
                partition=tp.partition, current_leader_epoch=pd.current_leader_epoch, fetch_offset=pd.fetch_offset,
                last_fetched_epoch=pd.last_fetched_epoch, log_start_offset=pd.log_start_offset,
                partition_max_bytes=pd.max_bytes))
        forgotten: dict[str, list[int]] = {}
        for tp in data.to_forget:
            forgotten.setdefault(tp.topic, []).append(tp.partition)
        return FetchRequest(
            replica_id=-1, max_wait_ms=self.fetch_max_wait_ms, min_bytes=self.fetch_min_bytes,
            max_bytes=self.fetch_max_bytes, isolation_level=1 if self.read_committed else 0,
            session_id=data.metadata.session_id, session_epoch=data.metadata.epoch,
            topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()],
            forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=t, partitions=ps) for t, ps in forgotten.items()],
            rack_id=self.client_rack)

    def _handle_fetch_response(self, node: Node, data: FetchRequestData, response: Any,
                               sent_ms: int | None = None) -> None:
        with self._lock:
            handler = self._session_handlers.get(node.node_id)
            usable = handler is not None and handler.handle_response(response)
            if not usable:
                self._nodes_with_pending_fetch.discard(node.node_id)
        if not usable:
            if handler is None:
                log.error("Unable to find FetchSessionHandler for node %s. Ignoring fetch response.", node)
            elif response.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR:
                self.metadata.request_update()
            return
        offsets = data.session_partitions
        fetched = []
        bytes_by_topic: dict[str, int] = {}
        preferred: dict[TopicPartition, int] = {}
        for topic in response.responses:
            name = topic.topic
            for p in topic.partitions:
                tp = TopicPartition(name, p.partition_index)
                requested = offsets.get(tp)
                if requested is None:
                    continue
                replica = getattr(p, "preferred_read_replica", -1)
                if replica is not None and replica >= 0:
                    preferred[tp] = replica
                aborted = p.aborted_transactions
                records = p.records
                if records is not None:  # a view into the response's receive buffer, kept (see CompletedFetch)
                    bytes_by_topic[name] = bytes_by_topic.get(name, 0) + len(records)
                fetched.append(CompletedFetch(
                    tp, requested.fetch_offset, p.error_code, records, self.converter, check_crcs=self.check_crcs,
                    read_committed=self.read_committed, high_watermark=p.high_watermark,
                    last_stable_offset=p.last_stable_offset, log_start_offset=p.log_start_offset,
                    aborted_transactions=[(a.producer_id, a.first_offset) for a in aborted] if aborted else None))
        if fetched:
            aggregator = FetchResponseMetricAggregator(self.metrics_manager, {cf.tp for cf in fetched})
            for cf in fetched:
                cf.aggregator = aggregator
        now = self.time.milliseconds()
        with self._lock:
            self._completed.extend(fetched)
            self._nodes_with_pending_fetch.discard(node.node_id)
            for tp, replica in preferred.items():
                if replica != self._preferred_read_replicas.get(tp, (None,))[0]:
                    log.debug("Fetching %s from replica %d from now on (the leader's preferred read replica)", tp,
                              replica)
                self._preferred_read_replicas[tp] = (replica, now + self.metadata_max_age_ms,
                                                     self._leader_epoch(tp))
        self.metrics_manager.record_fetch_response(now - sent_ms if sent_ms is not None else 0, bytes_by_topic,
                                                   getattr(response, "throttle_time_ms", 0) or 0, now)

    def _handle_fetch_failure(self, node: Node, exc: BaseException) -> None:
        log.debug("Fetch request to node %s failed: %s", node, exc)
        with self._lock:
            handler = self._session_handlers.get(node.node_id)
            if handler is not None:
                handler.handle_error(exc)
            self._nodes_with_pending_fetch.discard(node.node_id)
            # a follower we read from failed: its partitions go back to their leaders (Java clears the preferred
            # replica of every partition of the failed request)
            for tp in [tp for tp, (n, _e, _l) in self._preferred_read_replicas.items() if n == node.node_id]:
                del self._preferred_read_replicas[tp]

    def close_fetch_sessions(self, timer: Timer) -> None:
        """Tell every broker we hold a fetch session with to drop it (a final, empty request with epoch -1), and
        wait for the answers until ``timer`` expires; a broker that is not reachable keeps the session until it
        is evicted (Java's ``maybeCloseFetchSessions``)."""
        cluster = self.metadata.fetch()
        futures = []
        with self._lock:
            handlers = [h for h in self._session_handlers.values() if h.session_id != 0]
            requests = []
            for handler in handlers:
                handler.notify_close()
                node = cluster.node_by_id(handler.node)
                if node is None or self.client.is_unavailable(node):
                    log.debug("Skip sending close session request to broker %s since it is not reachable",
                              handler.node)
                    continue
                requests.append((node, self._fetch_request(handler.new_builder().build())))
        for node, request in requests:
            futures.append(self.client.send(node, request, timeout_ms=self.request_timeout_ms,
                                            min_version=FETCH_MIN_VERSION, max_version=FETCH_MAX_VERSION))
        for future in futures:
            if not self.client.poll_future(future, timer, disable_wakeup=True):
                log.debug("Not all fetch sessions could be closed within the close timeout (%d ms): the brokers keep "
                          "them until they evict them", timer.timeout_ms)
                break

    # ---------------------------------------------------------------------------------- collection

    def has_available_fetches(self) -> bool:
        """Buffered data of a fetchable partition (the poll condition: do not block while there is some)."""
        is_fetchable = self.subscriptions.is_fetchable
        with self._lock:
            nil = self._next_in_line
            if nil is not None and not nil.is_consumed and is_fetchable(nil.tp):
                return True
            return any(is_fetchable(cf.tp) for cf in self._completed)

    def has_pending_fetches(self) -> bool:
        with self._lock:
            return bool(self._nodes_with_pending_fetch)

    def collect_fetch(self, columnar: bool = False, max_records: int | None = None) -> dict[TopicPartition, list[Any]]:
        """Up to ``max_records`` (default ``max.poll.records``) records from the buffered responses: lists of
        ConsumerRecords, or with ``columnar`` lists of Arrow record batches (``CompletedFetch.fetch_columns``)."""
        fetched: dict[TopicPartition, list[Any]] = {}
        remaining = self.max_poll_records if max_records is None else max_records
        self.metrics_manager.maybe_update_assignment(self.subscriptions, self.read_replica)
        paused: list[CompletedFetch] = []
        try:
            while remaining > 0:
                nil = self._next_in_line
                if nil is None or nil.is_consumed:
                    if nil is not None:
                        _report_consumed(nil)
                    with self._lock:
                        cf = self._completed.popleft() if self._completed else None
                    if cf is None:
                        break
                    self._next_in_line = None
                    if not cf.initialized:
                        try:
                            usable = self._initialize(cf)
                        except KafkaError:
                            if fetched:  # raise it on the next call, after these records are out
                                with self._lock:
                                    self._completed.appendleft(cf)
                                break
                            raise
                        if not usable:
                            _report_consumed(cf)
                            continue
                    self._next_in_line = cf
                elif self.subscriptions.is_paused(nil.tp):
                    paused.append(nil)  # keep the data until the partition is resumed
                    self._next_in_line = None
                else:
                    try:
                        records, count = self._fetch_records(nil, remaining, columnar)
                    except KafkaError as exc:
                        if fetched:
                            nil.defer_error(exc)
                            break
                        raise
                    if count:
                        fetched.setdefault(nil.tp, []).extend(records)
                        remaining -= count
                        nil.records_read += count
                    if nil.is_consumed:
                        _report_consumed(nil)
        finally:
            if paused:
                with self._lock:
                    self._completed.extend(paused)
        return fetched

    def _fetch_records(self, cf: CompletedFetch, max_records: int, columnar: bool = False) -> tuple[list[Any], int]:
        tp = cf.tp
        subscriptions = self.subscriptions
        if not subscriptions.is_assigned(tp):
            log.debug("Not returning fetched records for partition %s since it is no longer assigned", tp)
        elif not subscriptions.is_fetchable(tp):
            log.debug("Not returning fetched records for assigned partition %s since it is no longer fetchable", tp)
        else:
            position = subscriptions.position(tp)
            if cf.next_fetch_offset == position:
                if columnar:
                    records = cf.fetch_columns(max_records)
                    count = sum(map(len, records))
                else:
                    records = cf.fetch_records(max_records)
                    count = len(records)
                if cf.next_fetch_offset > position:
                    subscriptions.update_position(tp, cf.next_fetch_offset, cf.last_epoch)
                # Kafka's FetchCollector: records consumed, then the partition's lag and lead at the new position
                self.metrics_manager.record_partition_fetch(
                    tp, count, subscriptions.partition_lag(tp, self.read_committed),
                    subscriptions.partition_lead(tp), self.time.milliseconds())
                return records, count
            log.debug("Ignoring fetched records for %s at offset %s since the current position is %s", tp,
                      cf.next_fetch_offset, position)
        cf.drain()
        return [], 0

    def _initialize(self, cf: CompletedFetch) -> bool:
        """Check a response partition's error and position; ``True`` if its records are usable."""
        tp = cf.tp
        error = cf.error_code
        subscriptions = self.subscriptions
        cf.initialized = True
        if not subscriptions.has_valid_position(tp):
            return False
        if error == ErrorCode.NONE:
            position = subscriptions.position(tp)
            if position != cf.fetch_offset:
                log.debug("Discarding stale fetch response for partition %s since its offset %d does not match the "
                          "expected offset %s", tp, cf.fetch_offset, position)
                return False
            subscriptions.update_high_watermark(tp, cf.high_watermark)
            subscriptions.update_log_start_offset(tp, cf.log_start_offset)
            subscriptions.update_last_stable_offset(tp, cf.last_stable_offset)
            return True
        if error in _REFRESH_METADATA:
            log.debug("Error in fetch for partition %s: %s", tp, ec.ERROR_CLASSES[error].name)
            self.clear_preferred_read_replica(tp)
            self.metadata.request_update()
        elif error == ErrorCode.OFFSET_OUT_OF_RANGE:
            if subscriptions.position(tp) != cf.fetch_offset:
                log.debug("Discarding stale fetch response for partition %s since the fetched offset %d does not "
                          "match the current offset %s", tp, cf.fetch_offset, subscriptions.position(tp))
            elif (replica := self.clear_preferred_read_replica(tp)) is not None:
                # a follower may not have the offset yet (it lags the leader): ask the leader before resetting
                log.debug("Fetch position %d is out of range for partition %s on replica %d, retrying from the "
                          "leader", cf.fetch_offset, tp, replica)
            elif subscriptions.has_default_offset_reset_policy():
                log.info("Fetch position %d is out of range for partition %s, resetting offset", cf.fetch_offset, tp)
                subscriptions.request_offset_reset(tp)
            else:
                raise offset_out_of_range({tp: cf.fetch_offset})
        elif error == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            raise ec.TopicAuthorizationFailedError(f"Not authorized to access topics: [{tp.topic}]")
        elif error in (ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.UNKNOWN_SERVER_ERROR):
            log.warning("Unknown error fetching data for topic-partition %s: %s", tp, ec.ERROR_CLASSES[error].name)
        elif error == ErrorCode.CORRUPT_MESSAGE:
            raise KafkaError(f"Encountered corrupt message when fetching offset {cf.fetch_offset} for "
                             f"topic-partition {tp}")
        else:
            raise IllegalStateError(f"Unexpected error code {error} while fetching at offset {cf.fetch_offset} "
                                    f"from topic-partition {tp}")
        return False

    def _leader_epoch(self, tp: TopicPartition) -> int:
        """The leader epoch our metadata names (KIP-320 fencing): a broker still acting on an older epoch answers
        FENCED_LEADER_EPOCH (metadata is refreshed) and one not yet told of ours UNKNOWN_LEADER_EPOCH (retried),
        instead of serving us from a stale leadership. -1 (no check) when the metadata has no epoch."""
        epoch = current_leader(self.metadata, tp)[1]
        return -1 if epoch is None else epoch

    def clear_buffered_data_for_unassigned_partitions(self, assigned: set[TopicPartition]) -> None:
        with self._lock:
            self._completed = deque(cf for cf in self._completed if cf.tp in assigned)
            nil = self._next_in_line
            if nil is not None and nil.tp not in assigned:
                nil.drain()
                _report_consumed(nil)
                self._next_in_line = None

    def clear_buffered_data_for(self, tp: TopicPartition) -> None:
        """Forget buffered data of ``tp`` (``seek``: the next fetch starts from the new position)."""
        with self._lock:
            self._completed = deque(cf for cf in self._completed if cf.tp != tp)
            nil = self._next_in_line
            if nil is not None and nil.tp == tp:
                nil.drain()
                _report_consumed(nil)


def _report_consumed(cf: CompletedFetch) -> None:
    """A partition of a response is consumed: its records count towards the response's records-per-request."""
    aggregator = cf.aggregator
    if aggregator is not None:
        aggregator.record(cf.tp, cf.records_read)
