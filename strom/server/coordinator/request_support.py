"""Small helpers the group API handlers share (Kafka counterpart: bits of ``KafkaApis``).

Event loop only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strom.server.coordinator.group_coordinator import GroupCoordinator

__all__ = ["active_coordinator"]


def active_coordinator(coord: GroupCoordinator) -> GroupCoordinator | None:
    """The group coordinator when it is running, else None (answer COORDINATOR_NOT_AVAILABLE)."""
    return coord if coord.active else None
