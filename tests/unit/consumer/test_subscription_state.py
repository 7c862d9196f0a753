"""SubscriptionState: exclusive subscription types, assignment, positions, resets and pausing."""

from __future__ import annotations

import re

import pytest

from strom.common.errors import IllegalStateError
from strom.common.structs import OffsetAndMetadata, TopicPartition
from strom.consumer.errors import NoOffsetForPartitionError
from strom.consumer.internals.subscription_state import (
    FetchPosition,
    FetchState,
    LogTruncation,
    OffsetResetStrategy,
    SubscriptionState,
)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_subscription_types_are_exclusive() -> None:
    s = SubscriptionState()
    assert s.subscribe(["a"]) and not s.subscribe(["a"])
    with pytest.raises(IllegalStateError):
        s.assign_from_user([A0])
    with pytest.raises(IllegalStateError):
        s.subscribe_pattern("a.*")
    s.unsubscribe()
    s.assign_from_user([A0])
    assert s.metadata_topics() == {"a"}


def test_pattern_subscription() -> None:
    s = SubscriptionState()
    s.subscribe_pattern(re.compile("a|b"))
    assert s.matches_subscribed_pattern("a") and not s.matches_subscribed_pattern("ab")  # whole name
    assert s.subscribe_from_pattern(["a", "b"]) and s.subscription() == {"a", "b"}
    s.assign_from_subscribed([A0, B0])
    with pytest.raises(ValueError):
        s.assign_from_subscribed([TopicPartition("c", 0)])


def test_assignment_keeps_state_of_retained_partitions() -> None:
    s = SubscriptionState()
    s.subscribe(["a"])
    s.assign_from_subscribed([A0, A1])
    s.seek(A0, 42)
    s.pause(A1)
    s.assign_from_subscribed([A0])
    assert s.position(A0) == 42 and s.assigned_partitions() == {A0}
    assert s.all_consumed() == {A0: OffsetAndMetadata(42, "", None)}


def test_positions_resets_and_fetchability() -> None:
    s = SubscriptionState(OffsetResetStrategy.EARLIEST)
    s.assign_from_user([A0, A1])
    assert s.initializing_partitions() == {A0, A1} and not s.has_all_fetch_positions()
    s.seek(A0, 5)
    s.reset_initializing_positions()
    assert s.is_offset_reset_needed(A1) and s.reset_strategy(A1) is OffsetResetStrategy.EARLIEST
    assert s.partitions_needing_reset(0) == [A1]
    s.set_next_allowed_retry([A1], 1000)
    assert s.partitions_needing_reset(999) == [] and s.partitions_needing_reset(1000) == [A1]
    assert not s.maybe_seek_unvalidated(A1, 3, OffsetResetStrategy.LATEST)  # a different reset is pending
    assert s.maybe_seek_unvalidated(A1, 3, OffsetResetStrategy.EARLIEST)
    assert s.fetchable_partitions() == [A0, A1]
    s.pause(A0)
    s.mark_pending_revocation([A1])
    assert s.fetchable_partitions() == [] and s.paused_partitions() == {A0}
    s.resume(A0)
    assert s.fetchable_partitions() == [A0]
    s.update_high_watermark(A0, 10)
    assert s.partition_lag(A0, read_committed=False) == 5


def test_reset_none_raises_for_missing_positions() -> None:
    s = SubscriptionState("none")
    s.assign_from_user([A0, B0])
    s.seek(B0, 1)
    with pytest.raises(NoOffsetForPartitionError) as info:
        s.reset_initializing_positions()
    assert info.value.partitions == {A0}
    assert s._assignment[A0].fetch_state is FetchState.INITIALIZING


def test_position_validation_states() -> None:
    """KIP-320: a position with an epoch awaits validation when its leader changes; the answer validates it,
    moves it back, or reports the truncation; an answer for a position that changed meanwhile is ignored."""
    tp = TopicPartition("t", 0)
    s = SubscriptionState(OffsetResetStrategy.NONE)
    s.assign_from_user([tp])
    s.seek(tp, 10, 4, (1, 4))
    assert s.is_awaiting_validation(tp) and s.position(tp) is None  # not fetchable, no valid position yet
    assert s.partitions_needing_validation(0) == {tp: FetchPosition(10, 4, (1, 4))}
    assert s.maybe_complete_validation(tp, FetchPosition(10, 4, (1, 4)), 4, 12) is None
    assert s.position(tp) == 10 and s.is_fetchable(tp)
    # Same leader: nothing to do. New leader epoch: validate again.
    assert not s.maybe_validate_position_for_current_leader(tp, (1, 4))
    assert s.maybe_validate_position_for_current_leader(tp, (2, 5))
    asked = FetchPosition(10, 4, (2, 5))
    s.seek(tp, 7)  # the application sought meanwhile: the answer to the earlier question no longer applies
    assert s.maybe_complete_validation(tp, asked, 4, 8) is None and s.position(tp) == 7
    s.seek(tp, 10, 4, (2, 5))
    truncation = s.maybe_complete_validation(tp, asked, 3, 8)
    assert truncation == LogTruncation(tp, asked, OffsetAndMetadata(8, "", 3))
    assert s.is_awaiting_validation(tp)  # stays until the application seeks
    assert s.maybe_complete_validation(tp, asked, -1, -1) == LogTruncation(tp, asked, None)
    s.default_reset_strategy = OffsetResetStrategy.EARLIEST
    assert s.maybe_complete_validation(tp, asked, 3, 8) is None
    assert s.position(tp) == 8 and s.position_epoch(tp) == 3
    # A reset position carries no epoch: nothing to validate when the leader changes.
    s.request_offset_reset(tp)
    assert s.maybe_seek_unvalidated(tp, 0, OffsetResetStrategy.EARLIEST, (2, 5))
    assert not s.maybe_validate_position_for_current_leader(tp, (0, 6)) and s.position(tp) == 0
