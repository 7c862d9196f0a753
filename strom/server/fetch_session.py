"""Fetch sessions (KIP-227, incremental fetch): the broker's session cache and the per-request fetch contexts.

Kafka counterpart: ``kafka.server.FetchSession.scala`` — ``CachedPartition``, ``FetchSession``, the four
``FetchContext`` kinds, ``FetchSessionCache`` (one shard: strom's broker has one event loop) and ``FetchManager``.

A client opens a session with a full Fetch (epoch 0); the response carries the new session id. Each later request
of the session (epoch 1, 2, ...) names only the partitions whose fetch parameters changed (and, in
``forgotten_topics_data``, those to drop); the broker reads every partition of the session and answers only those
with something new: records, a moved high watermark, last stable offset or log start offset, a preferred read
replica, a diverging epoch or an error. Partitions that returned records move to the end of the session, so a
``max_bytes``-limited response reaches the others next time. Epoch -1 is a sessionless (full, legacy) fetch,
still served. Sessions are keyed by topic id from Fetch v13 on and by topic name before; a request whose version
does not match its session's keying gets FETCH_SESSION_TOPIC_ID_ERROR, an unknown session id
FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH (the client then starts over with a full
fetch).

The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions. When it is full, a new session
may evict (Kafka's ``tryEvict``): first the least recently used session if it has been idle longer than
``min.incremental.fetch.session.eviction.ms``; otherwise the least valuable evictable session, ordered by
(privileged, partitions, id), if the new one is worth more. A session becomes evictable once it is older than the
eviction time (followers' sessions are privileged: only other privileged sessions may evict them, and only then);
an unprivileged session younger than that may still be evicted by a privileged one.

Sans-I/O and event loop only: Kafka's session and cache locks are not needed with one loop. Time comes from the
injected :class:`~strom.common.time.Time` (``milliseconds``).
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Protocol

from strom.common.error_codes import ErrorCode
from strom.protocol.fetch_metadata import FINAL_EPOCH, INVALID_SESSION_ID, FetchMetadata
from strom.protocol.messages.fetch import FetchResponse

if TYPE_CHECKING:
    from strom.common.time import Time

__all__ = [
    "CachedPartition", "FetchContext", "FetchManager", "FetchSession", "FetchSessionCache", "FullFetchContext",
    "IncrementalFetchContext", "PartitionKey", "PartitionRequest", "SessionErrorContext", "SessionlessFetchContext",
    "TopicKey",
]

log = logging.getLogger("strom.server.fetch_session")

TopicKey = str | uuid.UUID  # the topic name (Fetch < v13) or the topic id (v13+)
PartitionKey = tuple[TopicKey, int]


class PartitionRequest(Protocol):
    """What a Fetch request says about one partition (``FetchRequest.FetchPartition`` or a cached partition)."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int


def _records_size(records: object) -> int:
    return 0 if records is None else len(records)  # type: ignore[arg-type]


