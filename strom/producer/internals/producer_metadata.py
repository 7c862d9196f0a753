"""The producer's metadata: only the topics it sends to, with idle expiry and blocking waits.

Kafka counterpart: ``org.apache.kafka.clients.producer.internals.ProducerMetadata`` (3.x; SPEC §4.1, §4.6,
§4.8). Topics map to an expiry time (``metadata.max.idle.ms`` after their last use in ``send``); a topic
added for the first time is "new" and triggers an immediate partial update (new topics only). Unused topics are
dropped on the next update after they expire. :meth:`await_update` blocks the caller (``send`` waiting for a
topic) until the update version passes the one it saw, raising "Failed to update metadata after N ms." on
timeout and fatal metadata errors at once.

Thread-safety: thread-safe (the :class:`~strom.network.metadata.Metadata` lock and condition); ``add`` and
``await_update`` run on caller threads, updates on the Sender thread.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from strom.common.errors import KafkaError, KafkaTimeoutError
from strom.common.time import SYSTEM_TIME, Time
from strom.network.metadata import Metadata, metadata_request

__all__ = ["ProducerMetadata", "TOPIC_EXPIRY_NEEDS_UPDATE"]

log = logging.getLogger(__name__)

TOPIC_EXPIRY_NEEDS_UPDATE = -1


class ProducerMetadata(Metadata):
    """Kafka's ``ProducerMetadata``. Thread-safe."""

    def __init__(self, refresh_backoff_ms: int, metadata_expire_ms: int, metadata_idle_ms: int,
                 time: Time = SYSTEM_TIME, *, log_context: str = "",
                 cluster_resource_listeners: Iterable[Any] = ()) -> None:
        super().__init__(refresh_backoff_ms, metadata_expire_ms, time, log_context=log_context,
                         cluster_resource_listeners=cluster_resource_listeners)
        self.metadata_idle_ms = metadata_idle_ms
        self._topics: dict[str, int] = {}
        self._new_topics: set[str] = set()

    def new_metadata_request(self) -> Any:
        with self._lock:
            return metadata_request(list(self._topics), True)

    def new_metadata_request_for_new_topics(self) -> Any:
        with self._lock:
            return metadata_request(list(self._new_topics), True)

    def add(self, topic: str, now_ms: int) -> None:
        """Mark ``topic`` used now (resets its expiry); a first use requests an update for it at once."""
        if topic is None:
            raise ValueError("topic cannot be null")
        topics = self._topics
        if topic in topics:
            # Hot path (every send): refresh the expiry without the lock. Racing with expiry removal only
            # re-adds a known topic, which the next metadata wait or full update handles.
            topics[topic] = now_ms + self.metadata_idle_ms
            return
        with self._lock:
            if self._topics.get(topic) is None:
                self._new_topics.add(topic)
                self.request_update_for_new_topics()
            self._topics[topic] = now_ms + self.metadata_idle_ms

    def request_update_for_topic(self, topic: str) -> int:
        with self._lock:
            if topic in self._new_topics:
                return self.request_update_for_new_topics()
            return self.request_update()

    def topics(self) -> set[str]:
        with self._lock:
            return set(self._topics)

    def new_topics(self) -> set[str]:
        with self._lock:
            return set(self._new_topics)

    def contains_topic(self, topic: str) -> bool:
        return topic in self._topics

    def retain_topic(self, topic: str, is_internal: bool, now_ms: int) -> bool:
        with self._lock:
            expire_ms = self._topics.get(topic)
            if expire_ms is None:
                return False
            if topic in self._new_topics:
                return True
            if expire_ms <= now_ms:
                log.debug("%sRemoving unused topic %s from the metadata list, expiryMs %d now %d",
                          self.log_context, topic, expire_ms, now_ms)
                del self._topics[topic]
                return False
            return True

    def await_update(self, last_version: int, timeout_ms: int) -> None:
        """Block until the update version is above ``last_version`` (Kafka's ``awaitUpdate``).

        Raises ``ValueError`` for a negative timeout, :class:`KafkaTimeoutError` "Failed to update metadata
        after N ms." when it elapses, fatal metadata errors, and :class:`KafkaError` if metadata closes.
        """
        if timeout_ms < 0:
            raise ValueError("Max time to wait for metadata updates should not be < 0 milliseconds")
        time = self.time
        begin = time.milliseconds()
        remaining = timeout_ms
        with self._cond:
            while True:
                self.maybe_throw_fatal_exception()
                if self._update_version > last_version or self._closed:
                    break
                if remaining <= 0:
                    raise KafkaTimeoutError(f"Failed to update metadata after {timeout_ms} ms.")
                time.wait_on(self._cond, remaining)
                remaining = timeout_ms - (time.milliseconds() - begin)
        if self._closed:
            raise KafkaError("Requested metadata update after close")

    def update(self, request_version: int, response: Any, is_partial_update: bool, now_ms: int) -> None:
        with self._lock:
            super().update(request_version, response, is_partial_update, now_ms)
            if self._new_topics:
                for topic in response.topics:
                    self._new_topics.discard(topic.name)
            self._cond.notify_all()
