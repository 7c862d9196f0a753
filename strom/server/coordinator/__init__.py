"""Coordinators of the broker: the classic group coordinator and its ``__consumer_offsets`` storage.

Kafka counterparts: ``GroupCoordinator``, ``GroupMetadataManager``, ``GroupMetadata``, ``MemberMetadata``,
``OffsetConfig`` / ``GroupConfig``.
"""

from strom.server.coordinator.group_coordinator import GroupCoordinator
from strom.server.coordinator.group_metadata import GroupMetadata, GroupState, MemberMetadata
from strom.server.coordinator.group_metadata_manager import GroupMetadataManager, partition_for
from strom.server.coordinator.offset_config import GROUP_METADATA_TOPIC_NAME, GroupConfig, OffsetConfig

__all__ = [
    "GroupCoordinator",
    "GroupMetadata",
    "GroupState",
    "MemberMetadata",
    "GroupMetadataManager",
    "partition_for",
    "GroupConfig",
    "OffsetConfig",
    "GROUP_METADATA_TOPIC_NAME",
]