class CachedPartition:
    """One partition of a session: the last request parameters the client sent for it, and what the last response
    told the client (``high_watermark`` -1 after an error, so the partition is sent again once the error clears).
    It has ``FetchRequest.FetchPartition``'s attribute names, so the fetch handler reads it as a request."""

    __slots__ = ("topic", "partition", "partition_max_bytes", "fetch_offset", "current_leader_epoch",
                 "last_fetched_epoch", "log_start_offset", "high_watermark", "last_stable_offset",
                 "local_log_start_offset")

    def __init__(self, topic: TopicKey, req: PartitionRequest, resp: FetchResponse.PartitionData | None = None) -> None:
        self.topic = topic
        self.partition = req.partition
        self.partition_max_bytes = req.partition_max_bytes
        self.fetch_offset = req.fetch_offset
        self.current_leader_epoch = req.current_leader_epoch
        self.last_fetched_epoch = req.last_fetched_epoch
        self.log_start_offset = req.log_start_offset  # the fetcher's (a follower's) log start offset
        self.high_watermark = -1 if resp is None else resp.high_watermark
        self.last_stable_offset = -1 if resp is None else resp.last_stable_offset
        self.local_log_start_offset = -1 if resp is None else resp.log_start_offset  # this broker's

    def update_request_params(self, req: PartitionRequest) -> None:
        self.partition_max_bytes = req.partition_max_bytes
        self.fetch_offset = req.fetch_offset
        self.current_leader_epoch = req.current_leader_epoch
        self.last_fetched_epoch = req.last_fetched_epoch
        self.log_start_offset = req.log_start_offset

    def maybe_update_response_data(self, resp: FetchResponse.PartitionData, update: bool) -> bool:
        """True if ``resp`` must be in the incremental response; with ``update``, remember what it tells."""
        must_respond = _records_size(resp.records) > 0
        if self.high_watermark != resp.high_watermark:
            must_respond = True
            if update:
                self.high_watermark = resp.high_watermark
        # Kafka does not compare the last stable offset (it moves with the high watermark when a marker is
        # written); comparing it costs nothing and can only add a partition to the response.
        if self.last_stable_offset != resp.last_stable_offset:
            must_respond = True
            if update:
                self.last_stable_offset = resp.last_stable_offset
        if self.local_log_start_offset != resp.log_start_offset:
            must_respond = True
            if update:
                self.local_log_start_offset = resp.log_start_offset
        if resp.preferred_read_replica >= 0:
            must_respond = True
        if resp.error_code != ErrorCode.NONE:
            if update:
                self.high_watermark = -1
            must_respond = True
        de = resp.diverging_epoch
        if de is not None and de.epoch >= 0 and de.end_offset >= 0:
            must_respond = True
        return must_respond

    def __repr__(self) -> str:
        return (f"CachedPartition(topic={self.topic}, partition={self.partition}, "
                f"max_bytes={self.partition_max_bytes}, fetch_offset={self.fetch_offset}, "
                f"high_watermark={self.high_watermark}, fetcher_log_start_offset={self.log_start_offset}, "
                f"local_log_start_offset={self.local_log_start_offset})")


class FetchSession:
    """One incremental fetch session: its partitions in fetch order and its expected next epoch."""

    __slots__ = ("id", "privileged", "partition_map", "uses_topic_ids", "creation_ms", "last_used_ms", "epoch",
                 "cached_size", "evictable_by_all", "evictable_by_privileged")

    def __init__(self, session_id: int, privileged: bool, partition_map: dict[PartitionKey, CachedPartition],
                 uses_topic_ids: bool, creation_ms: int, last_used_ms: int, epoch: int) -> None:
        self.id = session_id
        self.privileged = privileged
        self.partition_map = partition_map  # insertion order is fetch order
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = creation_ms
        self.last_used_ms = last_used_ms
        self.epoch = epoch  # the epoch the next request must carry
        self.cached_size = -1  # partitions when last touched; -1: not in the cache
        self.evictable_by_all = False  # set by FetchSessionCache.touch
        self.evictable_by_privileged = False

    @property
    def size(self) -> int:
        return len(self.partition_map)

    @property
    def metadata(self) -> FetchMetadata:
        return FetchMetadata(self.id, self.epoch)

    def evictable_key(self) -> tuple[bool, int, int]:
        return (self.privileged, self.cached_size, self.id)

    def update(self, fetch_data: dict[PartitionKey, PartitionRequest], to_forget: Iterable[PartitionKey],
               ) -> tuple[list[PartitionKey], list[PartitionKey], list[PartitionKey]]:
        """Apply an incremental request: (added, updated, removed) partitions."""
        added: list[PartitionKey] = []
        updated: list[PartitionKey] = []
        removed: list[PartitionKey] = []
        pm = self.partition_map
        for key, req in fetch_data.items():
            cached = pm.get(key)
            if cached is None:
                pm[key] = CachedPartition(key[0], req)
                added.append(key)
            else:
                cached.update_request_params(req)
                updated.append(key)
        for key in to_forget:
            if pm.pop(key, None) is not None:
                removed.append(key)
        return added, updated, removed

    def __repr__(self) -> str:
        return (f"FetchSession(id={self.id}, privileged={self.privileged}, partitions={len(self.partition_map)}, "
                f"uses_topic_ids={self.uses_topic_ids}, creation_ms={self.creation_ms}, "
                f"last_used_ms={self.last_used_ms}, epoch={self.epoch})")


