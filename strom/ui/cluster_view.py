"""What the web console shows, read through the public clients only: an ``AdminClient`` for the cluster,
topics, offsets and groups, and a group-less ``KafkaConsumer`` for the message browser. Because nothing else
is used, the console watches any Kafka cluster, not only strom.

Rates come from the same metrics library the clients use: a sampler thread reads every partition's end
offset and every group's committed offsets each ``sample_interval_s`` and records the increments into
``Meter`` sensors of the console's own registry (``console-topic-metrics`` messages-in-rate per topic,
``console-group-metrics`` records-consumed-rate and lag per group); each reading is also kept in a short
history for the charts. The same registry is served on ``/metrics`` with kafka_exporter's lag series.

Threading: thread-safe. The admin client is thread-safe; the consumer is not, so the browser holds a lock;
snapshots are cached for ``cache_ttl_s`` so many page loads cost one round of requests.
"""

from __future__ import annotations

import json
import logging
import threading
import time as _time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from strom.admin import AdminClient, NewTopic, OffsetSpec
from strom.admin.models import ConsumerGroupState, TopicDescription
from strom.common.error_codes import UnknownTopicOrPartitionError
from strom.common.structs import Node, OffsetAndMetadata, TopicPartition
from strom.consumer import KafkaConsumer
from strom.metrics import Meter, MetricConfig, Metrics, Sensor, WindowedSum

__all__ = ["ClusterView", "NotFound", "TopicRow", "PartitionRow", "GroupRow", "GroupPartitionRow", "Message",
           "decode_bytes"]

log = logging.getLogger(__name__)

_TIMEOUT_S = 15.0
HISTORY_POINTS = 120


class NotFound(LookupError):
    """A topic or group the cluster does not have (the console answers 404)."""


@dataclass(frozen=True, slots=True)
class PartitionRow:
    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    start_offset: int
    end_offset: int
    size: int | None = None  # bytes on disk on the leader (DescribeLogDirs; None when the cluster does not tell)

    @property
    def messages(self) -> int:
        return max(0, self.end_offset - self.start_offset)

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


@dataclass(frozen=True, slots=True)
class TopicRow:
    name: str
    internal: bool
    partitions: tuple[PartitionRow, ...]

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def messages(self) -> int:
        return sum(p.messages for p in self.partitions)

    @property
    def under_replicated(self) -> int:
        return sum(1 for p in self.partitions if p.under_replicated)

    @property
    def offline(self) -> int:
        return sum(1 for p in self.partitions if p.leader is None)

    @property
    def size(self) -> int | None:
        """Bytes on disk of the leaders' replicas, when every partition's is known."""
        sizes = [p.size for p in self.partitions]
        return None if not sizes or None in sizes else sum(s for s in sizes if s is not None)


@dataclass(frozen=True, slots=True)
class GroupPartitionRow:
    topic: str
    partition: int
    committed: int | None
    end_offset: int | None
    member: str | None

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.end_offset is None:
            return None
        return max(0, self.end_offset - self.committed)


@dataclass(frozen=True, slots=True)
class GroupRow:
    group_id: str
    state: str
    members: tuple[tuple[str, str, str, tuple[str, ...]], ...]  # (member id, client id, host, partitions)
    partition_assignor: str
    coordinator: int | None
    partitions: tuple[GroupPartitionRow, ...] = field(default=())

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)

    @property
    def topics(self) -> list[str]:
        return sorted({p.topic for p in self.partitions})


@dataclass(frozen=True, slots=True)
class Message:
    partition: int
    offset: int
    timestamp: int
    key: str
    key_format: str
    value: str
    value_format: str
    headers: tuple[tuple[str, str], ...]


def decode_bytes(data: bytes | None) -> tuple[str, str]:
    """``(text, format)``: ``null``, pretty JSON, UTF-8 text, or hex for binary data."""
    if data is None:
        return "null", "null"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data.hex(" "), "hex"
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return json.dumps(json.loads(stripped), indent=2, ensure_ascii=False), "json"
        except ValueError:
            pass
    if any(ord(c) < 32 and c not in "\t\r\n" for c in text):
        return data.hex(" "), "hex"
    return text, "text"


