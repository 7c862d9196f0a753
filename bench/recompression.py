"""Broker-side recompression (a topic's ``compression.type`` other than the producer's codec), before / after, in one
run.

  .venv/bin/python bench/recompression.py [--base-ref REF] [--rounds R] [--seconds S] [--codec zstd]
  .venv/bin/python bench/recompression.py --producer-codec lz4 --base-ref REF   (batches sent compressed)

Per round and per broker (order swapped every round): a topic with ``compression.type=<codec>`` and 4 partitions;
4 connections each send uncompressed 1 MB batches of 1 KiB text records (acks=1) as fast as they are answered,
while a fifth connection sends ApiVersions every 5 ms. Reported: MB/s of records taken in, the broker's CPU
(cores, and ms per MB), and the ApiVersions round trips (p50 / p99 / max ms: how long the event loop keeps
other connections waiting). The base revision (``git archive`` of ``--base-ref``, default the commit that
recompressed on the event loop) runs with ``PYTHONPATH`` pointing at its ``strom``; the clients are this tree's.

With ``--producer-codec``, the topic keeps the producer's codec (``compression.type=producer``) and the clients
send the same batches compressed with that codec: what the broker's check of a compressed batch's records costs
(decompressed in a worker thread; MB/s counts the compressed bytes taken in). Give ``--base-ref`` the commit
before that check.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import psutil  # noqa: E402
from broker_io import ROOT, export, produce_while_probing, start_broker  # noqa: E402

from strom.protocol.api_keys import ApiKey  # noqa: E402
from strom.protocol.messages.create_topics import CreateTopicsRequest  # noqa: E402
from strom.record.builder import MemoryRecordsBuilder  # noqa: E402
from strom.record.compression import CompressionType  # noqa: E402
from strom.testing.raw_client import RawClient  # noqa: E402

PARTITIONS = 4


def text_batch(seed: int, size: int = 1_000_000, record: int = 1024, codec: str = "none") -> bytes:
    """A batch of ``size`` bytes (before compression) of ``record``-byte records of words (compressible about 4:1),
    in ``codec``."""
    rnd = random.Random(seed)
    words = [bytes(rnd.choice(b"abcdefghijklmnop") for _ in range(rnd.randint(3, 9))) for _ in range(500)]
    b = MemoryRecordsBuilder(CompressionType.from_name(codec))
    for i in range(size // (record + 8)):
        value = b" ".join(rnd.choice(words) for _ in range(record // 6))[:record]
        b.append(1_700_000_000_000 + i, b"key-%d" % (i % 100), value)
    return bytes(b.build())


def create_topic(bootstrap: str, name: str, codec: str) -> None:
    with RawClient(bootstrap) as c:
        r = c.request(ApiKey.CREATE_TOPICS, 4, CreateTopicsRequest(timeout_ms=10_000, topics=[
            CreateTopicsRequest.CreatableTopic(name=name, num_partitions=PARTITIONS, replication_factor=1, configs=[
                CreateTopicsRequest.CreatableTopicConfig(name="compression.type", value=codec)])]))
        assert r.topics[0].error_code == 0, r.topics[0]


def run(bootstrap: str, broker_pid: int, topic: str, seconds: float, codec: str = "none") -> dict[str, float]:
    batches = [text_batch(p, codec=codec) for p in range(PARTITIONS)]
    proc = psutil.Process(broker_pid)
    c0 = proc.cpu_times()
    t0 = time.perf_counter()
    rtts, counts = produce_while_probing(bootstrap, topic, batches, seconds)
    dt = time.perf_counter() - t0
    c1 = proc.cpu_times()
    cpu = c1.user - c0.user + c1.system - c0.system
    mb = sum(n * len(b) for n, b in zip(counts, batches, strict=True)) / 1e6
    q = statistics.quantiles(rtts, n=100)
    return {"mbs": mb / dt, "cores": cpu / dt, "ms_per_mb": cpu * 1e3 / mb, "p50": q[49], "p99": q[98],
            "max": max(rtts)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-ref", default="3a175e5", help="the revision that recompressed on the event loop")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--codec", default="zstd", choices=["gzip", "snappy", "lz4", "zstd"])
    ap.add_argument("--producer-codec", choices=["gzip", "snappy", "lz4", "zstd"],
                    help="the topic keeps the producer's codec; batches are sent in this one")
    args = ap.parse_args()
    topic_codec = "producer" if args.producer_codec else args.codec
    with tempfile.TemporaryDirectory(prefix="strom-bench-base-") as base:
        export(args.base_ref, base)
        builds = {"before": base, "after": ROOT}
        results: dict[str, list[dict[str, float]]] = {k: [] for k in builds}
        for rnd in range(args.rounds):
            for name in (list(builds) if rnd % 2 == 0 else list(reversed(builds))):
                b = start_broker(builds[name])
                try:
                    create_topic(b.bootstrap, "recompressed", topic_codec)
                    assert b.proc is not None
                    r = run(b.bootstrap, b.proc.pid, "recompressed", args.seconds, args.producer_codec or "none")
                finally:
                    b.stop()
                    b.cleanup()
                results[name].append(r)
                print(f"round {rnd + 1} {name:<6} {r['mbs']:7.1f} MB/s in, broker {r['cores']:.2f} cores "
                      f"({r['ms_per_mb']:.2f} ms per MB); ApiVersions p50 {r['p50']:.2f} p99 {r['p99']:.2f} "
                      f"max {r['max']:.1f} ms", flush=True)
    what = (f"{args.producer_codec} batches of 1 MB before compression into a producer topic" if args.producer_codec
            else f"uncompressed 1 MB batches into a {args.codec} topic")
    print(f"\nmedians over {args.rounds} rounds ({what}; before = {args.base_ref}, after = this tree)")
    for name, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(f"  {name:<6} {med['mbs']:7.1f} MB/s, broker {med['cores']:.2f} cores ({med['ms_per_mb']:.2f} ms per MB), "
              f"ApiVersions p50 {med['p50']:.2f} / p99 {med['p99']:.2f} / max {med['max']:.1f} ms")


if __name__ == "__main__":
    main()