def build_response(error_code: int, throttle_ms: int, session_id: int,
                   responses: list[FetchResponse.FetchableTopicResponse]) -> FetchResponse:
    return FetchResponse(throttle_time_ms=throttle_ms, error_code=error_code, session_id=session_id,
                         responses=responses)


class FetchContext:
    """What one Fetch request reads and how its response is made (Kafka's ``FetchContext``).

    The handler reads every partition :meth:`partitions` yields (in that order), gathers the results as
    ``FetchableTopicResponse`` s (topics keyed as :data:`TopicKey`: names below v13, ids from v13) and passes them
    to :meth:`update_and_generate_response_data`, or, when a quota throttles the client, calls
    :meth:`get_throttled_response` instead."""

    error_code: int = ErrorCode.NONE

    def partitions(self) -> Iterator[tuple[TopicKey, PartitionRequest]]:
        return iter(())

    def update_and_generate_response_data(self, responses: list[FetchResponse.FetchableTopicResponse],
                                          ) -> FetchResponse:
        raise NotImplementedError

    def get_throttled_response(self, throttle_ms: int) -> FetchResponse:
        return build_response(ErrorCode.NONE, throttle_ms, INVALID_SESSION_ID, [])


class SessionErrorContext(FetchContext):
    """The request's session could not be used: no partition is read, the response carries only the error."""

    def __init__(self, error_code: int, metadata: FetchMetadata) -> None:
        self.error_code = error_code
        self.metadata = metadata

    def update_and_generate_response_data(self, responses: list[FetchResponse.FetchableTopicResponse],
                                          ) -> FetchResponse:
        return build_response(self.error_code, 0, INVALID_SESSION_ID, [])


class SessionlessFetchContext(FetchContext):
    """A full fetch that opens no session (epoch -1, Fetch < v7, or an incremental request that emptied its
    session)."""

    def __init__(self, fetch_data: dict[PartitionKey, PartitionRequest]) -> None:
        self.fetch_data = fetch_data

    def partitions(self) -> Iterator[tuple[TopicKey, PartitionRequest]]:
        for (topic, _p), req in self.fetch_data.items():
            yield topic, req

    def update_and_generate_response_data(self, responses: list[FetchResponse.FetchableTopicResponse],
                                          ) -> FetchResponse:
        return build_response(ErrorCode.NONE, 0, INVALID_SESSION_ID, responses)


class FullFetchContext(FetchContext):
    """A full fetch (epoch 0): every partition is named; the response opens a session if the cache has room."""

    def __init__(self, time: Time, cache: FetchSessionCache, fetch_data: dict[PartitionKey, PartitionRequest],
                 uses_topic_ids: bool, is_from_follower: bool) -> None:
        self.time = time
        self.cache = cache
        self.fetch_data = fetch_data
        self.uses_topic_ids = uses_topic_ids
        self.is_from_follower = is_from_follower

    def partitions(self) -> Iterator[tuple[TopicKey, PartitionRequest]]:
        for (topic, _p), req in self.fetch_data.items():
            yield topic, req

    def update_and_generate_response_data(self, responses: list[FetchResponse.FetchableTopicResponse],
                                          ) -> FetchResponse:
        uses_ids = self.uses_topic_ids

        def create_partitions() -> dict[PartitionKey, CachedPartition]:
            cached: dict[PartitionKey, CachedPartition] = {}
            for t in responses:
                topic = t.topic_id if uses_ids else t.topic
                for pd in t.partitions:
                    key = (topic, pd.partition_index)
                    req = self.fetch_data.get(key)
                    if req is not None:
                        cached[key] = CachedPartition(topic, req, pd)
            return cached

        size = sum(len(t.partitions) for t in responses)
        session_id = self.cache.maybe_create_session(self.time.milliseconds(), self.is_from_follower, size,
                                                     uses_ids, create_partitions)
        return build_response(ErrorCode.NONE, 0, session_id, responses)


