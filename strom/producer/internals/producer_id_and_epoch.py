"""A producer id and epoch pair (Kafka's ``org.apache.kafka.common.utils.ProducerIdAndEpoch``). Immutable."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ProducerIdAndEpoch", "NONE"]


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    """``producer_id`` -1 / ``epoch`` -1 mean "not assigned yet"."""

    producer_id: int = -1
    epoch: int = -1

    def is_valid(self) -> bool:
        return self.producer_id >= 0

    def __str__(self) -> str:
        return f"(producerId={self.producer_id}, epoch={self.epoch})"


NONE = ProducerIdAndEpoch(-1, -1)
