"""Produce and Fetch latency on a broker holding many partitions and many client connections (issue 14's target:
with 10,000 partitions and 1,000 client connections, Produce and Fetch p99 within 2x of the 10-partition case).

Two runs side by side, each on a fresh standalone strom broker subprocess:
  small: one topic of ``--small`` partitions (default 10), no extra connections;
  large: ``--partitions`` partitions (default 10,000, in topics of 1,000) and ``--connections`` idle client
         connections (default 1,000; each did an ApiVersions round trip first, so the broker holds them open).
A probe connection then sends ``--requests`` one-record Produce requests (acks=1, a random partition) and as many
Fetch requests (one random partition at offset 0, max_wait 0), one at a time, and the latencies' p50/p99/p99.9 are
reported with the large / small ratio.

Run: .venv/bin/python bench/partitions.py [--partitions 10000 --connections 1000 --requests 5000]
"""

from __future__ import annotations

import argparse
import random
import resource
import time
from typing import Any

from strom.broker_process import BrokerProcess
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.api_versions import ApiVersionsRequest
from strom.protocol.messages.create_topics import CreateTopicsRequest
from strom.protocol.messages.fetch import FetchRequest
from strom.protocol.messages.produce import ProduceRequest
from strom.record.builder import MemoryRecordsBuilder
from strom.testing.raw_client import RawClient

TOPIC_SIZE = 1000


def create_topics(client: RawClient, partitions: int) -> list[tuple[str, int]]:
    """Topics of up to TOPIC_SIZE partitions; returns every (topic, partition)."""
    out: list[tuple[str, int]] = []
    left, i = partitions, 0
    while left > 0:
        n = min(TOPIC_SIZE, left)
        name = f"scale-{i}"
        resp = client.request(ApiKey.CREATE_TOPICS, 5, CreateTopicsRequest(timeout_ms=600_000, validate_only=False,
                                                                           topics=[CreateTopicsRequest.CreatableTopic(
                                                                               name=name, num_partitions=n,
                                                                               replication_factor=1, assignments=[],
                                                                               configs=[])]))
        assert resp.topics[0].error_code == 0, resp.topics[0]
        out += [(name, p) for p in range(n)]
        left -= n
        i += 1
    return out


def one_record() -> bytes:
    b = MemoryRecordsBuilder()
    b.append(int(time.time() * 1000), None, b"x" * 100)
    return b.build()


def percentiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {q: s[min(len(s) - 1, int(len(s) * float(q)))] * 1000 for q in ("0.5", "0.99", "0.999")}


def probe(bootstrap: str, tps: list[tuple[str, int]], requests: int, seed: int) -> dict[str, dict[str, float]]:
    rng = random.Random(seed)
    records = one_record()
    produce_lat: list[float] = []
    fetch_lat: list[float] = []
    with RawClient(bootstrap, timeout=60) as c:
        for _ in range(requests):
            topic, p = rng.choice(tps)
            req = ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[ProduceRequest.TopicProduceData(
                name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=p, records=records)])])
            t = time.perf_counter()
            resp = c.request(ApiKey.PRODUCE, 9, req)
            produce_lat.append(time.perf_counter() - t)
            assert resp.responses[0].partition_responses[0].error_code == 0
        for _ in range(requests):
            topic, p = rng.choice(tps)
            req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                               session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
                               topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
                                   partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                   log_start_offset=-1, partition_max_bytes=1 << 20)])])
            t = time.perf_counter()
            resp = c.request(ApiKey.FETCH, 12, req)
            fetch_lat.append(time.perf_counter() - t)
            assert resp.responses[0].partitions[0].error_code == 0
    return {"Produce": percentiles(produce_lat), "Fetch": percentiles(fetch_lat)}


def run(partitions: int, connections: int, requests: int, seed: int) -> tuple[dict[str, Any], float]:
    broker = BrokerProcess(overrides={"num.partitions": "1", "max.connections.per.ip": str(connections + 100)})
    broker.start(timeout=120)
    idle: list[RawClient] = []
    try:
        with RawClient(broker.bootstrap, timeout=600) as admin:
            t = time.perf_counter()
            tps = create_topics(admin, partitions)
            created_s = time.perf_counter() - t
        for _ in range(connections):
            c = RawClient(broker.bootstrap, timeout=60)
            c.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="bench",
                                                                 client_software_version="1"))
            idle.append(c)
        return probe(broker.bootstrap, tps, requests, seed), created_s
    finally:
        for c in idle:
            c.close()
        broker.stop(timeout=120)
        broker.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--connections", type=int, default=1_000)
    ap.add_argument("--requests", type=int, default=5_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.connections + 1024)), hard))
    small, _ = run(args.small, 0, args.requests, args.seed)
    large, created_s = run(args.partitions, args.connections, args.requests, args.seed)
    print(f"{args.partitions} partitions created in {created_s:.1f} s")
    print("| request | case | p50 ms | p99 ms | p99.9 ms |")
    print("|---|---|---:|---:|---:|")
    for api in ("Produce", "Fetch"):
        for label, res in ((f"{args.small} partitions", small),
                           (f"{args.partitions} partitions + {args.connections} connections", large)):
            r = res[api]
            print(f"| {api} | {label} | {r['0.5']:.3f} | {r['0.99']:.3f} | {r['0.999']:.3f} |")
    for api in ("Produce", "Fetch"):
        print(f"p99 ratio {api}: large / small = {large[api]['0.99'] / small[api]['0.99']:.2f}x (target <= 2x)")


if __name__ == "__main__":
    main()
