"""LogConfig: Kafka names and defaults, validation, broker synonyms, describe()."""

from __future__ import annotations

import dataclasses

import pytest

from strom.common.errors import ConfigError
from strom.storage.log_config import (
    LOG_CONFIG_KEYS,
    LONG_MAX,
    SOURCE_BROKER,
    SOURCE_DEFAULT,
    SOURCE_TOPIC,
    LogConfig,
)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def test_defaults_match_kafka():
    c = LogConfig()
    assert c.segment_bytes == 1073741824 and c.segment_ms == 604800000
    assert c.segment_index_bytes == 10485760 and c.retention_ms == 604800000 and c.retention_bytes == -1
    assert c.flush_messages == LONG_MAX and c.flush_ms == LONG_MAX and c.index_interval_bytes == 4096
    assert c.max_message_bytes == 1048588 and c.message_timestamp_type == "CreateTime"
    assert c.cleanup_policy == ("delete",) and c.min_insync_replicas == 1 and c.file_delete_delay_ms == 60000
    assert c.compression_type == "producer"


def test_every_key_has_a_field_with_its_default():
    fields = {f.name: f for f in dataclasses.fields(LogConfig)}
    for name, key in LOG_CONFIG_KEYS.items():
        assert key.attr in fields, name
        assert fields[key.attr].default == key.default, name


def test_from_props_parses_and_tracks_overrides():
    c = LogConfig.from_props(
        {
            "segment.bytes": "1000",
            "cleanup.policy": "compact,delete",
            "preallocate": "TRUE",
            "retention.ms": "-1",
            "min.cleanable.dirty.ratio": "0.25",
            "message.timestamp.type": "LogAppendTime",
        }
    )
    assert c.segment_bytes == 1000 and c.cleanup_policy == ("compact", "delete") and c.preallocate is True
    assert c.retention_ms == -1 and c.min_cleanable_dirty_ratio == 0.25 and c.log_append_time
    assert c.delete_enabled and c.compact_enabled
    assert c.source("segment.bytes") == SOURCE_TOPIC and c.source("segment.ms") == SOURCE_DEFAULT
    assert c.overridden_props()["cleanup.policy"] == "compact,delete"
    # typed values are accepted too
    assert LogConfig.from_props({"segment.bytes": 2000, "preallocate": False}).segment_bytes == 2000


@pytest.mark.parametrize(
    "props",
    [
        {"no.such.key": "1"},
        {"segment.bytes": "13"},
        {"segment.bytes": "abc"},
        {"segment.bytes": str(2**31)},
        {"retention.ms": "-2"},
        {"flush.messages": "0"},
        {"cleanup.policy": "delete,squash"},
        {"message.timestamp.type": "createtime"},
        {"compression.type": "brotli"},
        {"preallocate": "yes"},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"min.insync.replicas": "0"},
        {"segment.ms": "0"},
        {"remote.storage.enable": "true"},
    ],
)
def test_invalid_values_name_the_key(props):
    with pytest.raises(ConfigError) as exc:
        LogConfig.from_props(props)
    assert next(iter(props)) in str(exc.value)


def test_from_broker_props_and_precedence():
    c = LogConfig.from_broker_props(
        {
            "log.segment.bytes": "5000",
            "log.roll.hours": "1",
            "log.retention.hours": "2",
            "log.retention.minutes": "3",
            "message.max.bytes": "2000",
            "log.flush.interval.messages": "10",
            "log.cleanup.policy": "compact",
            "log.segment.delete.delay.ms": "0",
            "broker.id": "1",  # unrelated broker keys are ignored
            "listeners": "PLAINTEXT://:9092",
        }
    )
    assert c.segment_bytes == 5000 and c.segment_ms == 3600000 and c.retention_ms == 180000
    assert c.max_message_bytes == 2000 and c.flush_messages == 10 and c.cleanup_policy == ("compact",)
    assert c.file_delete_delay_ms == 0
    assert c.source("segment.bytes") == SOURCE_BROKER and c.source("retention.bytes") == SOURCE_DEFAULT
    c2 = LogConfig.from_broker_props({"log.roll.ms": "5", "log.roll.hours": "1", "log.retention.hours": "-1"})
    assert c2.segment_ms == 5 and c2.retention_ms == -1
    topic = LogConfig.from_props({"segment.bytes": "700"}, c)
    assert topic.segment_bytes == 700 and topic.max_message_bytes == 2000
    assert (
        topic.source("segment.bytes") == SOURCE_TOPIC and topic.source("max.message.bytes") == SOURCE_BROKER
    )
    with pytest.raises(ConfigError, match="log.segment.bytes"):
        LogConfig.from_broker_props({"log.segment.bytes": "1"})


def test_describe():
    c = LogConfig.from_props({"retention.ms": "1000", "cleanup.policy": "compact,delete"})
    rows = {name: (value, is_default) for name, value, is_default in c.describe()}
    assert set(rows) == set(LOG_CONFIG_KEYS)
    assert rows["retention.ms"] == ("1000", False)
    assert rows["cleanup.policy"] == ("compact,delete", False)
    assert rows["flush.messages"] == (str(LONG_MAX), True)
    assert rows["preallocate"] == ("false", True)
    assert rows["min.cleanable.dirty.ratio"] == ("0.5", True)
    assert c.describe(["segment.bytes"]) == [("segment.bytes", "1073741824", True)]
    assert not any(k.sensitive or k.read_only for k in LOG_CONFIG_KEYS.values())


def test_timestamp_difference_fallback():
    c = LogConfig.from_props({"message.timestamp.difference.max.ms": "100"})
    assert c.timestamp_before_max_ms() == 100 and c.timestamp_after_max_ms() == 100
    c2 = LogConfig.from_props(
        {"message.timestamp.difference.max.ms": "100", "message.timestamp.after.max.ms": "5"}
    )
    assert c2.timestamp_after_max_ms() == 5 and c2.timestamp_before_max_ms() == 100
