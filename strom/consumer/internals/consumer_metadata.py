"""The consumer's view of cluster metadata: which topics to ask for and keep.

Kafka counterpart: ``org.apache.kafka.clients.consumer.internals.ConsumerMetadata``.

The consumer asks for the topics of its subscription (the leader: every member's topics; manual assignment:
the assigned partitions' topics) plus *transient* topics looked up by ``partitions_for`` /
``offsets_for_times`` and the like; a pattern subscription asks for all topics and keeps the ones matching
the pattern (internal topics only when ``exclude.internal.topics=false``).

Thread-safety: as :class:`~strom.network.metadata.Metadata` (thread-safe).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from strom.common.time import SYSTEM_TIME, Time
from strom.consumer.internals.subscription_state import SubscriptionState
from strom.network.metadata import Metadata, metadata_request

__all__ = ["ConsumerMetadata"]


class ConsumerMetadata(Metadata):
    """Kafka's ``ConsumerMetadata``."""

    def __init__(self, refresh_backoff_ms: int, metadata_max_age_ms: int, include_internal_topics: bool,
                 allow_auto_topic_creation: bool, subscription: SubscriptionState, time: Time = SYSTEM_TIME,
                 log_context: str = "") -> None:
        super().__init__(refresh_backoff_ms, metadata_max_age_ms, time, log_context=log_context)
        self.include_internal_topics = include_internal_topics
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.subscription = subscription
        self._transient_topics: set[str] = set()

    def new_metadata_request(self) -> Any:
        if self.subscription.has_pattern_subscription():
            return metadata_request(None, self.allow_auto_topic_creation)
        topics = self.subscription.metadata_topics() | self._transient_topics
        return metadata_request(sorted(topics), self.allow_auto_topic_creation)

    def add_transient_topics(self, topics: Iterable[str]) -> None:
        with self._lock:
            new = set(topics) - self._transient_topics
            self._transient_topics |= new
            if new and not new <= self.fetch().topics():
                self.request_update_for_new_topics()

    def clear_transient_topics(self) -> None:
        with self._lock:
            self._transient_topics = set()

    def retain_topic(self, topic: str, is_internal: bool, now_ms: int) -> bool:
        if topic in self._transient_topics or self.subscription.needs_metadata(topic):
            return True
        if is_internal and not self.include_internal_topics:
            return False
        return self.subscription.matches_subscribed_pattern(topic)
