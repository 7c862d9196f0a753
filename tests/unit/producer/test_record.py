"""ProducerRecord validation, RecordHeaders (read-only after partitioning), RecordMetadata."""

from __future__ import annotations

import pytest

from strom.common.errors import IllegalStateError
from strom.common.structs import TopicPartition
from strom.producer.record import Header, ProducerRecord, RecordHeaders, RecordMetadata

pytestmark = pytest.mark.unit


def test_defaults_and_header_forms() -> None:
    """SPEC §1.3 / §2.3: ProducerRecord fields and header input forms."""
    r = ProducerRecord("t", b"v")
    assert (r.topic, r.value, r.key, r.partition, r.timestamp, len(r.headers)) == ("t", b"v", None, None, None, 0)
    r = ProducerRecord("t", b"v", key=b"k", partition=0, timestamp=0, headers=[("a", b"1"), ("a", "2")])
    assert r.headers.to_array() == (Header("a", b"1"), Header("a", b"2"))
    assert ProducerRecord("t", headers={"x": None}).headers.last_header("x") == ("x", None)
    assert ProducerRecord("t", b"v") == ProducerRecord("t", b"v")


@pytest.mark.parametrize("kwargs, message", [
    ({"topic": None}, "Topic cannot be null."),
    ({"topic": ""}, "Invalid topic"),
    ({"topic": "t", "partition": -1}, "Invalid partition: -1. Partition number should always be non-negative or null."),
    ({"topic": "t", "timestamp": -5}, "Invalid timestamp: -5. Timestamp should always be non-negative or null."),
])
def test_validation(kwargs: dict, message: str) -> None:
    """SPEC §2.3 ProducerRecord validation (Kafka's IllegalArgumentException messages)."""
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        ProducerRecord(**kwargs)


def test_headers_read_only() -> None:
    """§18 item 16 (mechanism): once set read-only (after partitioning) headers cannot change."""
    h = RecordHeaders().add("a", b"1").add("b", None)
    assert [x.key for x in h] == ["a", "b"] and h.headers("a") == [("a", b"1")]
    h.remove("b")
    h.set_read_only()
    with pytest.raises(IllegalStateError, match="RecordHeaders has been closed."):
        h.add("c", b"2")
    with pytest.raises(IllegalStateError):
        h.remove("a")
    assert h.to_array() == (("a", b"1"),)
    with pytest.raises(TypeError):
        RecordHeaders([(1, b"x")])
    with pytest.raises(TypeError):
        RecordHeaders([("k", 5)])


def test_record_metadata() -> None:
    """§18 item 8: RecordMetadata exposes partition and offset (-1 placeholders when unknown)."""
    m = RecordMetadata("t", 3, 42, 1000, 1, 5)
    assert m.topic_partition == TopicPartition("t", 3) and m.has_offset() and m.has_timestamp()
    assert str(m) == "t-3@42"
    unknown = RecordMetadata.unknown(TopicPartition("t", -1))
    assert not unknown.has_offset() and not unknown.has_timestamp() and unknown.partition == -1
