"""Output formats the CLI shares with Kafka's tools: describe lines, group tables, console records, configs."""

from __future__ import annotations

import uuid

import pytest

from strom.admin import (
    Config,
    ConfigEntry,
    ConfigSource,
    ConfigSynonym,
    TopicDescription,
    TopicPartitionInfo,
    topic_id_string,
)
from strom.cli.configs import format_entry, parse_add_config
from strom.cli.consumer_groups import format_offsets_table
from strom.cli.consumer_groups_reset import format_reset_table, parse_datetime, parse_duration
from strom.cli.errors import CliError
from strom.cli.formatter import DefaultMessageFormatter
from strom.cli.topics import format_partition_line, format_topic_line
from strom.common.structs import Node
from strom.consumer.consumer_records import ConsumerRecord

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


def test_topic_id_is_kafkas_base64() -> None:
    # Kafka prints Uuid as URL-safe base64 without padding (22 characters)
    topic_id = uuid.UUID(bytes=bytes(range(16)))
    assert topic_id_string(topic_id) == "AAECAwQFBgcICQoLDA0ODw"
    assert topic_id_string(None) == "AAAAAAAAAAAAAAAAAAAAAA"


def test_describe_lines_match_the_seed_layout() -> None:
    nodes = [Node(1, "h", 1), Node(0, "h", 0), Node(2, "h", 2)]
    topic_id = uuid.uuid4()
    description = TopicDescription("sanguo", False, (TopicPartitionInfo(0, nodes[0], tuple(nodes), tuple(nodes)),),
                                   topic_id)
    config = Config((ConfigEntry("segment.bytes", "1073741824", ConfigSource.STATIC_BROKER_CONFIG),
                     ConfigEntry("retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG)))
    assert format_topic_line(description, config) == (
        f"Topic: sanguo\tTopicId: {topic_id_string(topic_id)}\tPartitionCount: 1\tReplicationFactor: 3\t"
        "Configs: segment.bytes=1073741824")
    assert format_partition_line("sanguo", description.partitions[0]) == \
        "\tTopic: sanguo\tPartition: 0\tLeader: 1\tReplicas: 1,0,2\tIsr: 1,0,2"
    no_leader = TopicPartitionInfo(1, None, (nodes[0],), ())
    assert format_partition_line("t", no_leader) == "\tTopic: t\tPartition: 1\tLeader: none\tReplicas: 1\tIsr: "


def test_offsets_table_columns_widen_like_kafka() -> None:
    rows = [["g1", "sanguo", 0, 5, 10, 5, "consumer-g1-1-" + "x" * 36, "/127.0.0.1", "consumer-g1-1"],
            ["g1", "sanguo", 1, "-", 3, "-", "-", "-", "-"]]
    lines = format_offsets_table(rows).split("\n")
    assert lines[0] == ""
    header = lines[1].split()
    assert header == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                      "HOST", "CLIENT-ID"]
    assert lines[2].split() == [str(v) for v in rows[0]]
    assert lines[3].split() == [str(v) for v in rows[1]]
    # fixed widths: GROUP 15, TOPIC 15, PARTITION 10, offsets 15 each, CONSUMER-ID widened to the longest id
    assert lines[1].index("TOPIC") == 16 and lines[1].index("PARTITION") == 32
    assert lines[1].index("HOST") == lines[2].index("/127.0.0.1")


def test_reset_table() -> None:
    text = format_reset_table([("g", "t", 0, 42)])
    assert text.split("\n")[1].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert text.split("\n")[2] == f"{'g':<30} {'t':<30} {0:<10} 42"


def test_console_formatter_columns() -> None:
    record = ConsumerRecord("t", 2, 7, 1700000000000, 0, b"k", b"v", (("h", b"1"),), 1, 1)
    assert DefaultMessageFormatter().format(record) == b"v\n"
    f = DefaultMessageFormatter({"print.key": "true", "print.timestamp": "true", "print.partition": "true",
                                 "print.offset": "true", "print.headers": "true"})
    assert f.format(record) == b"CreateTime:1700000000000\tPartition:2\tOffset:7\th:1\tk\tv\n"
    null = ConsumerRecord("t", 0, 0, -1, -1, None, None)
    f = DefaultMessageFormatter({"print.key": "true", "print.timestamp": "true", "key.separator": " | ",
                                 "print.headers": "true"})
    assert f.format(null) == b"NO_TIMESTAMP | NO_HEADERS | null | null\n"
    assert DefaultMessageFormatter({"print.value": "false", "print.key": "true"}).format(record) == b"k\n"
    with pytest.raises(CliError, match="print.kye"):
        DefaultMessageFormatter({"print.kye": "true"})


def test_config_entry_line() -> None:
    entry = ConfigEntry("broker.rack", None, ConfigSource.DEFAULT_CONFIG)  # no value, no synonym: as Kafka prints it
    assert format_entry(entry) == "  broker.rack=null sensitive=false synonyms={}"
    with_synonyms = ConfigEntry("x", "1", ConfigSource.DYNAMIC_TOPIC_CONFIG, synonyms=(
        ConfigSynonym("x", "1", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ConfigSynonym("log.x", "2", ConfigSource.DEFAULT_CONFIG)))
    assert format_entry(with_synonyms).endswith("synonyms={DYNAMIC_TOPIC_CONFIG:x=1, DEFAULT_CONFIG:log.x=2}")
    secret = ConfigEntry("p", "s3cret", ConfigSource.DYNAMIC_BROKER_CONFIG, is_sensitive=True)
    assert "s3cret" not in format_entry(secret)


def test_add_config_lists_in_brackets() -> None:
    assert parse_add_config("a=1,b=[x,y],c=z=w") == {"a": "1", "b": "x,y", "c": "z=w"}
    with pytest.raises(CliError):
        parse_add_config("novalue")


def test_datetime_and_duration() -> None:
    assert parse_datetime("2024-01-01T00:00:00.000Z") == 1704067200000
    assert parse_datetime("2024-01-01T01:00:00.500+01:00") == 1704067200500
    assert parse_duration("PT1H30M") == 5_400_000
    assert parse_duration("P1DT1S") == 86_401_000
    with pytest.raises(CliError):
        parse_datetime("yesterday")
    with pytest.raises(CliError):
        parse_duration("P")