class IncrementalFetchContext(FetchContext):
    """An incremental fetch in an existing session: the session's partitions are read, the unchanged ones are
    left out of the response."""

    def __init__(self, metadata: FetchMetadata, session: FetchSession) -> None:
        self.metadata = metadata
        self.session = session

    def partitions(self) -> Iterator[tuple[TopicKey, PartitionRequest]]:
        # A snapshot: a later request of the session may change the map while this one waits for data.
        for cached in list(self.session.partition_map.values()):
            yield cached.topic, cached

    def _epoch_moved_on(self) -> bool:
        # Another request of this session was accepted while this one waited (a duplicate or a retry).
        return self.session.epoch != FetchMetadata.next_epoch(self.metadata.epoch)

    def update_and_generate_response_data(self, responses: list[FetchResponse.FetchableTopicResponse],
                                          ) -> FetchResponse:
        session = self.session
        if self._epoch_moved_on():
            log.info("Incremental fetch session %d expected epoch %d, but got %d. Possible duplicate request.",
                     session.id, FetchMetadata.next_epoch(self.metadata.epoch), session.epoch)
            return build_response(ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, session.id, [])
        pm = session.partition_map
        uses_ids = session.uses_topic_ids
        out: list[FetchResponse.FetchableTopicResponse] = []
        for t in responses:
            topic = t.topic_id if uses_ids else t.topic
            kept = []
            for pd in t.partitions:
                key = (topic, pd.partition_index)
                cached = pm.get(key)
                if cached is None:  # forgotten meanwhile: nothing to compare with, send it
                    kept.append(pd)
                    continue
                if cached.maybe_update_response_data(pd, True):
                    kept.append(pd)
                    if _records_size(pd.records) > 0:  # to the back of the line: the others go first next time
                        del pm[key]
                        pm[key] = cached
            if kept:
                t.partitions = kept
                out.append(t)
        return build_response(ErrorCode.NONE, 0, session.id, out)

    def get_throttled_response(self, throttle_ms: int) -> FetchResponse:
        session = self.session
        if self._epoch_moved_on():
            return build_response(ErrorCode.INVALID_FETCH_SESSION_EPOCH, throttle_ms, session.id, [])
        return build_response(ErrorCode.NONE, throttle_ms, session.id, [])


class FetchSessionCache:
    """The broker's fetch sessions (Kafka's ``FetchSessionCache`` with one shard); see the module docstring for
    the eviction rules. ``max_entries``: ``max.incremental.fetch.session.cache.slots``; ``eviction_ms``:
    ``min.incremental.fetch.session.eviction.ms``."""

    def __init__(self, max_entries: int, eviction_ms: int, rng: random.Random | None = None) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self._rng = rng or random.Random()
        self._sessions: dict[int, FetchSession] = {}
        self._num_partitions = 0
        self.evictions = 0  # IncrementalFetchSessionEvictionsPerSec's Count

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    @property
    def size(self) -> int:
        """NumIncrementalFetchSessions."""
        return len(self._sessions)

    @property
    def total_partitions(self) -> int:
        """NumIncrementalFetchPartitionsCached."""
        return self._num_partitions

    def new_session_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, 2**31 - 2)
            if session_id not in self._sessions:
                return session_id

    def maybe_create_session(self, now: int, privileged: bool, size: int, uses_topic_ids: bool,
                             create_partitions: Callable[[], dict[PartitionKey, CachedPartition]]) -> int:
        """A new session's id, or INVALID_SESSION_ID (0) when the cache is full and nothing may be evicted."""
        if len(self._sessions) < self.max_entries or self._try_evict(privileged, (privileged, size, 0), now):
            session = FetchSession(self.new_session_id(), privileged, create_partitions(), uses_topic_ids, now, now,
                                   FetchMetadata.next_epoch(0))
            log.debug("Created fetch session %s", session)
            self._sessions[session.id] = session
            self.touch(session, now)
            return session.id
        log.debug("No fetch session created for privileged=%s, size=%d.", privileged, size)
        return INVALID_SESSION_ID

    def _try_evict(self, privileged: bool, key: tuple[bool, int, int], now: int) -> bool:
        """Kafka's tryEvict: a stale session first, else the least valuable evictable one if ``key`` is worth
        more."""
        # Two scans of the sessions where Kafka keeps sorted trees: this runs only when the cache is full and a full
        # fetch asks for a new session, while touch(), on every incremental fetch, stays O(1).
        if not self._sessions:
            return False
        lru = min(self._sessions.values(), key=_last_used_key)
        if now - lru.last_used_ms > self.eviction_ms:
            log.debug("Evicting stale fetch session %d.", lru.id)
            self.remove(lru)
            self.evictions += 1
            return True
        candidates = [s for s in self._sessions.values()
                      if (s.evictable_by_privileged if privileged else s.evictable_by_all)]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.evictable_key)
        if key < victim.evictable_key():
            log.debug("Can't evict %s with %s", victim.evictable_key(), key)
            return False
        log.debug("Evicting fetch session %s with %s.", victim.evictable_key(), key)
        self.remove(victim)
        self.evictions += 1
        return True

    def remove(self, session: FetchSession | int) -> FetchSession | None:
        """Drop a session (by object or id); the removed session, or None if it was not cached."""
        session_id = session if isinstance(session, int) else session.id
        removed = self._sessions.pop(session_id, None)
        if removed is not None:
            self._num_partitions -= max(0, removed.cached_size)
            removed.cached_size = -1
        return removed

    def touch(self, session: FetchSession, now: int) -> None:
        """The session was used at ``now``: most recently used, and its size and evictability re-counted."""
        if session.id not in self._sessions:
            return
        session.last_used_ms = now
        if session.cached_size != -1:
            self._num_partitions -= session.cached_size
        session.cached_size = session.size
        self._num_partitions += session.cached_size
        old_enough = now - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = (not session.privileged) or old_enough
        session.evictable_by_all = old_enough

    def sessions(self) -> list[FetchSession]:
        """The cached sessions, least recently used first (tests and tools)."""
        return sorted(self._sessions.values(), key=_last_used_key)


