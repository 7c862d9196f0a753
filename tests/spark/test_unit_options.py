"""Option parsing and validation: Spark-Kafka's names, defaults and messages; the offset JSON formats."""

from __future__ import annotations

import re

import pytest

from strom.common.structs import TopicPartition as TP
from strom.spark.offsets import (
    offsets_from_dict,
    offsets_to_dict,
    offsets_to_json,
    parse_assign,
    parse_partition_offsets,
    parse_partition_timestamps,
)
from strom.spark.options import OptionError, parse_duration_ms, parse_sink_options, parse_source_options

pytestmark = pytest.mark.unit
BS = {"kafka.bootstrap.servers": "h:1"}


def src(streaming: bool = True, **opts: str) -> object:
    return parse_source_options({**BS, **opts}, streaming=streaming)


def test_offset_json_formats_round_trip_canonically() -> None:
    offsets = parse_partition_offsets('{"b":{"1":-1,"0":23},"a":{"10":-2,"2":5}}')
    assert offsets == {TP("b", 1): -1, TP("b", 0): 23, TP("a", 10): -2, TP("a", 2): 5}
    assert offsets_to_dict(offsets) == {"a": {"2": 5, "10": -2}, "b": {"0": 23, "1": -1}}
    assert offsets_to_json(offsets) == '{"a":{"2":5,"10":-2},"b":{"0":23,"1":-1}}'
    assert offsets_from_dict(offsets_to_dict(offsets)) == offsets
    assert parse_assign('{"t":[0,2],"u":[1]}') == [TP("t", 0), TP("t", 2), TP("u", 1)]
    assert parse_partition_timestamps('{"t":{"0":1700000000000}}') == {TP("t", 0): 1700000000000}


@pytest.mark.parametrize("parse, text, example", [
    (parse_assign, '{"t":{"0":1}}', '{"topicA":[0,1],"topicB":[0,1]}'),
    (parse_partition_offsets, '{"t":[0]}', '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'),
    (parse_partition_offsets, "nope", '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'),
    (parse_partition_timestamps, '{"t":{"0":"x"}}', '{"topicA": {"0": 123456789'),
])
def test_offset_json_errors_show_an_example(parse: object, text: str, example: str) -> None:
    with pytest.raises(ValueError) as e:
        parse(text)  # type: ignore[operator]
    assert str(e.value).startswith(f"Expected e.g. {example}") and str(e.value).endswith(f"got {text}")


def test_defaults_and_kafka_params() -> None:
    o = src(subscribe=" a, b ,", **{"kafka.client.id": "me", "failOnDataLoss": "FALSE", "maxOffsetsPerTrigger": "9"})
    assert o.strategy == "subscribe" and o.topics == ("a", "b")
    assert o.starting.kind == "latest" and o.fail_on_data_loss is False and o.max_offsets_per_trigger == 9
    assert o.consumer_config == {"bootstrap.servers": "h:1", "client.id": "me"}
    assert o.max_trigger_delay_ms == 15 * 60_000 and o.poll_timeout_ms == 120_000
    b = src(False, subscribepattern="x.*", STARTINGOFFSETS='{"x1":{"0":-2}}')  # keys are case-insensitive
    assert b.starting.kind == "offsets" and b.ending.kind == "latest" and b.matches("x1") and not b.matches("y")
    assert src(assign='{"t":[0]}').assign == (TP("t", 0),)


def test_timestamp_options_take_precedence_like_spark() -> None:
    o = src(subscribe="t", startingOffsets="earliest", startingOffsetsByTimestamp='{"t":{"0":5}}',
            startingTimestamp="7", startingOffsetsByTimestampStrategy="latest")
    assert o.starting.kind == "timestamp" and o.starting.timestamp == 7 and o.starting.latest_if_no_match
    o = src(subscribe="t", startingOffsets="earliest", startingOffsetsByTimestamp='{"t":{"0":5}}')
    assert o.starting.kind == "timestamps" and o.starting.offsets == {TP("t", 0): 5}
    o = src(False, subscribe="t", endingTimestamp="9")
    assert o.ending.kind == "timestamp" and o.ending.timestamp == 9


