"""``KafkaConsumer``: the consumer client.

Kafka counterpart: ``org.apache.kafka.clients.consumer.KafkaConsumer`` (classic group protocol).

Construction (SPEC §13.5): parse :class:`ConsumerConfig`; build interceptors, deserializers, the
:class:`SubscriptionState` (``auto.offset.reset``), :class:`ConsumerMetadata` (bootstrapped from
``bootstrap.servers``), the shared :class:`~strom.network.network_client.NetworkClient` over a ``Selector``
wrapped in a :class:`ConsumerNetworkClient` (blocking polls capped at ``heartbeat.interval.ms``), the assignors,
a :class:`ConsumerCoordinator` only when ``group.id`` is set, the :class:`Fetcher` and :class:`OffsetFetcher`.
A configuration error raises :class:`ConfigError`; any other failure closes what was built and raises
``KafkaError("Failed to construct kafka consumer")``.

``poll`` (Kafka 3.x): drive the group (without blocking on a join), refresh missing positions (committed
offsets, then ``auto.offset.reset``), return buffered records or send fetches and wait for them; before
returning records the next fetches are already sent (pipelining). Timeouts are in seconds (float or
``timedelta``), or ``timeout_ms=`` in milliseconds.

Position control and lookups (``seek``, ``seek_to_beginning``/``end``, ``position``, ``committed``,
``offsets_for_times``, ``beginning_offsets``/``end_offsets``, ``partitions_for``, ``list_topics``, ``pause``/
``resume``/``paused``, ``current_lag``) are methods of this class, as in Kafka; their timeouts default to
``default.api.timeout.ms`` and raise :class:`KafkaTimeoutError` when they expire.

Threading: **not thread-safe except wakeup()** — a second thread entering raises
:class:`ConcurrentModificationError`. The coordinator runs a heartbeat thread
("kafka-coordinator-heartbeat-thread | <group>"); rebalance listeners, interceptors and commit callbacks
run on the caller's thread.
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from datetime import timedelta
from typing import Any

from strom.common.errors import ConfigError, IllegalStateError, KafkaError, KafkaTimeoutError
from strom.common.structs import OffsetAndMetadata, TopicPartition
from strom.common.time import SYSTEM_TIME, Time
from strom.config.common_client_configs import parse_bootstrap_servers
from strom.consumer.config import ConsumerConfig
from strom.consumer.consumer_records import ConsumerRecords, OffsetAndTimestamp
from strom.consumer.errors import ConcurrentModificationError
from strom.consumer.internals.abstract_coordinator import GroupRebalanceConfig
from strom.consumer.internals.completed_fetch import RecordConverter
from strom.consumer.internals.consumer_coordinator import ConsumerCoordinator
from strom.consumer.internals.consumer_metadata import ConsumerMetadata
from strom.consumer.internals.consumer_network_client import ConsumerNetworkClient
from strom.consumer.internals.fetch_metrics import FetchMetricsManager
from strom.consumer.internals.fetcher import Fetcher
from strom.consumer.internals.offset_fetcher import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    OffsetFetcher,
    current_leader,
)
from strom.consumer.internals.subscription_state import OffsetResetStrategy, SubscriptionState
from strom.consumer.internals.timer import Timer
from strom.metrics import Avg, CumulativeSum, KafkaMetric, MetricName, Metrics, SampledStats, Sensor
from strom.metrics.client_metrics import new_client_metrics

__all__ = ["KafkaConsumer", "DEFAULT_CLOSE_TIMEOUT_MS"]

log = logging.getLogger(__name__)

DEFAULT_CLOSE_TIMEOUT_MS = 30_000
Timeout = float | timedelta | None
_NO_CURRENT_THREAD = -1


def to_ms(timeout: float | timedelta | None, timeout_ms: int | None, default_ms: int) -> int:
    """Seconds (float / timedelta) or ``timeout_ms`` → milliseconds; ``None`` → ``default_ms``."""
    if timeout_ms is not None:
        if timeout_ms < 0:
            raise ValueError("Timeout must not be negative")
        return int(timeout_ms)
    if timeout is None:
        return default_ms
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    if seconds < 0:
        raise ValueError("Timeout must not be negative")
    return int(seconds * 1000)


class KafkaConsumer:
    """Kafka's ``KafkaConsumer`` (see the module docstring).

    ``KafkaConsumer(configs=None, *, key_deserializer=None, value_deserializer=None, **kwargs)`` — keys as in
    Kafka (``"group.id"``) or snake_case keywords (``group_id="g"``)."""

    def __init__(self, configs: Mapping[str, Any] | None = None, *, key_deserializer: Any = None,
                 value_deserializer: Any = None, time: Time = SYSTEM_TIME, client: Any = None,
                 **kwargs: Any) -> None:
        self._closed = True  # until fully built: close() must not run half-way
        self._current_thread = _NO_CURRENT_THREAD
        self._ref_count = 0
        self._thread_lock = threading.Lock()
        self.config = ConsumerConfig(configs, key_deserializer=key_deserializer,
                                     value_deserializer=value_deserializer, **kwargs)
        self._client: ConsumerNetworkClient | None = None
        self._coordinator: ConsumerCoordinator | None = None
        self._metrics: Metrics | None = None
        self._interceptors: Any = None
        self._deserializers: list[Any] = []
        try:
            self._build(time, client)
        except ConfigError:
            self._close_quietly()
            raise
        except Exception as exc:
            self._close_quietly()
            raise KafkaError("Failed to construct kafka consumer") from exc
        self._closed = False

    def _build(self, time: Time, client: Any) -> None:
        c = self.config.values
        self._time = time
        self.client_id: str = c["client.id"]
        self.group_id: str | None = c["group.id"]
        instance = c["group.instance.id"]
        self._log_context = (f"[Consumer instanceId={instance}, clientId={self.client_id}, groupId={self.group_id}] "
                             if instance else f"[Consumer clientId={self.client_id}, groupId={self.group_id}] ")
        self._request_timeout_ms: int = c["request.timeout.ms"]
        self._default_api_timeout_ms: int = c["default.api.timeout.ms"]
        self._retry_backoff_ms: int = c["retry.backoff.ms"]
        self._metrics = metrics = new_client_metrics(c, self.client_id, time, "consumer")
        # Kafka's KafkaConsumerMetrics: the time between the application's polls
        self._last_poll_ms = -1
        self._poll_gap = metrics.sensor("time-between-poll")
        self._poll_gap.add(None, SampledStats({
            "avg": metrics.metric_name("time-between-poll-avg", "consumer-metrics",
                                       "The average delay between invocations of poll() in milliseconds."),
            "max": metrics.metric_name("time-between-poll-max", "consumer-metrics",
                                       "The max delay between invocations of poll() in milliseconds.")}))
        metrics.add_metric(metrics.metric_name("last-poll-seconds-ago", "consumer-metrics",
                                               "The number of seconds since the last poll() invocation."),
                           lambda _c, now: float((now - self._last_poll_ms) // 1000) if self._last_poll_ms >= 0
                           else -1.0)
        self._since_last_poll_ms = 0
        self._poll_idle = metrics.sensor("poll-idle-ratio-avg")
        self._poll_idle.add(metrics.metric_name("poll-idle-ratio-avg", "consumer-metrics",
                                                "The average fraction of time the consumer's poll() is idle as "
                                                "opposed to waiting for the user code to process records."), Avg())
        self._commit_sync_time, self._committed_time = (
            self._total_time_sensor(metrics, call) for call in ("commit-sync", "committed"))
        self._interceptors = self.config.make_interceptors()
        key_deserializer = self.config.make_key_deserializer()
        value_deserializer = self.config.make_value_deserializer()
        self._deserializers = [key_deserializer, value_deserializer]
        self._subscriptions = SubscriptionState(c["auto.offset.reset"])
        self._metadata = ConsumerMetadata(self._retry_backoff_ms, c["metadata.max.age.ms"],
                                          not c["exclude.internal.topics"], c["allow.auto.create.topics"],
                                          self._subscriptions, time, log_context=self._log_context)
        self._metadata.bootstrap(parse_bootstrap_servers(c["bootstrap.servers"]),
                                 recovery_strategy=c["metadata.recovery.strategy"])
        if client is None:
            client = self._new_network_client(c, time)
        elif getattr(client, "metadata", "unset") is None:
            client.metadata = self._metadata  # a MockClient created without metadata
        heartbeat_interval = c["heartbeat.interval.ms"]
        self._client = ConsumerNetworkClient(client, self._metadata, time, self._retry_backoff_ms,
                                             self._request_timeout_ms, heartbeat_interval)
        read_committed = self.config.read_committed
        if self.group_id is not None:
            rebalance_config = GroupRebalanceConfig(
                self.group_id, instance, c["session.timeout.ms"], c["max.poll.interval.ms"], heartbeat_interval,
                self._retry_backoff_ms, self._request_timeout_ms, c["internal.leave.group.on.close"])
            self._coordinator = ConsumerCoordinator(
                rebalance_config, self._client, time, self._subscriptions, self._metadata,
                self.config.make_assignors(), auto_commit_enabled=c["enable.auto.commit"],
                auto_commit_interval_ms=c["auto.commit.interval.ms"], interceptors=self._interceptors,
                client_rack=c["client.rack"], client_id=self.client_id, metrics=metrics)
        self._offset_fetcher = OffsetFetcher(self._client, self._metadata, self._subscriptions, time,
                                             self._retry_backoff_ms, self._request_timeout_ms, read_committed)
        self._fetcher = Fetcher(
            self._client, self._metadata, self._subscriptions, time, RecordConverter(key_deserializer,
                                                                                     value_deserializer),
            fetch_min_bytes=c["fetch.min.bytes"], fetch_max_bytes=c["fetch.max.bytes"],
            fetch_max_wait_ms=c["fetch.max.wait.ms"], max_partition_fetch_bytes=c["max.partition.fetch.bytes"],
            max_poll_records=c["max.poll.records"], check_crcs=c["check.crcs"], client_rack=c["client.rack"],
            read_committed=read_committed, request_timeout_ms=self._request_timeout_ms,
            metadata_max_age_ms=c["metadata.max.age.ms"], metrics=FetchMetricsManager(metrics),
            on_metadata_change=self._offset_fetcher.validate_positions_on_metadata_change)
        self._has_all_fetch_positions = False
        log.debug("%sKafka consumer initialized", self._log_context)

    def _new_network_client(self, c: Mapping[str, Any], time: Time) -> Any:
        from strom.network.channel_builder import ClientChannelBuilder
        from strom.network.network_client import NetworkClient
        from strom.network.selector import Selector
        from strom.network.telemetry_sender import ClientTelemetrySender
        from strom.network.transport import ReusingMemoryPool

        selector = Selector(c["connections.max.idle.ms"], time, log_context=self._log_context,
                            metrics=self._metrics, metric_grp_prefix="consumer",
                            channel_builder=ClientChannelBuilder.from_config(c), memory_pool=ReusingMemoryPool())
        return NetworkClient(
            selector, self._metadata, self.client_id, 100, c["reconnect.backoff.ms"], c["reconnect.backoff.max.ms"],
            c["send.buffer.bytes"], c["receive.buffer.bytes"], self._request_timeout_ms,
            c["socket.connection.setup.timeout.ms"], c["socket.connection.setup.timeout.max.ms"], time, True,
            log_context=self._log_context,
            telemetry=ClientTelemetrySender(self._metrics, time) if c["enable.metrics.push"] else None)

    # ------------------------------------------------------------------------------ thread guard

    def _acquire(self) -> None:
        ident = threading.get_ident()
        with self._thread_lock:
            if self._current_thread not in (_NO_CURRENT_THREAD, ident):
                raise ConcurrentModificationError("KafkaConsumer is not safe for multi-threaded access")
            self._current_thread = ident
            self._ref_count += 1

    def _release(self) -> None:
        with self._thread_lock:
            self._ref_count -= 1
            if self._ref_count == 0:
                self._current_thread = _NO_CURRENT_THREAD

    def _acquire_and_ensure_open(self) -> None:
        self._acquire()
        if self._closed:
            self._release()
            raise IllegalStateError("This consumer has already been closed.")

    def _timer(self, timeout: float | timedelta | None, timeout_ms: int | None = None) -> Timer:
        return Timer(self._time, to_ms(timeout, timeout_ms, self._default_api_timeout_ms))

    def _require_group(self) -> ConsumerCoordinator:
        if self._coordinator is None:
            from strom.common.error_codes import InvalidGroupIdError

            raise InvalidGroupIdError("To use the group management or offset commit APIs, you must provide a "
                                      "valid group.id in the consumer configuration.")
        return self._coordinator

    # ------------------------------------------------------------------------------- subscription

    def assignment(self) -> set[TopicPartition]:
        """The partitions currently assigned to this consumer."""
        self._acquire_and_ensure_open()
        try:
            return self._subscriptions.assigned_partitions()
        finally:
            self._release()

    def subscription(self) -> set[str]:
        """The topics subscribed to (the matched topics for a pattern subscription)."""
        self._acquire_and_ensure_open()
        try:
            return self._subscriptions.subscription()
        finally:
            self._release()

    def subscribe(self, topics: Iterable[str] | re.Pattern[str] | str | None = None, listener: Any = None, *,
                  pattern: re.Pattern[str] | str | None = None) -> None:
        """Subscribe to a topic list, or to every topic matching ``pattern`` (a compiled regex as ``topics``
        works too); ``listener`` is a :class:`ConsumerRebalanceListener`. An empty list unsubscribes."""
        self._acquire_and_ensure_open()
        try:
            coordinator = self._require_group()
            if isinstance(topics, re.Pattern):
                topics, pattern = None, topics
            if pattern is not None:
                if topics:
                    raise IllegalStateError("Subscription to topics, partitions and pattern are mutually exclusive")
                log.info("%sSubscribed to pattern: '%s'", self._log_context, getattr(pattern, "pattern", pattern))
                self._subscriptions.subscribe_pattern(pattern, listener)
                coordinator.maybe_update_subscription_metadata()
                self._metadata.request_update_for_new_topics()
                return
            wanted = [topics] if isinstance(topics, str) else list(topics or ())
            if not wanted:
                self._unsubscribe()
                return
            if any(not isinstance(t, str) or not t.strip() for t in wanted):
                raise ValueError("Topic collection to subscribe to cannot contain null or empty topic")
            self._fetcher.clear_buffered_data_for_unassigned_partitions(
                {tp for tp in self._subscriptions.assigned_partitions() if tp.topic in wanted})
            log.info("%sSubscribed to topic(s): %s", self._log_context, ", ".join(wanted))
            if self._subscriptions.subscribe(wanted, listener):
                self._metadata.request_update_for_new_topics()
        finally:
            self._release()

    def unsubscribe(self) -> None:
        """Leave the group (revoking partitions) and drop the subscription or manual assignment."""
        self._acquire_and_ensure_open()
        try:
            self._unsubscribe()
        finally:
            self._release()

    def _unsubscribe(self) -> None:
        self._fetcher.clear_buffered_data_for_unassigned_partitions(set())
        if self._coordinator is not None:
            try:
                self._coordinator.on_leave_prepare()
            finally:
                self._coordinator.maybe_leave_group("the consumer unsubscribed from all topics")
        self._subscriptions.unsubscribe()
        log.info("%sUnsubscribed all topics or patterns and assigned partitions", self._log_context)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Manually assign partitions (no group management); an empty collection unsubscribes."""
        self._acquire_and_ensure_open()
        try:
            wanted = list(partitions)
            if not wanted:
                self._unsubscribe()
                return
            for tp in wanted:
                if not isinstance(tp, TopicPartition) or not tp.topic or not tp.topic.strip():
                    raise ValueError("Topic partitions to assign to cannot have null or empty topic")
            self._fetcher.clear_buffered_data_for_unassigned_partitions(set(wanted))
            if self._coordinator is not None:  # commit what we are giving up: no rebalance will follow
                self._coordinator.maybe_auto_commit_offsets_async(self._time.milliseconds())
            log.info("%sAssigned to partition(s): %s", self._log_context, ", ".join(str(tp) for tp in wanted))
            if self._subscriptions.assign_from_user(wanted):
                self._metadata.request_update_for_new_topics()
        finally:
            self._release()

    # ---------------------------------------------------------------------------------------- poll

    def poll(self, timeout: float | timedelta | None = None, *, timeout_ms: int | None = None) -> ConsumerRecords:
        """Fetch records, waiting up to ``timeout`` seconds (``timeout_ms`` ms) for some."""
        fetched = self._poll_loop(to_ms(timeout, timeout_ms, 0), False, None)
        if not fetched:
            return ConsumerRecords.EMPTY
        records = ConsumerRecords(fetched)
        return self._interceptors.on_consume(records) if self._interceptors else records

    @staticmethod
    def _total_time_sensor(metrics: Metrics, call: str) -> Sensor:
        """Kafka's ``KafkaConsumerMetrics`` ``<call>-time-ns-total``: the time spent in one API call."""
        method = {"commit-sync": "commitSync", "committed": "committed"}[call]
        sensor = metrics.sensor(f"{call}-time-ns-total")
        sensor.add(metrics.metric_name(f"{call}-time-ns-total", "consumer-metrics", f"The total time the consumer "
                                       f"has spent in {method} in nanoseconds"), CumulativeSum())
        return sensor

    def _update_assignment_metadata_if_needed(self, timer: Timer, wait_for_join_group: bool) -> bool:
        if self._coordinator is not None and not self._coordinator.poll(timer, wait_for_join_group):
            return False
        return self._update_fetch_positions(timer)

    def _update_fetch_positions(self, timer: Timer) -> bool:
        # positions whose leader changed are validated first (KIP-320; a truncation found earlier is raised here)
        self._offset_fetcher.validate_positions_if_needed()
        self._has_all_fetch_positions = self._subscriptions.has_all_fetch_positions()
        if self._has_all_fetch_positions:
            return True
        # committed offsets first (only partitions without a position need the coordinator) ...
        if self._coordinator is not None and not self._coordinator.refresh_committed_offsets_if_needed(timer):
            return False
        # ... then the reset policy for the rest (NoOffsetForPartitionError with auto.offset.reset=none)
        self._subscriptions.reset_initializing_positions()
        self._offset_fetcher.reset_positions_if_needed()
        return True

    def poll_arrow(self, timeout: float | timedelta | None = None, *, timeout_ms: int | None = None,
                   max_records: int | None = None) -> Any:
        """The columnar read path: like :meth:`poll`, but the records come as one ``pyarrow.Table``.

        Columns: ``topic`` string, ``partition`` int32, ``offset`` int64, ``timestamp`` int64 (ms),
        ``timestamp_type`` int8, ``key`` and ``value`` binary (null for a null key/value), ``headers``
        list<struct<key: string, value: binary>>. Rows of a partition are in offset order; partitions follow
        each other as in :meth:`poll`. At most ``max_records`` rows (default ``max.poll.records``).

        Fetched record batches are decoded straight into the columns (runs of same-layout records as numpy
        slices of the fetched bytes, without a Python object per record), so this is much cheaper per record
        than :meth:`poll`. Everything else is :meth:`poll`'s: the group protocol, positions (``position()``
        moves past the returned rows, ``commit_sync()`` without arguments commits them), ``seek``,
        ``pause``/``resume``, CRC checks, ``isolation.level=read_committed`` (aborted transactions filtered,
        control batches skipped) and errors. Differences: keys and values are the raw bytes (the configured
        deserializers are not applied) and consumer interceptors are not supported (an
        :class:`IllegalStateError`: their ``on_consume`` takes ``ConsumerRecords``). Needs pyarrow and numpy.
        ``poll`` and ``poll_arrow`` may be mixed on one consumer.
        """
        if self._interceptors:
            raise IllegalStateError("poll_arrow() does not support consumer interceptors (on_consume takes "
                                    "ConsumerRecords): use poll()")
        if max_records is not None and max_records < 1:
            raise ValueError("max_records must be at least 1")
        try:
            from strom.consumer.internals.arrow_decoder import to_table
        except ImportError as e:
            raise ImportError(f"poll_arrow() needs pyarrow and numpy (pip install 'strom[arrow]'): {e}") from e

        return to_table(self._poll_loop(to_ms(timeout, timeout_ms, 0), True, max_records))

    def _poll_loop(self, timeout_ms: int, columnar: bool, max_records: int | None) -> dict[TopicPartition, list[Any]]:
        self._acquire_and_ensure_open()
        try:
            if self._subscriptions.has_no_subscription_or_user_assignment():
                raise IllegalStateError("Consumer is not subscribed to any topics or assigned any partitions")
            timer = Timer(self._time, timeout_ms)
            now = timer.current_ms
            self._since_last_poll_ms = now - self._last_poll_ms if self._last_poll_ms >= 0 else 0
            if self._last_poll_ms >= 0:
                self._poll_gap.record(self._since_last_poll_ms, now)
            self._last_poll_ms = now
            client = self._client
            assert client is not None
            try:
                while True:
                    client.maybe_trigger_wakeup()
                    self._update_assignment_metadata_if_needed(timer, wait_for_join_group=False)
                    fetched = self._poll_for_fetches(timer, columnar, max_records)
                    if fetched:
                        # pipelining: the next fetches go out while the caller processes these records
                        if self._fetcher.send_fetches() > 0 or client.has_pending_requests():
                            client.transmit_sends()
                        return fetched
                    timer.update()
                    if timer.is_expired():
                        return {}
            finally:
                # Kafka's recordPollEnd: the share of the time since the last poll spent inside this one (undefined,
                # so not recorded, for a first poll that took no time)
                poll_ms = timer.update() - now
                if poll_ms + self._since_last_poll_ms > 0:
                    self._poll_idle.record(poll_ms / (poll_ms + self._since_last_poll_ms), timer.current_ms)
        finally:
            self._release()

    def _poll_for_fetches(self, timer: Timer, columnar: bool = False,
                          max_records: int | None = None) -> dict[TopicPartition, list[Any]]:
        now = timer.update()
        poll_timeout = timer.remaining_ms()
        if self._coordinator is not None:
            poll_timeout = min(poll_timeout, self._coordinator.time_to_next_poll(now))
        fetched = self._fetcher.collect_fetch(columnar, max_records)
        if fetched:
            return fetched
        self._fetcher.send_fetches()
        if not self._has_all_fetch_positions and poll_timeout > self._retry_backoff_ms:
            poll_timeout = self._retry_backoff_ms  # a position lookup may be backing off
        fetcher = self._fetcher
        assert self._client is not None
        self._client.poll(poll_timeout, lambda: not fetcher.has_available_fetches())
        timer.update()
        return fetcher.collect_fetch(columnar, max_records)

    def __iter__(self) -> Iterator[Any]:
        """Yield records forever (kafka-python style), polling with a 1 s timeout."""
        while True:
            yield from self.poll(1.0)

    # ------------------------------------------------------------------------------------- commits

    @staticmethod
    def _normalize_offsets(offsets: Mapping[TopicPartition, OffsetAndMetadata | int]) -> dict[
            TopicPartition, OffsetAndMetadata]:
        out = {}
        for tp, om in offsets.items():
            out[tp] = om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(int(om))
        return out

    def commit_sync(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
                    timeout: float | timedelta | None = None) -> None:
        """Commit ``offsets`` (default: the positions of every assigned partition) and wait."""
        self._acquire_and_ensure_open()
        start = self._time.nanoseconds()
        try:
            coordinator = self._require_group()
            commit = (self._subscriptions.all_consumed() if offsets is None else self._normalize_offsets(offsets))
            timer = self._timer(timeout)
            if not coordinator.commit_offsets_sync(commit, timer):
                raise KafkaTimeoutError(f"Timeout of {timer.timeout_ms}ms expired before successfully committing "
                                        f"offsets {commit}")
        finally:
            self._commit_sync_time.record(self._time.nanoseconds() - start)  # failed calls too, as in Java
            self._release()

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
                     callback: Any = None) -> None:
        """Commit without waiting; ``callback(offsets, exception)`` runs on this thread in a later call."""
        self._acquire_and_ensure_open()
        try:
            coordinator = self._require_group()
            commit = (self._subscriptions.all_consumed() if offsets is None else self._normalize_offsets(offsets))
            coordinator.commit_offsets_async(commit, callback)
        finally:
            self._release()

    # ---------------------------------------------------------------------------------- life cycle

    def wakeup(self) -> None:
        """Thread-safe: abort the current (or next) blocking call with :class:`WakeupError`."""
        if self._client is not None:
            self._client.wakeup()

    def enforce_rebalance(self, reason: str | None = None) -> None:
        self._acquire_and_ensure_open()
        try:
            coordinator = self._require_group()
            if not self._subscriptions.has_auto_assigned_partitions():
                raise IllegalStateError("Tried to force a rebalance but consumer does not have a group.")
            coordinator.request_rejoin(reason or "rebalance enforced by user")
        finally:
            self._release()

    def group_metadata(self) -> Any:
        self._acquire_and_ensure_open()
        try:
            return self._require_group().group_metadata()
        finally:
            self._release()

    def close(self, timeout: float | timedelta | None = None) -> None:
        """Commit (auto-commit), revoke, leave the group and release resources, waiting up to ``timeout``
        (default 30 s) for the group steps."""
        if self._closed:
            return
        self._acquire()
        try:
            timer = Timer(self._time, min(to_ms(timeout, None, DEFAULT_CLOSE_TIMEOUT_MS),
                                          max(self._request_timeout_ms, 0) or DEFAULT_CLOSE_TIMEOUT_MS))
            error: BaseException | None = None
            if self._coordinator is not None:
                try:
                    self._coordinator.close(timer)
                except Exception as exc:
                    log.error("%sFailed to close coordinator", self._log_context, exc_info=True)
                    error = exc
            try:
                self._fetcher.close_fetch_sessions(timer)
            except Exception:
                log.debug("%sFailed to close the fetch sessions", self._log_context, exc_info=True)
            self._close_telemetry(timer)
            self._close_quietly()
            if error is not None:
                raise KafkaError("Failed to close kafka consumer") from error
        finally:
            self._closed = True
            self._release()

    def _close_telemetry(self, timer: Timer) -> None:
        """KIP-714: the last push of the consumer's metrics, marked terminating (within the close's timer)."""
        telemetry = getattr(getattr(self._client, "client", None), "telemetry", None)
        if telemetry is None:
            return
        telemetry.initiate_close()
        try:
            while not telemetry.wait_terminated(0) and not timer.is_expired():
                self._client.poll(min(timer.remaining_ms(), 100))
                timer.update()
        except Exception:
            log.debug("%sFailed to send the last telemetry push", self._log_context, exc_info=True)

    def client_instance_id(self, timeout: float | timedelta) -> uuid.UUID:
        """The id the cluster gave this client for its metrics (KIP-714, Java's ``clientInstanceId``): waits up to
        ``timeout`` for the first GetTelemetrySubscriptions answer (the consumer's network I/O runs in ``poll()``
        and its heartbeat thread); :class:`IllegalStateError` when the client does not push metrics."""
        telemetry = getattr(getattr(self._client, "client", None), "telemetry", None)
        if telemetry is None:
            raise IllegalStateError("Telemetry is not enabled. Set config enable.metrics.push to true.")
        timeout_ms = to_ms(timeout, None, 0)
        timer = Timer(self._time, timeout_ms)
        while not telemetry.instance_known() and not timer.is_expired():
            self._acquire()
            try:
                self._client.poll(min(timer.remaining_ms(), 100))
            finally:
                self._release()
            timer.update()
        return telemetry.client_instance_id(0)

    def _close_quietly(self) -> None:
        self._closed = True
        for name, close in (("interceptors", getattr(self._interceptors, "close", None)),
                            *[("deserializer", getattr(d, "close", None)) for d in self._deserializers],
                            ("network client", getattr(self._client, "close", None))):
            if close is not None:
                try:
                    close()
                except Exception:
                    log.error("%sFailed to close %s", getattr(self, "_log_context", ""), name, exc_info=True)
        metadata = getattr(self, "_metadata", None)
        if metadata is not None:
            metadata.close()
        if self._metrics is not None:
            self._metrics.close()
        log.debug("%sKafka consumer has been closed", getattr(self, "_log_context", ""))

    def metrics(self) -> dict[MetricName, KafkaMetric]:
        """The consumer's metrics by :class:`MetricName` (Kafka's ``metrics()``): ``consumer-fetch-manager-metrics``
        (records-consumed-rate, fetch-latency-avg, records-lag-max; per topic; per partition records-lag and
        records-lead), ``consumer-coordinator-metrics`` (commit-latency-avg, rebalance-rate-per-hour,
        last-heartbeat-seconds-ago, assigned-partitions, ...), ``consumer-metrics`` and ``consumer-node-metrics``
        (network), ``app-info``. Thread-safe (like Kafka's, the one method besides ``wakeup`` that is)."""
        if self._metrics is None:
            raise IllegalStateError("The consumer was not constructed")
        return self._metrics.metrics()

    def __enter__(self) -> KafkaConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KafkaConsumer(client_id={getattr(self, 'client_id', None)!r}, group_id={getattr(self, 'group_id', None)!r})"

    def seek(self, partition: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        """Fetch ``partition`` from ``offset`` on the next ``poll``."""
        om = offset if isinstance(offset, OffsetAndMetadata) else OffsetAndMetadata(int(offset))
        if om.offset < 0:
            raise ValueError("seek offset must not be a negative number")
        self._acquire_and_ensure_open()
        try:
            log.info("%sSeeking to offset %d for partition %s", self._log_context, om.offset, partition)
            if om.leader_epoch is not None:
                self._metadata.update_last_seen_epoch_if_newer(partition, om.leader_epoch)
            self._subscriptions.seek(partition, om.offset, om.leader_epoch, current_leader(self._metadata, partition))
            self._fetcher.clear_buffered_data_for(partition)
        finally:
            self._release()

    def _seek_to(self, partitions: Iterable[TopicPartition] | None, strategy: OffsetResetStrategy) -> None:
        self._acquire_and_ensure_open()
        try:
            targets = self._subscriptions.assigned_partitions() if partitions is None else list(partitions)
            for tp in targets:
                log.info("%sSeeking to %s offset of partition %s", self._log_context, strategy.name, tp)
                self._subscriptions.request_offset_reset(tp, strategy)
                self._fetcher.clear_buffered_data_for(tp)
        finally:
            self._release()

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Reset to the earliest offset lazily (on the next ``poll``/``position``); ``None`` = all assigned."""
        self._seek_to(partitions, OffsetResetStrategy.EARLIEST)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Reset to the latest offset (LSO with ``read_committed``) lazily; ``None`` = all assigned."""
        self._seek_to(partitions, OffsetResetStrategy.LATEST)

    def position(self, partition: TopicPartition, timeout: Timeout = None) -> int:
        """The offset of the next record to fetch, looking it up (committed offset / reset) if needed."""
        self._acquire_and_ensure_open()
        try:
            if not self._subscriptions.is_assigned(partition):
                raise IllegalStateError("You can only check the position for partitions assigned to this consumer.")
            timer = self._timer(timeout)
            while True:
                offset = self._subscriptions.position(partition)
                if offset is not None:
                    return int(offset)
                self._update_fetch_positions(timer)
                offset = self._subscriptions.position(partition)
                if offset is not None:
                    return int(offset)
                self._client.poll(timer.remaining_ms())
                timer.update()
                if timer.is_expired():
                    raise KafkaTimeoutError(f"Timeout of {timer.timeout_ms}ms expired before the position for "
                                            f"partition {partition} could be determined")
        finally:
            self._release()

    def committed(self, partitions: TopicPartition | Iterable[TopicPartition],
                  timeout: Timeout = None) -> Any:
        """The last committed offsets: ``{partition: OffsetAndMetadata | None}`` for a collection, or one
        ``OffsetAndMetadata | None`` for a single partition."""
        self._acquire_and_ensure_open()
        start = self._time.nanoseconds()
        try:
            coordinator = self._require_group()
            wanted = {partitions} if isinstance(partitions, TopicPartition) else set(partitions)
            timer = self._timer(timeout)
            offsets = coordinator.fetch_committed_offsets(wanted, timer)
            if offsets is None:
                raise KafkaTimeoutError(f"Timeout of {timer.timeout_ms}ms expired before the last committed offset "
                                        f"for partitions {sorted(wanted)} could be determined.")
            result = {tp: offsets.get(tp) for tp in wanted}
            return result[partitions] if isinstance(partitions, TopicPartition) else result
        finally:
            self._committed_time.record(self._time.nanoseconds() - start)
            self._release()

    # ------------------------------------------------------------------------------ offset lookups

    def _with_topics(self, partitions: Iterable[TopicPartition], timer: Timer) -> None:
        """Make sure metadata knows the partitions' topics (transient topics for unsubscribed ones)."""
        topics = {tp.topic for tp in partitions}
        missing = topics - self._metadata.fetch().topics()
        if missing:
            self._metadata.add_transient_topics(missing)
            self._client.await_metadata_update(timer)

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int],
                          timeout: Timeout = None) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The earliest offset whose timestamp is >= the given one per partition (``None`` if none)."""
        self._acquire_and_ensure_open()
        try:
            timer = self._timer(timeout)
            self._with_topics(timestamps, timer)
            return self._offset_fetcher.offsets_for_times(dict(timestamps), timer)
        finally:
            self._release()

    def beginning_offsets(self, partitions: Iterable[TopicPartition],
                          timeout: Timeout = None) -> dict[TopicPartition, int]:
        return self._edge_offsets(partitions, EARLIEST_TIMESTAMP, timeout)

    def end_offsets(self, partitions: Iterable[TopicPartition],
                    timeout: Timeout = None) -> dict[TopicPartition, int]:
        """The high watermark (last stable offset with ``read_committed``) of each partition."""
        return self._edge_offsets(partitions, LATEST_TIMESTAMP, timeout)

    def _edge_offsets(self, partitions: Iterable[TopicPartition], timestamp: int,
                      timeout: Timeout) -> dict[TopicPartition, int]:
        self._acquire_and_ensure_open()
        try:
            wanted = list(partitions)
            timer = self._timer(timeout)
            self._with_topics(wanted, timer)
            return self._offset_fetcher.beginning_or_end_offsets(wanted, timestamp, timer)
        finally:
            self._release()

    def partitions_for(self, topic: str, timeout: Timeout = None) -> list[Any]:
        """The topic's partitions (``PartitionInfo``), fetching metadata if needed; ``[]`` if unknown."""
        self._acquire_and_ensure_open()
        try:
            cluster = self._metadata.fetch()
            infos = cluster.partition_infos_for_topic(topic)
            if infos:
                return infos
            timer = self._timer(timeout)
            self._metadata.add_transient_topics([topic])
            while not self._metadata.fetch().partition_infos_for_topic(topic) and timer.not_expired():
                if not self._client.await_metadata_update(timer):
                    break
                self._metadata.maybe_throw_exception_for_topic(topic)
            return self._metadata.fetch().partition_infos_for_topic(topic)
        finally:
            self._release()

    def list_topics(self, timeout: Timeout = None) -> dict[str, list[Any]]:
        """Every topic the cluster reports (internal ones excluded unless configured), with partitions."""
        self._acquire_and_ensure_open()
        try:
            from strom.network.cluster import PartitionInfo
            from strom.network.metadata import metadata_request

            timer = self._timer(timeout)
            node = self._client.least_loaded_node()
            while node is None and timer.not_expired():
                self._client.await_metadata_update(timer)
                node = self._client.least_loaded_node()
            if node is None:
                raise KafkaTimeoutError("Timeout expired while fetching topic metadata")
            future = self._client.send(node, metadata_request(None, False), min_version=1)
            if not self._client.poll_future(future, timer):
                raise KafkaTimeoutError("Timeout expired while fetching topic metadata")
            if future.failed():
                raise future.exception
            include_internal = self._metadata.include_internal_topics
            out: dict[str, list[Any]] = {}
            nodes = {b.node_id: b for b in future.value.brokers}
            for topic in future.value.topics:
                if topic.error_code or topic.name is None or (topic.is_internal and not include_internal):
                    continue
                out[topic.name] = [PartitionInfo(topic.name, p.partition_index, _node(nodes.get(p.leader_id)))
                                   for p in sorted(topic.partitions, key=lambda p: p.partition_index)]
            return out
        finally:
            self._release()

    # ----------------------------------------------------------------------------------- pausing

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop fetching from these (assigned) partitions until ``resume``."""
        self._acquire_and_ensure_open()
        try:
            for tp in partitions:
                log.debug("%sPausing partition %s", self._log_context, tp)
                self._subscriptions.pause(tp)
        finally:
            self._release()

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._acquire_and_ensure_open()
        try:
            for tp in partitions:
                log.debug("%sResuming partition %s", self._log_context, tp)
                self._subscriptions.resume(tp)
        finally:
            self._release()

    def paused(self) -> set[TopicPartition]:
        self._acquire_and_ensure_open()
        try:
            return self._subscriptions.paused_partitions()
        finally:
            self._release()

    def current_lag(self, partition: TopicPartition) -> int | None:
        """Lag from the last fetch response (``None`` if unknown); no request is sent."""
        self._acquire_and_ensure_open()
        try:
            return self._subscriptions.partition_lag(partition, self._fetcher.read_committed)
        finally:
            self._release()


def _node(broker: Any) -> Any:
    if broker is None:
        return None
    from strom.common.structs import Node

    return Node(broker.node_id, broker.host, broker.port, broker.rack)
