"""Options of ``format("strom")``: the names, defaults and error messages of Spark's Kafka source and sink.

Spark passes options case-insensitively (``CaseInsensitiveDict``), so every lookup here is by lower-case key.
``kafka.*`` options go to strom's consumer / producer with the prefix removed (``kafka.client.id`` ->
``client.id``); the few that Spark's connector refuses are refused here with the same kind of message. Option
errors raise :class:`OptionError` (a ``ValueError``; Spark raises ``IllegalArgumentException``).
Pure code: no pyspark, no network.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from strom.common.structs import TopicPartition
from strom.spark.offsets import (
    EARLIEST,
    LATEST,
    PartitionOffsets,
    parse_assign,
    parse_partition_offsets,
    parse_partition_timestamps,
)

__all__ = ["OptionError", "OffsetSpec", "SourceOptions", "SinkOptions", "parse_source_options",
           "parse_sink_options", "parse_bool", "parse_duration_ms"]

STRATEGY_KEYS = ("subscribe", "subscribepattern", "assign")
_DATA_LOSS_HINT = ("Some data may have been lost because they are not available in Kafka any more; either the data "
                   "was aged out by Kafka or the topic may have been deleted before all the data in the topic was "
                   "processed.")
FAIL_ON_DATA_LOSS_TRUE_HINT = (_DATA_LOSS_HINT + " If you don't want your streaming query to fail on such cases, "
                               "set the source option \"failOnDataLoss\" to \"false\".")
FAIL_ON_DATA_LOSS_FALSE_HINT = (_DATA_LOSS_HINT + " If you want your streaming query to fail on such cases, set the "
                                "source option \"failOnDataLoss\" to \"true\".")


class OptionError(ValueError):
    """A bad option (Spark's ``IllegalArgumentException``)."""


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends (Spark's ``KafkaOffsetRangeLimit``).

    ``kind``: ``earliest``, ``latest``, ``offsets`` (per partition, -2/-1 allowed), ``timestamp`` (one for
    every partition) or ``timestamps`` (per partition).
    """

    kind: str
    offsets: PartitionOffsets = field(default_factory=dict)
    timestamp: int | None = None
    latest_if_no_match: bool = False  # startingOffsetsByTimestampStrategy=latest


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    strategy: str  # "assign" | "subscribe" | "subscribePattern"
    assign: tuple[TopicPartition, ...] = ()
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    starting: OffsetSpec = OffsetSpec("latest")
    ending: OffsetSpec = OffsetSpec("latest")
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    poll_timeout_ms: int = 120_000
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10
    consumer_config: dict[str, str] = field(default_factory=dict)
    # Spark's Kafka source: ``kafka.group.id`` for every consumer when set, else a unique id per query,
    # ``<groupIdPrefix>-<uuid>-driver-0`` on the driver and ``...-executor`` on the executors.
    driver_group_id: str = ""
    executor_group_id: str = ""

    def matches(self, topic: str) -> bool:
        """Whether a topic is subscribed (``subscribe`` / ``subscribePattern``; ``assign`` is by partition)."""
        if self.strategy == "subscribe":
            return topic in self.topics
        if self.strategy == "subscribePattern":
            assert self.pattern is not None
            return re.fullmatch(self.pattern, topic) is not None
        return any(tp.topic == topic for tp in self.assign)


@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None = None
    producer_config: dict[str, str] = field(default_factory=dict)
    skip_committed_tasks: bool = True
    marker_group_prefix: str = "strom-spark-sink"
    transactional: bool = False  # each task's rows (and its commit marker) in one Kafka transaction


def parse_bool(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "false"):
        return v == "true"
    raise OptionError(f'For input string: "{value}" (option \'{key}\' must be true or false)')


def _parse_long(key: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise OptionError(f'For input string: "{value}" (option \'{key}\' must be a number)') from None


_UNITS_MS = {"ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(key: str, value: str) -> int:
    """Spark's ``timeStringAsMs``: ``15m``, ``10s``, ``250ms``, a bare number is milliseconds."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", value.lower())
    if m is None or m.group(2) not in ("", *_UNITS_MS):
        raise OptionError(f"Invalid time string '{value}' for option '{key}' (e.g. 250ms, 10s, 15m)")
    return int(m.group(1)) * _UNITS_MS.get(m.group(2) or "ms", 1)


def _kafka_params(opts: Mapping[str, str]) -> dict[str, str]:
    return {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _strategy(opts: Mapping[str, str]) -> tuple[str, tuple[TopicPartition, ...], tuple[str, ...], str | None]:
    given = [k for k in STRATEGY_KEYS if k in opts]
    if not given:
        raise OptionError("One of the following options must be specified for Kafka source: "
                          f"{', '.join(STRATEGY_KEYS)}. See the docs for more details.")
    if len(given) > 1:
        raise OptionError("Only one of the following options can be specified for Kafka source: "
                          f"{', '.join(STRATEGY_KEYS)}. See the docs for more details.")
    key, value = given[0], opts[given[0]]
    if key == "assign":
        if not value.strip().startswith("{"):
            raise OptionError(f"No topicpartitions to assign as specified value for option 'assign' is '{value}'")
        return "assign", tuple(parse_assign(value)), (), None
    if key == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError(f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'")
        return "subscribe", (), topics, None
    pattern = value.strip()
    if not pattern:
        raise OptionError("Pattern to subscribe is empty as specified value for option 'subscribePattern' "
                          f"is '{value}'")
    try:
        re.compile(pattern)
    except re.error as e:
        raise OptionError(f"Invalid pattern for option 'subscribePattern' '{value}': {e}") from None
    return "subscribePattern", (), (), pattern


def _check_consumer_params(opts: Mapping[str, str]) -> None:
    if "kafka.bootstrap.servers" not in opts:
        raise OptionError("Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer")
    if "kafka.auto.offset.reset" in opts:
        raise OptionError(
            "Kafka option 'auto.offset.reset' is not supported. Instead set the source option 'startingOffsets' to "
            "'earliest' or 'latest' to specify where to start. Structured Streaming manages which offsets are "
            "consumed internally, rather than relying on the kafkaConsumer to do it. This will ensure that no data "
            "is missed when new topics/partitions are dynamically subscribed. Note that 'startingOffsets' only "
            "applies when a new Streaming query is started, and that resuming will always pick up from where the "
            "query left off. See the docs for more details.")
    for what in ("key", "value"):
        if f"kafka.{what}.deserializer" in opts:
            raise OptionError(
                f"Kafka option '{what}.deserializer' is not supported, as {what}s are deserialized as byte arrays "
                f"with ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize the {what}s.")
    for c in ("enable.auto.commit", "interceptor.classes"):
        if f"kafka.{c}" in opts:
            raise OptionError(f"Kafka option '{c}' is not supported.")


def _offset_spec(opts: Mapping[str, str], ts_key: str, by_ts_key: str, offsets_key: str, default: str,
                 latest_if_no_match: bool) -> OffsetSpec:
    """Precedence as in Spark: global timestamp, then per-partition timestamps, then offsets."""
    if ts_key in opts:
        return OffsetSpec("timestamp", timestamp=_parse_long(ts_key, opts[ts_key]),
                          latest_if_no_match=latest_if_no_match)
    if by_ts_key in opts:
        return OffsetSpec("timestamps", offsets=parse_partition_timestamps(opts[by_ts_key].strip()),
                          latest_if_no_match=latest_if_no_match)
    value = opts.get(offsets_key, default).strip()
    if value.lower() in ("earliest", "latest"):
        return OffsetSpec(value.lower())
    return OffsetSpec("offsets", offsets=parse_partition_offsets(value))


def parse_source_options(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    """Validate and parse reader options the way Spark's ``KafkaSourceProvider`` does."""
    opts = _lower(options)
    strategy, assign, topics, pattern = _strategy(opts)
    _check_consumer_params(opts)
    if "minpartitions" in opts and _parse_long("minPartitions", opts["minpartitions"]) <= 0:
        raise OptionError("minPartitions must be positive")
    if "maxrecordsperpartition" in opts and _parse_long("maxRecordsPerPartition", opts["maxrecordsperpartition"]) <= 0:
        raise OptionError("maxRecordsPerPartition must be positive")
    strategy_value = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy_value not in ("error", "latest"):
        raise OptionError(f"Invalid value '{opts['startingoffsetsbytimestampstrategy']}' for option "
                          "'startingOffsetsByTimestampStrategy': expected 'error' or 'latest'")
    latest_if_none = strategy_value == "latest"
    starting = _offset_spec(opts, "startingtimestamp", "startingoffsetsbytimestamp", "startingoffsets",
                            "latest" if streaming else "earliest", latest_if_none)
    ending = OffsetSpec("latest")
    if streaming:
        if "endingoffsets" in opts:
            raise OptionError("ending offset not valid in streaming queries")
        if "endingtimestamp" in opts or "endingoffsetsbytimestamp" in opts:
            raise OptionError("ending timestamp not valid in streaming queries")
    else:
        ending = _offset_spec(opts, "endingtimestamp", "endingoffsetsbytimestamp", "endingoffsets", "latest", False)
        if starting.kind == "latest":
            raise OptionError("starting offset can't be latest for batch queries on Kafka")
        for tp, off in starting.offsets.items() if starting.kind == "offsets" else ():
            if off == LATEST:
                raise OptionError(f"startingOffsets for {tp} can't be latest for batch queries on Kafka")
        if ending.kind == "earliest":
            raise OptionError("ending offset can't be earliest for batch queries on Kafka")
        for tp, off in ending.offsets.items() if ending.kind == "offsets" else ():
            if off == EARLIEST:
                raise OptionError(f"ending offset for {tp} can't be earliest for batch queries on Kafka")
    max_per_trigger = _opt_long(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    min_per_trigger = _opt_long(opts, "minoffsetspertrigger", "minOffsetsPerTrigger")
    for name, v in (("maxOffsetsPerTrigger", max_per_trigger), ("minOffsetsPerTrigger", min_per_trigger)):
        if v is not None and v <= 0:
            raise OptionError(f"{name} must be positive")
    if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
        raise OptionError(f"The value of minOffsetPerTrigger({min_per_trigger}) is higher than the "
                          f"maxOffsetsPerTrigger({max_per_trigger}).")
    consumer = _kafka_params(opts)
    driver_group_id, executor_group_id = _group_ids(opts, consumer, streaming)
    return SourceOptions(
        bootstrap_servers=consumer["bootstrap.servers"], strategy=strategy, assign=assign, topics=topics,
        pattern=pattern, starting=starting, ending=ending,
        fail_on_data_loss=parse_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        include_headers=parse_bool("includeHeaders", opts.get("includeheaders", "false")),
        max_offsets_per_trigger=max_per_trigger, min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=parse_duration_ms("maxTriggerDelay", opts.get("maxtriggerdelay", "15m")),
        min_partitions=_opt_long(opts, "minpartitions", "minPartitions"),
        max_records_per_partition=_opt_long(opts, "maxrecordsperpartition", "maxRecordsPerPartition"),
        poll_timeout_ms=_opt_long(opts, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs") or 120_000,
        fetch_offset_num_retries=_opt_long(opts, "fetchoffset.numretries", "fetchOffset.numRetries") or 3,
        fetch_offset_retry_interval_ms=_opt_long(opts, "fetchoffset.retryintervalms",
                                                 "fetchOffset.retryIntervalMs") or 10,
        consumer_config=consumer,
        driver_group_id=driver_group_id,
        executor_group_id=executor_group_id,
    )


def _group_ids(opts: Mapping[str, str], kafka_params: Mapping[str, str], streaming: bool) -> tuple[str, str]:
    """The consumers' ``group.id`` on the driver and on the executors, as Spark's ``KafkaSourceProvider`` picks
    them: ``kafka.group.id`` for both when given (``groupIdPrefix`` is then ignored); else
    ``<groupIdPrefix>-<random UUID>`` (prefix ``spark-kafka-source`` for streaming, ``spark-kafka-relation``
    for batch reads) with ``-driver-0`` / ``-executor`` appended, so no query shares a group with another.
    The consumers read in assign mode and never commit: the id is what the brokers see for ACLs and quotas."""
    if "group.id" in kafka_params:
        return kafka_params["group.id"], kafka_params["group.id"]
    prefix = opts.get("groupidprefix", "spark-kafka-source" if streaming else "spark-kafka-relation")
    unique = f"{prefix}-{uuid.uuid4()}"
    return f"{unique}-driver-0", f"{unique}-executor"


def _opt_long(opts: Mapping[str, str], key: str, name: str) -> int | None:
    return _parse_long(name, opts[key]) if key in opts else None


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate and parse writer options the way Spark's Kafka sink does."""
    opts = _lower(options)
    if "kafka.bootstrap.servers" not in opts:
        raise OptionError("Option 'kafka.bootstrap.servers' must be specified for configuring Kafka producer")
    if "kafka.key.serializer" in opts:
        raise OptionError("Kafka option 'key.serializer' is not supported as keys are serialized with "
                          "ByteArraySerializer.")
    if "kafka.value.serializer" in opts:
        raise OptionError("Kafka option 'value.serializer' is not supported as value are serialized with "
                          "ByteArraySerializer.")
    if "kafka.transactional.id" in opts:
        raise OptionError("Kafka option 'transactional.id' is not supported: the strom sink chooses one "
                          "transactional id per query and Spark partition; set the option 'transactional' to "
                          "'true' instead (see docs/spark.md).")
    producer = _kafka_params(opts)
    topic = opts.get("topic")
    return SinkOptions(
        bootstrap_servers=producer["bootstrap.servers"], topic=topic.strip() if topic is not None else None,
        producer_config=producer,
        skip_committed_tasks=parse_bool("skipCommittedTasks", opts.get("skipcommittedtasks", "true")),
        marker_group_prefix=opts.get("commitmarkergroupprefix", "strom-spark-sink"),
        transactional=parse_bool("transactional", opts.get("transactional", "false")),
    )