class _Series:
    """Recent readings of a rate or a gauge for a chart: ``(epoch ms, value)``."""

    __slots__ = ("points",)

    def __init__(self) -> None:
        self.points: deque[tuple[int, float]] = deque(maxlen=HISTORY_POINTS)


class ClusterView:
    """The console's window on a cluster (see the module docstring). ``close()`` stops it."""

    def __init__(self, bootstrap_servers: str, *, client_configs: dict[str, Any] | None = None,
                 sample_interval_s: float = 5.0, cache_ttl_s: float = 2.0,
                 clock: Callable[[], float] = _time.time) -> None:
        configs = {"bootstrap.servers": bootstrap_servers, **(client_configs or {})}
        self.admin = AdminClient(dict(configs), client_id="strom-ui-admin")
        self._consumer: KafkaConsumer | None = None
        self._consumer_configs = configs
        self._consumer_lock = threading.Lock()
        self._clock = clock
        self._cache_ttl_s = cache_ttl_s
        self._cache: dict[str, tuple[float, Any]] = {}
        self._cache_lock = threading.Lock()
        self._generation = 0  # bumped by invalidate(): a load that began before a write must not be cached
        self.metrics = Metrics(MetricConfig(samples=2, time_window_ms=max(1000, int(sample_interval_s * 3000))))
        self._sensors: dict[str, Sensor] = {}
        self._history: dict[str, _Series] = {}
        self._history_lock = threading.Lock()
        self._last_topic_offsets: dict[str, int] = {}
        self._last_group_offsets: dict[str, int] = {}
        self._lag: dict[tuple[str, str, int], int] = {}
        self.sample_interval_s = sample_interval_s
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    # ------------------------------------------------------------------------------------ lifecycle

    def start_sampling(self) -> None:
        if self._sampler is None and self.sample_interval_s > 0:
            self._sampler = threading.Thread(target=self._sample_loop, name="strom-ui-sampler", daemon=True)
            self._sampler.start()

    def close(self) -> None:
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(10)
        with self._consumer_lock:
            if self._consumer is not None:
                self._consumer.close(timeout=5)
                self._consumer = None
        self.admin.close(timeout=5)
        self.metrics.close()

    # --------------------------------------------------------------------------------------- cached

    def _cached(self, key: str, load: Callable[[], Any]) -> Any:
        """A snapshot at most ``cache_ttl_s`` old — or, while the sampler runs, at most two sample intervals
        old: the sampler refreshes the cluster-wide snapshots, so page loads rarely wait for the cluster (a
        ListOffsets of thousands of partitions can take seconds)."""
        now = self._clock()
        ttl = self._cache_ttl_s
        if self._sampler is not None and self._sampler.is_alive():
            ttl = max(ttl, 2 * self.sample_interval_s)
        with self._cache_lock:
            hit = self._cache.get(key)
            if hit is not None and now - hit[0] < ttl:
                return hit[1]
            generation = self._generation
        return self._store(key, load(), generation, now)

    def _store(self, key: str, value: Any, generation: int, now: float | None = None) -> Any:
        """Cache ``value`` unless the cache was invalidated since its load began (``generation``): a sampler
        round that listed topics before a deletion would otherwise show the deleted topic again."""
        with self._cache_lock:
            if generation == self._generation:
                self._cache[key] = (self._clock() if now is None else now, value)
        return value

    def invalidate(self) -> None:
        with self._cache_lock:
            self._cache.clear()
            self._generation += 1

    # -------------------------------------------------------------------------------------- cluster

    def cluster(self) -> tuple[str | None, Node | None, tuple[Node, ...]]:
        """``(cluster id, controller, brokers)``."""
        def load() -> Any:
            d = self.admin.describe_cluster().description().result(_TIMEOUT_S)
            return d.cluster_id, d.controller, tuple(sorted(d.nodes, key=lambda n: n.node_id))
        return self._cached("cluster", load)

    # --------------------------------------------------------------------------------------- topics

    def topic_names(self, include_internal: bool = True) -> list[str]:
        names = self._cached("topic-names", lambda: sorted(
            self.admin.list_topics(list_internal=True).names().result(_TIMEOUT_S)))
        return names if include_internal else [n for n in names if not n.startswith("__")]

    def topics(self) -> list[TopicRow]:
        """Every topic with its partitions and offsets (one Metadata and two ListOffsets rounds)."""
        return self._cached("topics", lambda: self._load_topics(self.topic_names()))

    def topic(self, name: str) -> TopicRow:
        rows = self._load_topics([name])
        if not rows:
            raise NotFound(f"Topic {name!r} does not exist")
        return self._with_sizes(rows[0])

    def _with_sizes(self, row: TopicRow) -> TopicRow:
        """Each partition's size on its leader (DescribeLogDirs, the sizes Kafka consoles show); the row as it is
        when the cluster does not tell (a broker without the API, no DESCRIBE on the cluster)."""
        leaders = sorted({p.leader for p in row.partitions if p.leader is not None})
        if not leaders:
            return row
        try:
            found = self.admin.describe_log_dirs(leaders).all().result(_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - sizes are optional on the page
            log.debug("no log dir sizes for %s: %s", row.name, e)
            return row
        sizes = {(broker, tp.partition): r.size for broker, dirs in found.items() for d in dirs.values()
                 for tp, r in d.replica_infos.items() if tp.topic == row.name and not r.is_future}
        return replace(row, partitions=tuple(replace(p, size=sizes.get((p.leader, p.partition)))
                                             for p in row.partitions))

    def _load_topics(self, names: Iterable[str]) -> list[TopicRow]:
        names = list(names)
        if not names:
            return []
        descriptions: dict[str, TopicDescription] = {}
        for name, future in self.admin.describe_topics(names).values().items():
            try:
                descriptions[name] = future.result(_TIMEOUT_S)
            except UnknownTopicOrPartitionError:
                continue
        tps = [TopicPartition(d.name, p.partition) for d in descriptions.values() for p in d.partitions]
        starts = self._offsets(tps, OffsetSpec.earliest())
        ends = self._offsets(tps, OffsetSpec.latest())
        rows = []
        for name in sorted(descriptions):
            d = descriptions[name]
            parts = tuple(PartitionRow(
                p.partition, p.leader.node_id if p.leader is not None else None,
                tuple(n.node_id for n in p.replicas), tuple(n.node_id for n in p.isr),
                starts.get(TopicPartition(name, p.partition), -1), ends.get(TopicPartition(name, p.partition), -1))
                for p in sorted(d.partitions, key=lambda p: p.partition))
            rows.append(TopicRow(name, d.internal, parts))
        return rows

    def _offsets(self, tps: list[TopicPartition], spec: OffsetSpec) -> dict[TopicPartition, int]:
        if not tps:
            return {}
        out = {}
        for tp, future in self.admin.list_offsets({tp: spec for tp in tps}).values().items():
            try:
                out[tp] = future.result(_TIMEOUT_S).offset
            except Exception as e:  # a partition without a leader has no offsets to show
                log.debug("no offsets for %s: %s", tp, e)
        return out

    def create_topic(self, name: str, partitions: int, replication_factor: int) -> None:
        self.admin.create_topics([NewTopic(name, partitions, replication_factor)]).all().result(_TIMEOUT_S)
        self.invalidate()

    def delete_topic(self, name: str) -> None:
        self.admin.delete_topics([name]).all().result(_TIMEOUT_S)
        self.invalidate()

    # --------------------------------------------------------------------------------------- groups

    def group_ids(self) -> list[str]:
        return self._cached("group-ids", lambda: sorted(
            g.group_id for g in self.admin.list_consumer_groups().all().result(_TIMEOUT_S)))

    def groups(self) -> list[GroupRow]:
        return self._cached("groups", lambda: self._load_groups(self.group_ids()))

    def group(self, group_id: str) -> GroupRow:
        (row,) = self._load_groups([group_id])
        if row.state == ConsumerGroupState.DEAD.value and not row.partitions:
            raise NotFound(f"Consumer group {group_id!r} does not exist")
        return row

    def _load_groups(self, group_ids: list[str]) -> list[GroupRow]:
        """Groups with members and lag: one DescribeGroups, one OffsetFetch per group, one ListOffsets round."""
        if not group_ids:
            return []
        described = self.admin.describe_consumer_groups(group_ids).result(_TIMEOUT_S)
        live = [g for g in group_ids if described[g].state is not ConsumerGroupState.DEAD]
        committed: dict[str, dict[TopicPartition, OffsetAndMetadata | None]] = {}
        if live:
            committed = self.admin.list_consumer_group_offsets({g: None for g in live}).all().result(_TIMEOUT_S)
        owners: dict[str, dict[TopicPartition, str]] = {}
        all_tps: set[TopicPartition] = set()
        for g in group_ids:
            owner = owners[g] = {}
            for m in described[g].members:
                for tp in m.assignment.topic_partitions:
                    owner[tp] = m.consumer_id
            all_tps |= set(owner) | set(committed.get(g, {}))
        ends = self._offsets(sorted(all_tps, key=lambda tp: (tp.topic, tp.partition)), OffsetSpec.latest())
        rows = []
        for g in group_ids:
            d = described[g]
            offsets = committed.get(g, {})
            owner = owners[g]
            members = []
            for m in d.members:
                assigned = sorted(m.assignment.topic_partitions, key=lambda tp: (tp.topic, tp.partition))
                members.append((m.consumer_id, m.client_id, m.host,
                                tuple(f"{tp.topic}-{tp.partition}" for tp in assigned)))
            tps = sorted(set(offsets) | set(owner), key=lambda tp: (tp.topic, tp.partition))
            partitions = tuple(GroupPartitionRow(
                tp.topic, tp.partition, om.offset if (om := offsets.get(tp)) is not None else None, ends.get(tp),
                owner.get(tp)) for tp in tps)
            rows.append(GroupRow(g, d.state.value, tuple(members), d.partition_assignor,
                                 d.coordinator.node_id if d.coordinator is not None else None, partitions))
        return rows

    def reset_offsets(self, group_id: str, to: str, offset: int | None = None) -> dict[TopicPartition, int]:
        """Set the committed offsets of an inactive group: ``to`` is ``earliest``, ``latest`` or ``offset``."""
        row = self.group(group_id)
        tps = [TopicPartition(p.topic, p.partition) for p in row.partitions]
        if to == "offset":
            if offset is None or offset < 0:
                raise ValueError("an offset of 0 or more is required")
            targets = {tp: offset for tp in tps}
        elif to in ("earliest", "latest"):
            targets = self._offsets(tps, OffsetSpec.earliest() if to == "earliest" else OffsetSpec.latest())
        else:
            raise ValueError(f"unknown reset target {to!r}: expected earliest, latest or offset")
        self.admin.alter_consumer_group_offsets(group_id, targets).all().result(_TIMEOUT_S)
        self.invalidate()
        return targets

    # ------------------------------------------------------------------------------------- messages

    def newest_messages(self, topic: str, partition: int, limit: int = 20) -> list[Message]:
        """The last ``limit`` records of a partition (oldest first), decoded for display."""
        row = self.topic(topic)
        part = next((p for p in row.partitions if p.partition == partition), None)
        if part is None:
            raise NotFound(f"Topic {topic!r} has no partition {partition}")
        start = max(part.start_offset, part.end_offset - limit)
        if part.end_offset <= start:
            return []
        tp = TopicPartition(topic, partition)
        out: list[Message] = []
        with self._consumer_lock:
            consumer = self._browser()
            consumer.assign([tp])
            consumer.seek(tp, start)
            deadline = _time.monotonic() + _TIMEOUT_S
            while True:
                for record in consumer.poll(0.2).records(tp):
                    if record.offset >= part.end_offset:
                        break
                    key, key_format = decode_bytes(record.key)
                    value, value_format = decode_bytes(record.value)
                    headers = tuple((k, decode_bytes(v)[0]) for k, v in record.headers)
                    out.append(Message(partition, record.offset, record.timestamp, key, key_format, value,
                                       value_format, headers))
                # done at the end offset seen above (gaps of compaction or transaction markers included)
                if consumer.position(tp, timeout=_TIMEOUT_S) >= part.end_offset or _time.monotonic() > deadline:
                    break
            consumer.assign([])
        return out[-limit:]

    def _browser(self) -> KafkaConsumer:
        if self._consumer is None:
            self._consumer = KafkaConsumer(dict(self._consumer_configs), client_id="strom-ui-browser",
                                           key_deserializer="bytes", value_deserializer="bytes",
                                           enable_auto_commit=False, max_poll_records=500,
                                           fetch_max_wait_ms=100)  # at the end offset, do not park 500 ms
        return self._consumer

    # ---------------------------------------------------------------------------------------- rates

    def _sensor(self, name: str, group: str, tags: dict[str, str]) -> Sensor:
        sensor = self._sensors.get(name)
        if sensor is None:
            m = self.metrics
            sensor = m.sensor(name)
            if group == "console-topic-metrics":
                sensor.add(None, Meter(m.metric_name("messages-in-rate", group, "Messages appended per second",
                                                     tags),
                                       m.metric_name("messages-in-total", group, "Messages appended since the "
                                                                                  "console started", tags),
                                       WindowedSum()))
            else:
                sensor.add(None, Meter(m.metric_name("records-consumed-rate", group, "Committed records per "
                                                                                       "second", tags),
                                       m.metric_name("records-consumed-total", group, "Records committed since "
                                                                                       "the console started", tags),
                                       WindowedSum()))
            self._sensors[name] = sensor
        return sensor

    def _remember(self, key: str, value: float, now_ms: int) -> None:
        with self._history_lock:
            series = self._history.get(key)
            if series is None:
                series = self._history[key] = _Series()
            series.points.append((now_ms, value))

    def history(self, key: str) -> list[tuple[int, float]]:
        """Readings for a chart: ``topic:<name>``, ``group:<id>``, ``group-lag:<id>``, ``cluster``."""
        with self._history_lock:
            series = self._history.get(key)
            return list(series.points) if series is not None else []

    def sample_once(self) -> None:
        """Read offsets once and record the increments (the sampler thread calls this)."""
        now_ms = self.metrics.time.milliseconds()
        with self._cache_lock:
            generation = self._generation
        names = self._store("topic-names", sorted(self.admin.list_topics(list_internal=True).names()
                                                  .result(_TIMEOUT_S)), generation)
        topics = self._store("topics", self._load_topics(names), generation)
        total = 0.0
        for row in topics:
            end = sum(p.end_offset for p in row.partitions if p.end_offset >= 0)
            last = self._last_topic_offsets.get(row.name)
            self._last_topic_offsets[row.name] = end
            sensor = self._sensor(f"topic.{row.name}.messages-in", "console-topic-metrics", {"topic": row.name})
            sensor.record(max(0, end - last) if last is not None else 0, now_ms)
            rate = self._metric_value("messages-in-rate", "console-topic-metrics", {"topic": row.name})
            if not row.internal:
                total += rate
            self._remember(f"topic:{row.name}", rate, now_ms)
        self._remember("cluster", total, now_ms)
        lag: dict[tuple[str, str, int], int] = {}
        group_ids = self._store("group-ids", sorted(
            g.group_id for g in self.admin.list_consumer_groups().all().result(_TIMEOUT_S)), generation)
        for group in self._store("groups", self._load_groups(group_ids), generation):
            committed = sum(p.committed for p in group.partitions if p.committed is not None)
            last = self._last_group_offsets.get(group.group_id)
            self._last_group_offsets[group.group_id] = committed
            sensor = self._sensor(f"group.{group.group_id}.consumed", "console-group-metrics",
                                  {"group": group.group_id})
            sensor.record(max(0, committed - last) if last is not None else 0, now_ms)
            self._remember(f"group:{group.group_id}", self._metric_value(
                "records-consumed-rate", "console-group-metrics", {"group": group.group_id}), now_ms)
            self._remember(f"group-lag:{group.group_id}", float(group.total_lag), now_ms)
            for p in group.partitions:
                if p.lag is not None:
                    lag[(group.group_id, p.topic, p.partition)] = p.lag
        self._lag = lag

    def _metric_value(self, name: str, group: str, tags: dict[str, str]) -> float:
        metric = self.metrics.metric(self.metrics.metric_name(name, group, tags=tags))
        return float(metric.metric_value()) if metric is not None else 0.0

    def consumer_lag(self) -> dict[tuple[str, str, int], int]:
        """Lag per (group, topic, partition) at the last sample."""
        return dict(self._lag)

    def _sample_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception:  # the cluster may be down for a while: keep sampling
                log.warning("strom ui: sampling failed", exc_info=True)
            self._stop.wait(self.sample_interval_s)
