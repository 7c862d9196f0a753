"""acks=all produces pipelined on one connection (real ZooKeeper + 3 strom brokers): while a Produce waits in the
purgatory for the ISR, the leader appends the connection's next Produce, and still answers every request in the
order it was sent, the Metadata request after them last."""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom import AdminClient
from strom.admin import NewTopic
from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from strom.record.builder import MemoryRecordsBuilder
from strom.record.records import MemoryRecords
from strom.testing.cluster import LocalCluster, wait_until
from strom.testing.raw_client import RawClient

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

TOPIC = "pipelined"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """The followers stay in the ISR for 15 s without fetching (the harness's default is 4 s): time enough for
    the leader to take all three produces on a loaded machine before the ISR shrinks and answers them."""
    with LocalCluster(3, overrides={"replica.lag.time.max.ms": "15000"}) as c:
        yield c


def _produce_request(value: bytes) -> ProduceRequest:
    b = MemoryRecordsBuilder()
    b.append(int(time.time() * 1000), None, value)
    return ProduceRequest(acks=-1, timeout_ms=60_000, topic_data=[ProduceRequest.TopicProduceData(
        name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=b.build())])])


def _batches_in_log(cluster: LocalCluster, node: int) -> int:
    segment = Path(cluster.brokers[node].data_dir) / f"{TOPIC}-0" / "00000000000000000000.log"
    return len(list(MemoryRecords(segment.read_bytes()).batches())) if segment.exists() else 0


def test_parked_acks_all_produce_lets_the_next_one_append_and_answers_in_order(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 3, None, {"min.insync.replicas": "1"})]).all().result(60)
        wait_until(lambda: len(admin.describe_topics([TOPIC])[TOPIC].result(30).partitions[0].isr) == 3, 60,
                   "an ISR of 3")
        leader = admin.describe_topics([TOPIC])[TOPIC].result(30).partitions[0].leader.node_id
    finally:
        admin.close(10)
    followers = [n for n in cluster.brokers if n != leader]
    with RawClient(cluster.brokers[leader].bootstrap) as client:
        # The metadata (from any broker) can name the leader before the leader has acted on its LeaderAndIsr
        # (NOT_LEADER_OR_FOLLOWER "does not host" then): one produce that succeeds first, offset 0.
        def leads() -> bool:
            r = client.request(ApiKey.PRODUCE, 9, _produce_request(b"first"))
            return r.responses[0].partition_responses[0].error_code == ErrorCode.NONE

        wait_until(leads, 60, f"broker {leader} to take produces for {TOPIC}-0")
        # The followers are stopped, so no acks=all produce can complete: every one of them parks on the leader
        # (they stay in the ISR for replica.lag.time.max.ms, 15 s here, far longer than the appends take).
        for n in followers:
            os.kill(cluster.brokers[n].proc.pid, signal.SIGSTOP)
        try:
            sent = [client.send(ApiKey.PRODUCE, 9, _produce_request(b"r%d" % i)) for i in range(3)]
            sent.append(client.send(ApiKey.METADATA, 9, MetadataRequest(topics=None)))
            # All three appended (after the first record) while the first of them still waits for the ISR (one at a time, the second would only
            # be read after the first was answered) ...
            def appended() -> bool:
                readable, _, _ = select.select([client.sock], [], [], 0)
                if readable:  # an answer this early says what went wrong (e.g. the partition moved)
                    raise AssertionError(f"answered before replication: {client.receive()!r}")
                return _batches_in_log(cluster, leader) == 4

            deadline = time.monotonic() + 10
            while not appended():
                assert time.monotonic() < deadline, (
                    f"the 3 produces were not appended on leader {leader} in 10 s (4 batches expected): "
                    f"{_batches_in_log(cluster, leader)} batches; leader log tail: "
                    f"{cluster.brokers[leader].read_log().splitlines()[-30:]}")
                time.sleep(0.05)
            # ... and nothing answered yet: the responses wait for the replicas, the Metadata for the produces.
            readable, _, _ = select.select([client.sock], [], [], 0)
            assert not readable, "a response arrived before any follower could have replicated the records"
        finally:
            for n in followers:
                os.kill(cluster.brokers[n].proc.pid, signal.SIGCONT)
        responses = [client.receive() for _ in sent]
    produce_responses = responses[:3]
    assert all(isinstance(r, ProduceResponse) for r in produce_responses)
    parts = [r.responses[0].partition_responses[0] for r in produce_responses]
    assert [p.error_code for p in parts] == [ErrorCode.NONE] * 3
    assert [p.base_offset for p in parts] == [1, 2, 3]  # appended and answered in the order sent
    assert isinstance(responses[3], MetadataResponse)
    assert [t.name for t in responses[3].topics if t.name == TOPIC] == [TOPIC]
