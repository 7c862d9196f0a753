"""Keys and values of the ``__consumer_offsets`` records.

Kafka counterpart: the record serde of ``GroupMetadataManager`` (``offsetCommitKey``, ``offsetCommitValue``,
``groupMetadataKey``, ``groupMetadataValue``, ``readMessageKey``, ``readOffsetMessageValue``,
``readGroupMessageValue``).

Layout: each key and value is an INT16 schema version followed by the structure of ``records/*.json``:

* key version 0/1 → ``OffsetCommitKey`` (group, topic, partition), value ``OffsetCommitValue``;
* key version 2 → ``GroupMetadataKey`` (group), value ``GroupMetadataValue``;
* key version 3+ → newer group types (not handled here; skipped on load);
* a null value is a tombstone.

Values are written as OffsetCommitValue v3 (v1 when an OffsetCommit v2-v4 asked for an expire timestamp) and
GroupMetadataValue v3 — the newest non-flexible versions, which is what Kafka 3.x writes too. Pure functions.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from strom.common.errors import ProtocolError
from strom.protocol.messages.group_coordinator_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)
from strom.server.coordinator.group_metadata import CommittedOffset

__all__ = [
    "OffsetKey",
    "GroupKey",
    "offset_commit_key",
    "offset_commit_value",
    "group_metadata_key",
    "group_metadata_value",
    "read_key",
    "read_offset_value",
    "read_group_value",
]

_VERSION = struct.Struct(">h")
OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return _VERSION.pack(OFFSET_COMMIT_KEY_VERSION) + OffsetCommitKey(
        group=group, topic=topic, partition=partition).encode(OFFSET_COMMIT_KEY_VERSION)


def offset_commit_value(off: CommittedOffset) -> bytes:
    if off.expire_timestamp is not None:
        version = 1
        value = OffsetCommitValue(offset=off.offset, metadata=off.metadata, commit_timestamp=off.commit_timestamp,
                                  expire_timestamp=off.expire_timestamp)
    else:
        version = 3
        value = OffsetCommitValue(offset=off.offset, leader_epoch=off.leader_epoch, metadata=off.metadata,
                                  commit_timestamp=off.commit_timestamp)
    return _VERSION.pack(version) + value.encode(version)


def group_metadata_key(group: str) -> bytes:
    return _VERSION.pack(GROUP_METADATA_KEY_VERSION) + GroupMetadataKey(group=group).encode(GROUP_METADATA_KEY_VERSION)


def group_metadata_value(value: GroupMetadataValue) -> bytes:
    return _VERSION.pack(GROUP_METADATA_VALUE_VERSION) + value.encode(GROUP_METADATA_VALUE_VERSION)


def _split(data: bytes | memoryview) -> tuple[int, memoryview]:
    view = memoryview(data)
    if len(view) < 2:
        raise ProtocolError("coordinator record shorter than its version prefix")
    return _VERSION.unpack_from(view, 0)[0], view[2:]


def read_key(data: bytes | memoryview) -> OffsetKey | GroupKey | None:
    """The key of a ``__consumer_offsets`` record; None for key versions this broker does not know."""
    version, body = _split(data)
    if version in (0, 1):
        k = OffsetCommitKey.decode(body, version)
        return OffsetKey(k.group, k.topic, k.partition)
    if version == 2:
        return GroupKey(GroupMetadataKey.decode(body, version).group)
    return None


def read_offset_value(data: bytes | memoryview) -> CommittedOffset:
    version, body = _split(data)
    # Newer versions only add tagged fields (KIP-915): read them with the newest layout we know.
    v = OffsetCommitValue.decode(body, min(version, OffsetCommitValue.VALID_VERSIONS[1]))
    expire = v.expire_timestamp if version == 1 and v.expire_timestamp != -1 else None
    return CommittedOffset(offset=v.offset, leader_epoch=v.leader_epoch, metadata=v.metadata,
                           commit_timestamp=v.commit_timestamp, expire_timestamp=expire)


def read_group_value(data: bytes | memoryview) -> GroupMetadataValue:
    version, body = _split(data)
    value: GroupMetadataValue = GroupMetadataValue.decode(body, min(version, GroupMetadataValue.VALID_VERSIONS[1]))
    return value
