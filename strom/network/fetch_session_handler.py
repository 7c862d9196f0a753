"""The client side of fetch sessions (KIP-227): what to put in the next Fetch request to one broker.

Kafka counterpart: ``org.apache.kafka.clients.FetchSessionHandler``. One handler per broker a client fetches
from (the consumer's ``Fetcher``, a follower's replica fetcher). Each round the caller adds the partitions it
wants to fetch now (:meth:`FetchSessionHandler.new_builder`, :meth:`Builder.add`); :meth:`Builder.build` gives
the request data: every partition in a full request (epoch 0, no session yet), only the new and changed ones in
an incremental request, plus the partitions to forget (``forgotten_topics_data``). The response goes through
:meth:`FetchSessionHandler.handle_response`: a full response that carries a session id opens the session; a
session error (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, ...) or a response that does not match
the session makes the next request a full one again (its records are dropped: ``handle_response`` says
``False``); a failed request closes the session the same way (:meth:`handle_error`). :meth:`notify_close` makes
the next request the final one (epoch -1), which closes the session on the broker.

Partitions are keyed by name: strom's clients fetch with v12 at most (v13+ would key sessions by topic id).
Not thread-safe: the caller serialises use (one request per broker in flight).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, NamedTuple

from strom.common import error_codes as ec
from strom.common.error_codes import ErrorCode
from strom.common.structs import TopicPartition
from strom.protocol.fetch_metadata import INVALID_SESSION_ID, FetchMetadata

__all__ = ["FetchRequestData", "FetchSessionHandler", "PartitionData"]

log = logging.getLogger(__name__)


class PartitionData(NamedTuple):
    """What a Fetch request says about one partition (Java's ``FetchRequest.PartitionData``); a partition whose
    data differs from what the session last sent is re-sent."""

    fetch_offset: int
    log_start_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1


@dataclass(frozen=True, slots=True)
class FetchRequestData:
    to_send: dict[TopicPartition, PartitionData]  # the partitions to name in the request, in order
    to_forget: list[TopicPartition]  # the partitions to drop from the session
    session_partitions: dict[TopicPartition, PartitionData]  # everything the request fetches (named or implied)
    metadata: FetchMetadata

    def __str__(self) -> str:
        kind = "FullFetchRequest" if self.metadata.is_full else "IncrementalFetchRequest"
        implied = len(self.session_partitions) - len(self.to_send)
        return (f"{kind}(toSend={len(self.to_send)}, toForget={len(self.to_forget)}, implied={implied}, "
                f"metadata={self.metadata})")


class FetchSessionHandler:
    """Kafka's ``FetchSessionHandler`` for one broker (``node``); see the module docstring."""

    def __init__(self, node: int) -> None:
        self.node = node
        self.next_metadata = FetchMetadata.INITIAL
        # What the broker's session holds (what the last request sent, in its order).
        self.session_partitions: dict[TopicPartition, PartitionData] = {}

    @property
    def session_id(self) -> int:
        return self.next_metadata.session_id

    def new_builder(self) -> Builder:
        return Builder(self)

    def _verify_full(self, response_tps: set[TopicPartition]) -> str | None:
        extra = response_tps - self.session_partitions.keys()
        omitted = self.session_partitions.keys() - response_tps
        if extra or omitted:
            return f"omitted partitions {sorted(map(str, omitted))}, extra partitions {sorted(map(str, extra))}"
        return None

    def _verify_incremental(self, response_tps: set[TopicPartition]) -> str | None:
        extra = response_tps - self.session_partitions.keys()
        return f"extra partitions {sorted(map(str, extra))}" if extra else None

    def handle_response(self, response: Any) -> bool:
        """Move the session on after ``response``; ``False`` means its partition data must not be used."""
        error = getattr(response, "error_code", ErrorCode.NONE) or ErrorCode.NONE
        if error != ErrorCode.NONE:
            log.info("Node %s was unable to process the fetch request with %s: %s.", self.node, self.next_metadata,
                     ec.ERROR_CLASSES[error].name if error in ec.ERROR_CLASSES else error)
            if error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.next_metadata = FetchMetadata.INITIAL
            else:
                self.next_metadata = self.next_metadata.next_close_existing_attempt_new()
            return False
        response_tps = {TopicPartition(t.topic, p.partition_index) for t in response.responses for p in t.partitions}
        session_id = getattr(response, "session_id", INVALID_SESSION_ID)
        if self.next_metadata.is_full:
            if not response_tps and getattr(response, "throttle_time_ms", 0) > 0:
                # KIP-219: an empty full response with a throttle time is the broker throttling us, not an error;
                # it cannot be used either.
                log.debug("Node %s sent an empty full fetch response to throttle this client for %d ms.", self.node,
                          response.throttle_time_ms)
                self.next_metadata = FetchMetadata.INITIAL
                return False
            problem = self._verify_full(response_tps)
            if problem is not None:
                log.info("Node %s sent an invalid full fetch response with %s", self.node, problem)
                self.next_metadata = FetchMetadata.INITIAL
                return False
            if session_id == INVALID_SESSION_ID:
                log.debug("Node %s sent a full fetch response with %d partition(s)", self.node, len(response_tps))
                self.next_metadata = FetchMetadata.INITIAL
            else:
                log.debug("Node %s sent a full fetch response that created a new incremental fetch session %d with "
                          "%d partition(s)", self.node, session_id, len(response_tps))
                self.next_metadata = FetchMetadata.new_incremental(session_id)
            return True
        problem = self._verify_incremental(response_tps)
        if problem is not None:
            log.info("Node %s sent an invalid incremental fetch response with %s", self.node, problem)
            self.next_metadata = self.next_metadata.next_close_existing_attempt_new()
            return False
        if session_id == INVALID_SESSION_ID:
            log.debug("Node %s sent an incremental fetch response closing session %d", self.node,
                      self.next_metadata.session_id)
            self.next_metadata = FetchMetadata.INITIAL
        else:
            log.debug("Node %s sent an incremental fetch response for session %d with %d response partition(s), "
                      "%d implied", self.node, session_id, len(response_tps),
                      len(self.session_partitions) - len(response_tps))
            self.next_metadata = self.next_metadata.next_incremental()
        return True

    def handle_error(self, exc: BaseException | None = None) -> None:
        """The request failed (disconnect, timeout): its fate on the broker is unknown, so start over."""
        log.info("Error sending fetch request %s to node %s: %s", self.next_metadata, self.node, exc)
        self.next_metadata = self.next_metadata.next_close_existing_attempt_new()

    def notify_close(self) -> None:
        """The next request closes the session (epoch -1) and opens none."""
        log.debug("Set the metadata for next fetch request to close the existing session ID=%d",
                  self.next_metadata.session_id)
        self.next_metadata = self.next_metadata.next_close_existing()


class Builder:
    """The partitions to fetch this round; :meth:`build` turns them into a full or incremental request."""

    def __init__(self, handler: FetchSessionHandler) -> None:
        self.handler = handler
        self.next: dict[TopicPartition, PartitionData] = {}

    def add(self, tp: TopicPartition, data: PartitionData) -> None:
        self.next[tp] = data

    def build(self) -> FetchRequestData:
        h = self.handler
        nxt = self.next
        if h.next_metadata.is_full:
            log.debug("Built full fetch %s for node %s with %d partition(s).", h.next_metadata, h.node, len(nxt))
            h.session_partitions = nxt
            self.next = {}
            return FetchRequestData(dict(nxt), [], dict(nxt), h.next_metadata)
        session = h.session_partitions
        removed: list[TopicPartition] = []
        altered = 0
        for tp, prev in list(session.items()):
            data = nxt.pop(tp, None)
            if data is None:
                del session[tp]  # no longer wanted: forget it
                removed.append(tp)
            elif data != prev:
                nxt[tp] = data  # changed: re-added at the end of what is sent
                session[tp] = data
                altered += 1
        added = 0
        for tp, data in nxt.items():
            if tp in session:
                # Every partition also in the session was moved to the end above: nothing new past here.
                break
            session[tp] = data
            added += 1
        log.debug("Built incremental fetch %s for node %s. Added %d, altered %d, removed %d out of %d",
                  h.next_metadata, h.node, added, altered, len(removed), len(session))
        self.next = {}
        return FetchRequestData(nxt, removed, dict(session), h.next_metadata)