@pytest.mark.parametrize("streaming, opts, message", [
    (True, {}, "One of the following options must be specified for Kafka source: subscribe, subscribepattern, "
               "assign. See the docs for more details."),
    (True, {"subscribe": "a", "subscribePattern": "b"}, "Only one of the following options can be specified"),
    (True, {"subscribe": " , "}, "No topics to subscribe to as specified value for option 'subscribe' is ' , '"),
    (True, {"subscribePattern": " "}, "Pattern to subscribe is empty as specified value for option "
                                      "'subscribePattern' is ' '"),
    (True, {"assign": "t"}, "No topicpartitions to assign as specified value for option 'assign' is 't'"),
    (True, {"subscribe": "t", "kafka.key.deserializer": "x"}, "Kafka option 'key.deserializer' is not supported, "
                                                              "as keys are deserialized as byte arrays"),
    (True, {"subscribe": "t", "kafka.enable.auto.commit": "true"}, "Kafka option 'enable.auto.commit' is not"),
    (True, {"subscribe": "t", "kafka.interceptor.classes": "x"}, "Kafka option 'interceptor.classes' is not"),
    (True, {"subscribe": "t", "endingOffsets": "latest"}, "ending offset not valid in streaming queries"),
    (True, {"subscribe": "t", "endingTimestamp": "1"}, "ending timestamp not valid in streaming queries"),
    (False, {"subscribe": "t", "startingOffsets": "LATEST"}, "starting offset can't be latest for batch queries"),
    (False, {"subscribe": "t", "startingOffsets": '{"t":{"0":-1}}'},
     "startingOffsets for t-0 can't be latest for batch queries on Kafka"),
    (False, {"subscribe": "t", "endingOffsets": '{"t":{"1":-2}}'},
     "ending offset for t-1 can't be earliest for batch queries on Kafka"),
    (True, {"subscribe": "t", "minPartitions": "-1"}, "minPartitions must be positive"),
    (True, {"subscribe": "t", "maxOffsetsPerTrigger": "ten"}, 'For input string: "ten"'),
    (True, {"subscribe": "t", "failOnDataLoss": "yes"}, 'For input string: "yes"'),
    (True, {"subscribe": "t", "maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "6"},
     r"The value of minOffsetPerTrigger\(6\) is higher than the maxOffsetsPerTrigger\(5\)."),
    (True, {"subscribe": "t", "startingOffsetsByTimestampStrategy": "maybe"}, "expected 'error' or 'latest'"),
])
def test_rejected_source_options(streaming: bool, opts: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        src(streaming, **opts)


def test_bootstrap_servers_required() -> None:
    with pytest.raises(OptionError, match="Option 'kafka.bootstrap.servers' must be specified for configuring "
                                          "Kafka consumer"):
        parse_source_options({"subscribe": "t"}, streaming=True)
    with pytest.raises(OptionError, match="Option 'kafka.bootstrap.servers' must be specified for configuring "
                                          "Kafka producer"):
        parse_sink_options({"topic": "t"})


def test_sink_options() -> None:
    s = parse_sink_options({**BS, "topic": " out ", "kafka.linger.ms": "20"})
    assert s.topic == "out" and s.producer_config == {"bootstrap.servers": "h:1", "linger.ms": "20"}
    assert s.skip_committed_tasks and s.marker_group_prefix == "strom-spark-sink"
    with pytest.raises(OptionError, match="Kafka option 'value.serializer' is not supported as value are"):
        parse_sink_options({**BS, "kafka.value.serializer": "x"})
    with pytest.raises(OptionError, match="Kafka option 'key.serializer' is not supported as keys are"):
        parse_sink_options({**BS, "kafka.key.serializer": "x"})


def test_durations() -> None:
    assert parse_duration_ms("d", "15m") == 900_000
    assert parse_duration_ms("d", "250") == 250
    assert parse_duration_ms("d", "10 s") == 10_000
    with pytest.raises(OptionError):
        parse_duration_ms("d", "soon")


def test_group_ids_follow_sparks_kafka_source() -> None:
    """``kafka.group.id`` is used by the driver's and the executors' consumers (``groupIdPrefix`` is then
    ignored); otherwise each query gets its own ``<groupIdPrefix>-<uuid>`` with ``-driver-0`` / ``-executor``,
    the prefix defaulting to spark-kafka-source (streaming) / spark-kafka-relation (batch)."""
    from strom.spark.kafka_io import consumer_config

    given = src(subscribe="t", groupIdPrefix="ignored", **{"kafka.group.id": "billing"})
    assert (given.driver_group_id, given.executor_group_id) == ("billing", "billing")
    assert consumer_config(given.consumer_config, group_id=given.executor_group_id)["group.id"] == "billing"

    prefixed = src(subscribe="t", groupIdPrefix="team-a")
    assert re.fullmatch(r"team-a-[0-9a-f-]{36}-driver-0", prefixed.driver_group_id)
    assert prefixed.executor_group_id == prefixed.driver_group_id[:-len("-driver-0")] + "-executor"
    assert src(subscribe="t").driver_group_id.startswith("spark-kafka-source-")
    batch = src(False, subscribe="t")
    assert batch.driver_group_id.startswith("spark-kafka-relation-") and batch.executor_group_id.endswith("-executor")
    assert src(subscribe="t").executor_group_id != src(subscribe="t").executor_group_id  # one group per query
    conf = consumer_config(batch.consumer_config, client_id="x", group_id=batch.executor_group_id)
    assert conf["group.id"] == batch.executor_group_id and conf["enable.auto.commit"] == "false"


def test_executor_consumers_fetch_4_mib_per_partition_unless_told_otherwise() -> None:
    """The source's consumer defaults (whole 4 MiB fetches per poll), each overridden by its ``kafka.*`` option;
    the fixed settings are not."""
    from strom.spark.kafka_io import consumer_config

    conf = consumer_config(src(False, subscribe="t").consumer_config)
    assert (conf["max.partition.fetch.bytes"], conf["max.poll.records"]) == (str(4 << 20), "200000")
    assert conf["fetch.max.wait.ms"] == "100"
    told = src(False, subscribe="t", **{"kafka.max.partition.fetch.bytes": "1048576", "kafka.max.poll.records": "500"})
    conf = consumer_config(told.consumer_config)
    assert (conf["max.partition.fetch.bytes"], conf["max.poll.records"]) == ("1048576", "500")
    assert conf["auto.offset.reset"] == "none"
