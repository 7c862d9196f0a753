"""A scripted one-broker "cluster" answering a MockClient's pending requests (group, offsets, fetch).

Tests build a consumer over ``MockClient`` + ``MockTime``, then alternate ``consumer.poll(timeout_ms=0)`` and
``broker.pump()``. The group logic is deliberately simple (one member is the leader of every generation it
joins; other members are added with :meth:`FakeBroker.add_member`); errors are injected per API with
:meth:`FakeBroker.inject`.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Any

from strom.common.structs import TopicPartition
from strom.consumer import KafkaConsumer
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages import (
    FetchResponse,
    FindCoordinatorResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListOffsetsResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    OffsetForLeaderEpochResponse,
    SyncGroupResponse,
)
from strom.record import MemoryRecordsBuilder
from strom.testing.mock_client import MockClient, metadata_update_with
from strom.testing.mock_time import MockTime

T0 = 1_700_000_000_000


class FakeBroker:
    def __init__(self, topics: dict[str, int], time: MockTime | None = None, auto: bool = True) -> None:
        self.time = time or MockTime(auto_tick_ms=1)
        self.client = MockClient(self.time)
        self.auto = auto
        send = self.client.send

        def send_and_answer(request: Any, now: int) -> None:
            send(request, now)
            if self.auto:  # answered at once; delivered by the client's next poll
                self.pump()

        self.client.send = send_and_answer  # type: ignore[method-assign]
        poll = self.client.poll

        def refresh_and_poll(timeout_ms: int, now: int) -> Any:
            self.refresh_metadata()
            return poll(timeout_ms, now)

        self.client.poll = refresh_and_poll  # type: ignore[method-assign]
        self.topics = topics
        self.logs: dict[TopicPartition, list[tuple[int, bytes]]] = defaultdict(list)  # (base offset, batch)
        self.log_start: dict[TopicPartition, int] = defaultdict(int)
        self.committed: dict[TopicPartition, int] = {}
        self.errors: dict[int, deque[int]] = defaultdict(deque)
        self.generation = 0
        self.members: dict[str, bytes] = {}
        self.extra_members: dict[str, bytes] = {}
        self.assignments: dict[str, bytes] = {}
        self.received: list[Any] = []
        self.destinations: list[tuple[int, Any]] = []  # (api key, node id) of each answered request
        self.preferred_read_replica = -1  # named in Fetch answers (KIP-392)
        self.member_seq = 0
        self.leader_epoch: int | None = None  # named in metadata answers (None: metadata_update_with's default)
        self.num_nodes = 1  # brokers named in metadata answers

    def consumer(self, **configs: Any) -> KafkaConsumer:
        configs.setdefault("bootstrap.servers", "localhost:1969")
        configs.setdefault("key.deserializer", "bytes")
        configs.setdefault("value.deserializer", "bytes")
        consumer = KafkaConsumer(configs, time=self.time, client=self.client)
        self.client.update_metadata(metadata_update_with(1, self.topics))
        return consumer

    # ---------------------------------------------------------------------------------------- data

    def produce(self, tp: TopicPartition, n: int, prefix: bytes = b"v", leader_epoch: int = -1) -> None:
        """Append ``n`` records in one batch, stamped with ``leader_epoch`` (the leader's epoch when written)."""
        base = self.end_offset(tp)
        b = MemoryRecordsBuilder(base_offset=base, partition_leader_epoch=leader_epoch)
        for i in range(n):
            b.append(T0 + base + i, b"k%d" % (base + i), prefix + b"%d" % (base + i))
        self.logs[tp].append((base, b.build()))

    def truncate(self, tp: TopicPartition, offset: int) -> None:
        """Drop the batches from ``offset`` on (a leader that never had them: an unclean election)."""
        self.logs[tp] = [(base, batch) for base, batch in self.logs[tp] if base < offset]
        assert self.end_offset(tp) == offset, "truncate at a batch boundary"

    def end_offset(self, tp: TopicPartition) -> int:
        log = self.logs.get(tp)
        if not log:
            return self.log_start[tp]
        from strom.record import RecordBatch

        return RecordBatch(log[-1][1]).next_offset

    def inject(self, api_key: int, *errors: int) -> None:
        self.errors[api_key].extend(errors)

    def _error(self, api_key: int) -> int:
        queue = self.errors.get(api_key)
        return queue.popleft() if queue else 0

    # ---------------------------------------------------------------------------------------- pump

    def refresh_metadata(self) -> None:
        """Answer the consumer's next metadata update with every topic (as a broker would)."""
        metadata = self.client.metadata
        if metadata is not None and metadata.update_requested():
            epoch = {} if self.leader_epoch is None else {"leader_epoch": self.leader_epoch}
            self.client.prepare_metadata_update(metadata_update_with(self.num_nodes, self.topics, **epoch))

    def pump(self, rounds: int = 1) -> int:
        """Answer every pending request (``rounds`` times); returns how many were answered."""
        answered = 0
        self.refresh_metadata()
        for _ in range(rounds):
            for request in list(self.client.requests):
                response = self.answer(request.api_key, request.request)
                if response is None:
                    continue
                self.received.append(request.request)
                self.destinations.append((request.api_key, request.destination))
                self.client.respond_to_request(request, response)
                answered += 1
        return answered

    def run(self, consumer: KafkaConsumer, until: Any, max_rounds: int = 200) -> list[Any]:
        """Poll and pump until ``until(records_so_far)`` is true; returns the records polled."""
        records: list[Any] = []
        for _ in range(max_rounds):
            self.refresh_metadata()
            records.extend(consumer.poll(timeout_ms=0))
            self.pump()
            if until(records):
                return records
        raise AssertionError(f"condition not reached after {max_rounds} rounds; requests: "
                             f"{[type(r.request).__name__ for r in self.client.requests]}")

    def requests_of(self, api_key: int) -> list[Any]:
        return [r for r in self.received if r.API_KEY == api_key]

    def answer(self, api_key: int, req: Any) -> Any:
        handler = getattr(self, f"_on_{ApiKey(api_key).name.lower()}", None)
        return None if handler is None else handler(req)

    def _on_find_coordinator(self, req: Any) -> Any:
        error = self._error(ApiKey.FIND_COORDINATOR)
        return FindCoordinatorResponse(error_code=error, node_id=0, host="localhost", port=1969)

    def _on_join_group(self, req: Any) -> Any:
        error = self._error(ApiKey.JOIN_GROUP)
        if error:
            return JoinGroupResponse(error_code=error, member_id=req.member_id)
        if not req.member_id:
            self.member_seq += 1
            return JoinGroupResponse(error_code=79, member_id=f"member-{self.member_seq}")
        self.generation += 1
        metadata = req.protocols[0].metadata
        self.members = {req.member_id: metadata, **self.extra_members}
        return JoinGroupResponse(
            generation_id=self.generation, protocol_type="consumer", protocol_name=req.protocols[0].name,
            leader=req.member_id, member_id=req.member_id,
            members=[JoinGroupResponse.JoinGroupResponseMember(member_id=m, metadata=md)
                     for m, md in self.members.items()])

    def _on_sync_group(self, req: Any) -> Any:
        error = self._error(ApiKey.SYNC_GROUP)
        if error:
            return SyncGroupResponse(error_code=error)
        if req.assignments:
            self.assignments = {a.member_id: a.assignment for a in req.assignments}
        return SyncGroupResponse(protocol_type="consumer", protocol_name=req.protocol_name,
                                 assignment=self.assignments.get(req.member_id, b""))

    def _on_heartbeat(self, req: Any) -> Any:
        return HeartbeatResponse(error_code=self._error(ApiKey.HEARTBEAT))

    def _on_leave_group(self, req: Any) -> Any:
        return LeaveGroupResponse(error_code=self._error(ApiKey.LEAVE_GROUP))

    def _on_offset_commit(self, req: Any) -> Any:
        error = self._error(ApiKey.OFFSET_COMMIT)
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                if not error:
                    self.committed[TopicPartition(t.name, p.partition_index)] = p.committed_offset
                parts.append(OffsetCommitResponse.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                                                                error_code=error))
            topics.append(OffsetCommitResponse.OffsetCommitResponseTopic(name=t.name, partitions=parts))
        return OffsetCommitResponse(topics=topics)

    def _on_offset_fetch(self, req: Any) -> Any:
        error = self._error(ApiKey.OFFSET_FETCH)
        topics = []
        for t in req.topics:
            parts = [OffsetFetchResponse.OffsetFetchResponsePartition(
                partition_index=p, committed_offset=self.committed.get(TopicPartition(t.name, p), -1),
                metadata="") for p in t.partition_indexes]
            topics.append(OffsetFetchResponse.OffsetFetchResponseTopic(name=t.name, partitions=parts))
        return OffsetFetchResponse(error_code=error, topics=topics)

    def _on_list_offsets(self, req: Any) -> Any:
        error = self._error(ApiKey.LIST_OFFSETS)
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                offset = self.log_start[tp] if p.timestamp == -2 else self.end_offset(tp)
                if p.timestamp >= 0:
                    offset = next((b for b, _ in self.logs[tp] if b >= p.timestamp - T0), -1)
                parts.append(ListOffsetsResponse.ListOffsetsPartitionResponse(
                    partition_index=p.partition_index, error_code=error, timestamp=-1, offset=offset))
            topics.append(ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name, partitions=parts))
        return ListOffsetsResponse(topics=topics)

    def _on_fetch(self, req: Any) -> Any:
        error = self._error(ApiKey.FETCH)
        responses = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition)
                end = self.end_offset(tp)
                code = error
                if not code and not self.log_start[tp] <= p.fetch_offset <= end:
                    code = 1  # OFFSET_OUT_OF_RANGE
                data = b"" if code else b"".join(
                    batch for base, batch in self.logs[tp] if _next_offset(batch) > p.fetch_offset)
                parts.append(FetchResponse.PartitionData(partition_index=p.partition, error_code=code,
                                                         high_watermark=end, last_stable_offset=end,
                                                         log_start_offset=self.log_start[tp], records=data,
                                                         preferred_read_replica=self.preferred_read_replica))
            responses.append(FetchResponse.FetchableTopicResponse(topic=t.topic, partitions=parts))
        return FetchResponse(responses=responses)


    def _on_offset_for_leader_epoch(self, req: Any) -> Any:
        """The end offset of the largest epoch at most the one asked for, from the batches' leader epochs (the
        broker's leader-epoch cache); (-1, -1) when the log has no such epoch."""
        from strom.record import RecordBatch

        R = OffsetForLeaderEpochResponse
        error = self._error(ApiKey.OFFSET_FOR_LEADER_EPOCH)
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition)
                epochs = [(RecordBatch(batch).partition_leader_epoch, base) for base, batch in self.logs[tp]]
                known = [e for e, _ in epochs if 0 <= e <= p.leader_epoch]
                if error or not known:
                    parts.append(R.EpochEndOffset(error_code=error, partition=p.partition, leader_epoch=-1,
                                                  end_offset=-1))
                    continue
                epoch = max(known)
                end = next((base for e, base in epochs if e > epoch), self.end_offset(tp))
                parts.append(R.EpochEndOffset(partition=p.partition, leader_epoch=epoch, end_offset=end))
            topics.append(R.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
        return R(topics=topics)


def _next_offset(batch: bytes) -> int:
    from strom.record import RecordBatch

    return RecordBatch(batch).next_offset