def _last_used_key(session: FetchSession) -> tuple[int, int]:
    return (session.last_used_ms, session.id)  # Kafka's LastUsedKey


class FetchManager:
    """Makes the :class:`FetchContext` of each Fetch request (Kafka's ``FetchManager``). Event loop only."""

    def __init__(self, time: Time, cache: FetchSessionCache) -> None:
        self.time = time
        self.cache = cache

    def new_context(self, version: int, metadata: FetchMetadata, is_follower: bool,
                    fetch_data: dict[PartitionKey, PartitionRequest], to_forget: list[PartitionKey]) -> FetchContext:
        """``fetch_data`` / ``to_forget`` are keyed by (topic id, partition) from v13, (topic name, partition)
        before."""
        cache = self.cache
        if metadata.is_full:
            if metadata.session_id != INVALID_SESSION_ID:
                # A full request names a session to close it (epoch -1) or to replace it (epoch 0).
                if cache.remove(metadata.session_id) is not None:
                    log.debug("Removed fetch session %d.", metadata.session_id)
            if metadata.epoch == FINAL_EPOCH:
                return SessionlessFetchContext(fetch_data)
            return FullFetchContext(self.time, cache, fetch_data, version >= 13, is_follower)
        session = cache.get(metadata.session_id)
        if session is None:
            log.debug("Session error for %d: no such session ID found.", metadata.session_id)
            return SessionErrorContext(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, metadata)
        if session.epoch != metadata.epoch:
            log.debug("Session error for %d: expected epoch %d, but got %d instead.", session.id, session.epoch,
                      metadata.epoch)
            return SessionErrorContext(ErrorCode.INVALID_FETCH_SESSION_EPOCH, metadata)
        if session.uses_topic_ids != (version >= 13):
            log.debug("Session error for %d: it %s topic ids, request version %d %s.", session.id,
                      "uses" if session.uses_topic_ids else "does not use", version,
                      "does" if version >= 13 else "does not")
            return SessionErrorContext(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR, metadata)
        added, updated, removed = session.update(fetch_data, to_forget)
        if not session.partition_map:
            log.debug("Closing fetch session %d (epoch %d): no partitions left after removing %d.", session.id,
                      session.epoch, len(removed))
            cache.remove(session)
            return SessionlessFetchContext(fetch_data)
        cache.touch(session, self.time.milliseconds())
        session.epoch = FetchMetadata.next_epoch(session.epoch)
        log.debug("Incremental fetch context for session %d, epoch %d: added %d, updated %d, removed %d partition(s)",
                  session.id, session.epoch, len(added), len(updated), len(removed))
        return IncrementalFetchContext(metadata, session)
