"""Micro-benchmark of the generated codecs: ``python -m tools.codegen.bench``.

Metadata v12 response with 100 topics x 10 partitions; Produce v9 request with 50 partitions (1 KiB records
each); Fetch v12 response with 50 partitions. Prints the best-of-N time per encode and decode in µs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from strom.protocol.messages import FetchResponse, MetadataResponse, ProduceRequest


def metadata_response() -> MetadataResponse:
    M = MetadataResponse
    return M(
        throttle_time_ms=0,
        brokers=[M.MetadataResponseBroker(node_id=i, host=f"broker-{i}.example", port=9092, rack=None)
                 for i in range(3)],
        cluster_id="strom-cluster",
        controller_id=0,
        topics=[
            M.MetadataResponseTopic(
                error_code=0, name=f"topic-{t}", topic_id=uuid.UUID(int=t + 1), is_internal=False,
                partitions=[
                    M.MetadataResponsePartition(error_code=0, partition_index=p, leader_id=p % 3, leader_epoch=5,
                                                replica_nodes=[0, 1, 2], isr_nodes=[0, 1, 2], offline_replicas=[])
                    for p in range(10)
                ],
                topic_authorized_operations=-2147483648,
            )
            for t in range(100)
        ],
    )


def produce_request() -> ProduceRequest:
    P = ProduceRequest
    rec = bytes(1024)
    return P(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        P.TopicProduceData(name=f"topic-{t}", partition_data=[
            P.PartitionProduceData(index=p, records=rec) for p in range(10)])
        for t in range(5)
    ])


def fetch_response() -> FetchResponse:
    F = FetchResponse
    rec = bytes(1024)
    return F(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        F.FetchableTopicResponse(topic="t", partitions=[
            F.PartitionData(partition_index=p, high_watermark=1000, last_stable_offset=1000, log_start_offset=0,
                            aborted_transactions=None, preferred_read_replica=-1, records=rec)
            for p in range(50)])
    ])


def best(fn: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) * 1e6


def run(n: int = 50) -> dict[str, float]:
    out = {}
    for label, obj, version in [
        ("Metadata v12 response, 100x10", metadata_response(), 12),
        ("Produce v9 request, 50 partitions", produce_request(), 9),
        ("Fetch v12 response, 50 partitions", fetch_response(), 12),
    ]:
        data = obj.encode(version)
        assert type(obj).decode(data, version) == obj
        out[f"{label}: encode"] = best(lambda obj=obj, version=version: obj.encode(version), n)
        out[f"{label}: decode"] = best(lambda obj=obj, data=data, version=version: type(obj).decode(data, version), n)
        out[f"{label}: bytes"] = len(data)
    return out


if __name__ == "__main__":
    for k, v in run().items():
        print(f"{k:55s} {v:10.1f}")
