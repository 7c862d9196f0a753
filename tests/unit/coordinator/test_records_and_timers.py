"""__consumer_offsets record serde, Kafka's group-to-partition hash, subscription parsing and the timer heap."""

from __future__ import annotations

import struct

import pytest

from strom.protocol.messages.group_coordinator_records import GroupMetadataValue, OffsetCommitValue
from strom.server.coordinator import records as rec
from strom.server.coordinator.group_metadata import CommittedOffset, subscription_topics
from strom.server.coordinator.group_metadata_manager import java_string_hash, partition_for
from strom.server.coordinator.timers import CoordinatorTimers
from strom.testing.mock_time import MockTime

from .helpers import subscription

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def test_java_string_hash_and_partition() -> None:
    # Values of java.lang.String.hashCode().
    assert [java_string_hash(s) for s in ("", "a", "abc", "test", "Aa", "BB")] == [0, 97, 96354, 3556498, 2112, 2112]
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE: Utils.abs gives 0
    assert partition_for("polygenelubricants", 50) == 0
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # UTF-16 surrogate pair
    assert java_string_hash("héllo-組") == _reference("héllo-組")
    assert partition_for("console-consumer-1", 50) == abs(java_string_hash("console-consumer-1")) % 50


def _reference(s: str) -> int:
    h = 0
    for unit in struct.unpack(f">{len(s.encode('utf-16-be')) // 2}H", s.encode("utf-16-be")):
        h = (h * 31 + unit) % 2**32
    return h - 2**32 if h >= 2**31 else h


def test_offset_records_round_trip() -> None:
    key = rec.offset_commit_key("g", "t", 3)
    assert key[:2] == b"\x00\x01" and rec.read_key(key) == rec.OffsetKey("g", "t", 3)
    v3 = rec.offset_commit_value(CommittedOffset(10, leader_epoch=4, metadata="m", commit_timestamp=99))
    assert v3[:2] == b"\x00\x03"
    assert rec.read_offset_value(v3) == CommittedOffset(10, 4, "m", 99, None)
    v1 = rec.offset_commit_value(CommittedOffset(10, metadata="m", commit_timestamp=99, expire_timestamp=500))
    assert v1[:2] == b"\x00\x01" and rec.read_offset_value(v1).expire_timestamp == 500
    v0 = struct.pack(">h", 0) + OffsetCommitValue(offset=5, metadata="", commit_timestamp=1).encode(0)
    assert rec.read_offset_value(v0) == CommittedOffset(5, -1, "", 1, None)
    v4 = struct.pack(">h", 4) + OffsetCommitValue(offset=6, commit_timestamp=2).encode(4)  # flexible
    assert rec.read_offset_value(v4).offset == 6


def test_group_records_round_trip() -> None:
    key = rec.group_metadata_key("grp")
    assert key[:2] == b"\x00\x02" and rec.read_key(key) == rec.GroupKey("grp")
    assert rec.read_key(struct.pack(">h", 3) + b"whatever") is None  # newer group types: skipped
    value = GroupMetadataValue(protocol_type="consumer", generation=3, protocol="range", leader="m1",
                               current_state_timestamp=7, members=[GroupMetadataValue.MemberMetadata(
                                   member_id="m1", group_instance_id="i1", client_id="c", client_host="/h",
                                   rebalance_timeout=100, session_timeout=50, subscription=b"s", assignment=b"a")])
    data = rec.group_metadata_value(value)
    assert data[:2] == b"\x00\x03"
    back = rec.read_group_value(data)
    assert back.generation == 3 and back.members[0].group_instance_id == "i1"
    assert bytes(back.members[0].assignment) == b"a"


def test_subscription_topics() -> None:
    assert subscription_topics(subscription("a", "b")) == {"a", "b"}
    assert subscription_topics(b"\x00") is None and subscription_topics(b"\x00\x00\xff") is None


def test_timers_replace_cancel_and_order() -> None:
    time = MockTime()
    timers = CoordinatorTimers(time)
    ran: list[str] = []
    timers.schedule("a", 100, lambda: ran.append("a"))
    timers.schedule("b", 50, lambda: ran.append("b"))
    timers.schedule("a", 200, lambda: ran.append("a2"))  # replaces the first "a"
    timers.schedule("c", 10, lambda: ran.append("c"))
    assert timers.cancel("c") and not timers.cancel("c")
    assert timers.next_deadline() == time.hi_res_milliseconds() + 50
    time.sleep(150)
    assert timers.poll() == 1 and ran == ["b"]
    time.sleep(50)
    timers.poll()
    assert ran == ["b", "a2"] and timers.next_deadline() is None
