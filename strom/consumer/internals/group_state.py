"""Group membership state values shared by the coordinator and the heartbeat thread.

Kafka counterparts: ``AbstractCoordinator.MemberState`` and ``AbstractCoordinator.Generation``. Immutable values;
thread-safe.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["MemberState", "Generation", "NO_GENERATION"]


class MemberState(enum.Enum):
    UNJOINED = "UNJOINED"
    PREPARING_REBALANCE = "PREPARING_REBALANCE"
    COMPLETING_REBALANCE = "COMPLETING_REBALANCE"
    STABLE = "STABLE"

    def has_not_joined_group(self) -> bool:
        return self in (MemberState.UNJOINED, MemberState.PREPARING_REBALANCE)


@dataclass(frozen=True, slots=True)
class Generation:
    generation_id: int
    member_id: str
    protocol_name: str | None

    def has_member_id(self) -> bool:
        return bool(self.member_id)


NO_GENERATION = Generation(-1, "", None)
