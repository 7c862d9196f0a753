"""validate_and_assign_offsets rewrites a client's records in place only when they sit in a writable memoryview
(the Produce handler's own receive buffer); every other input is copied and left as it was."""

from __future__ import annotations

import pytest

from strom.record.header import parse_header
from strom.storage.log_config import LogConfig
from strom.storage.log_validator import AppendOrigin, validate_and_assign_offsets, validate_replicated

from ._batches import T0, build_batch

pytestmark = pytest.mark.unit


def _validate(records: bytes | bytearray | memoryview, origin: AppendOrigin = AppendOrigin.CLIENT):
    return validate_and_assign_offsets(records, 42, LogConfig.from_broker_props({}), T0, leader_epoch=3,
                                       origin=origin)


def test_a_writable_memoryview_from_a_client_is_rewritten_in_place() -> None:
    frame = bytearray(build_batch([b"a", b"b"]))
    result = _validate(memoryview(frame))
    assert result.records.obj is frame  # no copy
    h = parse_header(frame)
    assert (h.base_offset, h.partition_leader_epoch, result.first_offset, result.last_offset) == (42, 3, 42, 43)


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "read-only memoryview", "coordinator memoryview"])
def test_other_inputs_are_copied_and_left_unchanged(kind: str) -> None:
    original = build_batch([b"a", b"b"])
    data: bytes | bytearray | memoryview = {
        "bytes": original, "bytearray": bytearray(original), "read-only memoryview": memoryview(original),
        "coordinator memoryview": memoryview(bytearray(original))}[kind]
    result = _validate(data, AppendOrigin.COORDINATOR if kind.startswith("coordinator") else AppendOrigin.CLIENT)
    assert bytes(data) == original
    assert parse_header(result.records).base_offset == 42


def test_replicated_records_are_checked_without_a_copy_or_a_change() -> None:
    frame = bytearray(build_batch([b"a"], base_offset=7))
    result = validate_replicated(memoryview(frame))
    assert result.records.obj is frame and bytes(frame) == build_batch([b"a"], base_offset=7)
    assert (result.first_offset, result.last_offset) == (7, 7)
