"""Test doubles for the group coordinator: an in-memory ``__consumer_offsets`` and a stepped clock."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from strom.common.structs import TopicPartition
from strom.protocol.messages.consumer_protocol import ConsumerProtocolSubscription
from strom.server.coordinator.group_coordinator import GroupCoordinator
from strom.server.coordinator.group_metadata import JoinResult, SyncResult
from strom.server.coordinator.offset_config import GroupConfig, OffsetConfig
from strom.testing.mock_time import MockTime


class MemoryOffsetsLog:
    """Partitions as lists of (key, value) from a log start offset; ``fail_with`` makes appends fail."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.fail_with = 0
        self.appends = 0

    def append(self, partition: int, records: list[tuple[bytes, bytes | None]], **_transactional: object) -> int:
        if self.fail_with:
            return self.fail_with
        self.appends += 1
        self.partitions.setdefault(partition, []).extend(records)
        return 0

    def read(self, partition: int) -> Iterable[tuple[bytes | None, bytes | None]]:
        return list(self.partitions.get(partition, []))


def subscription(*topics: str) -> bytes:
    return struct.pack(">h", 0) + ConsumerProtocolSubscription(topics=list(topics)).encode(0)


def make_coordinator(time: MockTime | None = None, log: MemoryOffsetsLog | None = None, *,
                     initial_delay_ms: int = 0, retention_ms: int = 7 * 24 * 3600 * 1000,
                     partitions: int = 5, max_size: int = 2**31 - 1) -> tuple[GroupCoordinator, MockTime, MemoryOffsetsLog]:
    time = time or MockTime()
    log = log or MemoryOffsetsLog()
    gc = GroupConfig(group_min_session_timeout_ms=1000, group_max_session_timeout_ms=60_000,
                     group_initial_rebalance_delay_ms=initial_delay_ms, group_max_size=max_size)
    oc = OffsetConfig(offsets_topic_num_partitions=partitions, offsets_retention_ms=retention_ms,
                      offsets_retention_check_interval_ms=60_000)
    coord = GroupCoordinator(gc, oc, time, log)
    coord.startup()
    return coord, time, log


class Box:
    """Collects the (single) result of a callback."""

    def __init__(self) -> None:
        self.results: list[object] = []

    def __call__(self, result: object) -> None:
        self.results.append(result)

    @property
    def done(self) -> bool:
        return bool(self.results)

    @property
    def value(self):  # type: ignore[no-untyped-def]
        assert len(self.results) == 1, self.results
        return self.results[0]


def join(coord: GroupCoordinator, group: str = "g", member_id: str = "", *, instance: str | None = None,
         protocols: list[tuple[str, bytes]] | None = None, session_ms: int = 10_000, rebalance_ms: int = 30_000,
         require_known: bool = True, client_id: str = "c") -> Box:
    box = Box()
    coord.handle_join_group(group, member_id, instance, require_known, False, client_id, "/127.0.0.1", rebalance_ms,
                            session_ms, "consumer", protocols or [("range", subscription("t"))], box)
    return box


def join_new(coord: GroupCoordinator, group: str = "g", **kw: object) -> Box:
    """First JoinGroup (MEMBER_ID_REQUIRED) then the real one with the handed-out id."""
    first = join(coord, group, **kw)  # type: ignore[arg-type]
    r: JoinResult = first.value
    assert r.error == 79, r  # MEMBER_ID_REQUIRED
    return join(coord, group, r.member_id, **kw)  # type: ignore[arg-type]


def sync(coord: GroupCoordinator, group: str, generation: int, member_id: str,
         assignments: dict[str, bytes] | None = None, instance: str | None = None) -> Box:
    box = Box()
    coord.handle_sync_group(group, generation, member_id, "consumer", None, instance, assignments or {}, box)
    return box


def tp(topic: str, p: int) -> TopicPartition:
    return TopicPartition(topic, p)


__all__ = ["MemoryOffsetsLog", "make_coordinator", "join", "join_new", "sync", "subscription", "tp", "Box",
           "SyncResult", "JoinResult"]
