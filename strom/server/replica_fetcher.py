"""Followers pull from their leaders: one fetcher task per leader broker.

Kafka counterpart: ``ReplicaFetcherManager`` + ``ReplicaFetcherThread`` (``AbstractFetcherThread``). A partition
that starts following first truncates its log where it diverges from the leader's (KIP-101/KIP-279: it asks
OffsetForLeaderEpoch for the end offset of its latest epoch and cuts anything past it), then fetches from its
log end offset with Fetch requests carrying this broker's id, appends what comes back as it is, and takes the
leader's high watermark (capped at its own log end). Each fetcher keeps a fetch session with its leader (KIP-227,
as Kafka's ``ReplicaFetcherThread`` does): after the first full request only the partitions whose fetch offset
moved are named, and the leader answers only the partitions with news. Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass

from strom.common.error_codes import ErrorCode
from strom.common.errors import BrokerResponseError, KafkaConnectionError, KafkaError
from strom.common.structs import TopicPartition
from strom.common.time import Time
from strom.network.fetch_session_handler import FetchSessionHandler, PartitionData
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.fetch import FetchRequest
from strom.protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest
from strom.server.broker_channel import BrokerChannel
from strom.server.metadata_cache import MetadataCache
from strom.server.replica_manager import ReplicaManager
from strom.server.security.inter_broker import InterBrokerSecurity

__all__ = ["ReplicaFetcherManager"]

log = logging.getLogger("strom.replication")

FETCH_VERSION = 12
OFFSET_FOR_LEADER_EPOCH_VERSION = 4


@dataclass(slots=True)
class _PartitionFetchState:
    leader_epoch: int
    truncating: bool = True
    delayed_until_ms: int = 0


class ReplicaFetcherManager:
    def __init__(self, node_id: int, replica_manager: ReplicaManager, metadata: MetadataCache, time: Time, *,
                 listener: str, wait_max_ms: int = 500, min_bytes: int = 1, max_bytes: int = 1 << 20,
                 response_max_bytes: int = 10 << 20, backoff_ms: int = 1000, socket_timeout_ms: int = 30_000,
                 security: InterBrokerSecurity | None = None) -> None:
        self.node_id = node_id
        self.security = security
        self.replica_manager = replica_manager
        self.metadata = metadata
        self.time = time
        self.listener = listener
        self.wait_max_ms = wait_max_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.response_max_bytes = response_max_bytes
        self.backoff_ms = backoff_ms
        self.socket_timeout_s = socket_timeout_ms / 1000
        self._fetchers: dict[int, _ReplicaFetcher] = {}

    def add_partitions(self, partitions: dict[TopicPartition, tuple[int, int]]) -> None:
        """Start following: ``{tp: (leader_id, leader_epoch)}``; each partition truncates first."""
        for tp, (leader, epoch) in partitions.items():
            for lid, f in list(self._fetchers.items()):
                if lid != leader:
                    f.remove(tp)
            f = self._fetchers.get(leader)
            if f is None:
                f = self._fetchers[leader] = _ReplicaFetcher(self, leader)
            f.add(tp, epoch)

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        tps = list(tps)
        for f in self._fetchers.values():
            for tp in tps:
                f.remove(tp)

    def shutdown(self) -> None:
        for f in self._fetchers.values():
            f.close()
        self._fetchers.clear()

    def fetching(self) -> dict[TopicPartition, int]:
        """Partitions being fetched and from which leader (for tests and tools)."""
        return {tp: lid for lid, f in self._fetchers.items() for tp in f.partitions}


class _ReplicaFetcher:
    def __init__(self, manager: ReplicaFetcherManager, leader_id: int) -> None:
        self.m = manager
        self.leader_id = leader_id
        self.partitions: dict[TopicPartition, _PartitionFetchState] = {}
        self.channel: BrokerChannel | None = None
        self.session = FetchSessionHandler(leader_id)
        self._wakeup = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        self.partitions[tp] = _PartitionFetchState(leader_epoch)
        self._wakeup.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    def close(self) -> None:
        self._task.cancel()
        if self.channel is not None:
            self.channel.close()

    def _connect(self) -> BrokerChannel | None:
        b = self.m.metadata.broker(self.leader_id)
        ep = b.endpoint(self.m.listener) or b.endpoint() if b is not None else None
        if ep is None:
            return None
        if self.channel is None:
            self.channel = BrokerChannel(ep[0], ep[1], f"strom-replica-fetcher-{self.m.node_id}",
                                         timeout_s=self.m.socket_timeout_s + self.m.wait_max_ms / 1000,
                                         security=self.m.security)
        else:
            self.channel.retarget(ep[0], ep[1])
        return self.channel

    async def _run(self) -> None:
        while True:
            if not self.partitions:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            channel = self._connect()
            if channel is None:
                await asyncio.sleep(self.m.backoff_ms / 1000)
                continue
            try:
                truncating = [tp for tp, st in self.partitions.items() if st.truncating]
                if truncating:
                    await self._truncate(channel, truncating)
                if any(not st.truncating for st in self.partitions.values()):
                    await self._fetch(channel)
                elif truncating:
                    await asyncio.sleep(self.m.backoff_ms / 1000)
            except KafkaConnectionError as e:
                log.debug("fetcher for leader %d: %s", self.leader_id, e)
                await asyncio.sleep(self.m.backoff_ms / 1000)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("replica fetcher for leader %d failed; retrying", self.leader_id)
                await asyncio.sleep(self.m.backoff_ms / 1000)

    async def _truncate(self, channel: BrokerChannel, tps: list[TopicPartition]) -> None:
        rm = self.m.replica_manager
        by_topic: dict[str, list[OffsetForLeaderEpochRequest.OffsetForLeaderPartition]] = {}
        asked: dict[TopicPartition, int] = {}
        for tp in tps:
            p = rm.get_partition(tp)
            if p is None:
                self.partitions.pop(tp, None)
                continue
            latest = p.log.leader_epoch_cache.latest_epoch
            if latest is None:
                self.partitions[tp].truncating = False  # nothing of ours to disagree with
                continue
            asked[tp] = latest
            by_topic.setdefault(tp.topic, []).append(OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                partition=tp.partition, current_leader_epoch=self.partitions[tp].leader_epoch, leader_epoch=latest))
        if not by_topic:
            return
        req = OffsetForLeaderEpochRequest(replica_id=self.m.node_id, topics=[
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in by_topic.items()])
        resp = await channel.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, req)
        for t in resp.topics:
            for r in t.partitions:
                tp = TopicPartition(t.topic, r.partition)
                st = self.partitions.get(tp)
                p = rm.get_partition(tp)
                if st is None or p is None or tp not in asked:
                    continue
                if r.error_code:
                    log.debug("%s: OffsetForLeaderEpoch from %d: error %d", tp, self.leader_id, r.error_code)
                    continue
                lg = p.log
                if r.end_offset < 0:
                    target = min(lg.high_watermark, lg.log_end_offset)  # the leader knows no epoch: the old rule
                elif r.leader_epoch == asked[tp]:
                    target = min(r.end_offset, lg.log_end_offset)
                else:
                    # The leader has an older epoch than ours: cut at the end of that epoch on both sides.
                    _e, ours = lg.leader_epoch_cache.end_offset_for(r.leader_epoch, lg.log_end_offset)
                    target = min(r.end_offset, ours if ours >= 0 else lg.log_end_offset, lg.log_end_offset)
                if target < lg.log_end_offset:
                    log.info("%s: truncating from %d to %d to match leader %d (epoch %d)", tp, lg.log_end_offset,
                             target, self.leader_id, r.leader_epoch)
                    rm.log_manager.truncate_to(tp, target)
                st.truncating = False

    async def _fetch(self, channel: BrokerChannel) -> None:
        rm = self.m.replica_manager
        now = self.m.time.milliseconds()
        builder = self.session.new_builder()
        wanted = 0
        quota = rm.follower_quota
        throttled: set[TopicPartition] = set()  # a reassignment's new replicas, held to the follower rate (KIP-73)
        for tp, st in self.partitions.items():
            p = rm.get_partition(tp)
            if st.truncating or p is None or st.delayed_until_ms > now:
                continue
            if quota.is_throttled(tp) and self.m.node_id not in p.isr:
                if quota.is_quota_exceeded():
                    continue  # left out of this fetch (and of the session) until the rate falls back
                throttled.add(tp)
            builder.add(tp, PartitionData(p.log_end_offset, p.log.log_start_offset, self.m.max_bytes, st.leader_epoch))
            wanted += 1
        if not wanted:
            await asyncio.sleep(self.m.backoff_ms / 1000)
            return
        data = builder.build()
        by_topic: dict[str, list[FetchRequest.FetchPartition]] = {}
        for tp, pd in data.to_send.items():
            by_topic.setdefault(tp.topic, []).append(FetchRequest.FetchPartition(
                partition=tp.partition, current_leader_epoch=pd.current_leader_epoch, fetch_offset=pd.fetch_offset,
                last_fetched_epoch=-1, log_start_offset=pd.log_start_offset, partition_max_bytes=pd.max_bytes))
        forgotten: dict[str, list[int]] = {}
        for tp in data.to_forget:
            forgotten.setdefault(tp.topic, []).append(tp.partition)
        req = FetchRequest(replica_id=self.m.node_id, max_wait_ms=self.m.wait_max_ms, min_bytes=self.m.min_bytes,
                           max_bytes=self.m.response_max_bytes, isolation_level=0,
                           session_id=data.metadata.session_id, session_epoch=data.metadata.epoch,
                           topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in by_topic.items()],
                           forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=t, partitions=ps)
                                                  for t, ps in forgotten.items()], rack_id="")
        try:
            resp = await channel.request(ApiKey.FETCH, FETCH_VERSION, req)
        except KafkaConnectionError as e:
            self.session.handle_error(e)
            raise
        if not self.session.handle_response(resp):
            return  # a session error: the next request is a full one
        flushes: list[tuple[TopicPartition, Future[None]]] = []
        throttled_bytes = 0
        for t in resp.responses:
            for pd in t.partitions:
                tp = TopicPartition(t.topic, pd.partition_index)
                if tp in throttled:
                    throttled_bytes += len(pd.records or b"")
                st = self.partitions.get(tp)
                p = rm.get_partition(tp)
                if st is None or p is None or p.is_leader:
                    continue
                if pd.error_code == ErrorCode.NONE:
                    try:
                        info = p.append_records_to_follower(pd.records or b"", pd.high_watermark)
                        if info is not None and info.flushed is not None:
                            flushes.append((tp, info.flushed))
                    except (BrokerResponseError, KafkaError, OSError) as e:
                        log.error("%s: follower append failed: %s", tp, e)
                        st.delayed_until_ms = now + self.m.backoff_ms
                        rm.maybe_log_dir_failure(tp, e)  # an I/O error takes its log dir offline
                elif pd.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    lg = p.log
                    if pd.log_start_offset > lg.log_end_offset:
                        log.info("%s: leader's log starts at %d past ours (%d): starting over there", tp,
                                 pd.log_start_offset, lg.log_end_offset)
                        rm.log_manager.truncate_fully_and_start_at(tp, pd.log_start_offset)
                    else:
                        st.truncating = True
                else:
                    st.delayed_until_ms = now + self.m.backoff_ms
        quota.record(throttled_bytes)
        # flush.messages reached on this follower: the next fetch (which tells the leader how far this replica
        # is, and so moves the HW that acks=all waits for) goes out once the flusher has made the records durable,
        # as Kafka's follower flushes inside its append.
        for tp, fut in flushes:
            try:
                await asyncio.wrap_future(fut)
            except (KafkaError, OSError) as e:
                log.error("%s: follower flush failed: %s", tp, e)
                rm.maybe_log_dir_failure(tp, e)
