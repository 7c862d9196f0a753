"""What the broker's metrics cost: bench/broker.py's workloads against the broker of a base revision (before
the broker metrics, default ``dd3eb76``) and of the revision that added them (default ``71c34af``, the metrics as
they landed; ``--after-ref tree`` for this working tree), side by side in one run.

  .venv/bin/python bench/broker_metrics_cost.py [--base-ref REF] [--after-ref REF|tree] [--rounds R]
                                                [--records-1k N] [--records-100 N] [--requests N]

Each revision's ``strom`` package is exported with ``git archive`` and run with ``PYTHONPATH`` pointing at it (the
broker process starts in that directory: see ``broker_io.start_broker``); the clients are this tree's. Per round and per broker (order swapped every round): confluent-kafka produce of
1 KiB and 100 B records (acks=1, as bench/broker.py), the lean fetch client reading the 1 KiB topic back, and
N sequential one-record Produce requests on one connection (the per-request path: RequestMetrics, the
dispatcher's timing and error counting, BrokerTopicMetrics). Reported: the median over rounds of records (or
requests) per second and of the broker process's CPU seconds, and the change after / before.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psutil  # noqa: E402
from broker import lean_fetch, produce  # noqa: E402
from broker_io import export, start_broker  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from strom.protocol.api_keys import ApiKey  # noqa: E402
from strom.protocol.messages.produce import ProduceRequest  # noqa: E402
from strom.record.builder import MemoryRecordsBuilder  # noqa: E402
from strom.testing.raw_client import RawClient  # noqa: E402


def sequential_produce(bootstrap: str, topic: str, n: int) -> float:
    builder = MemoryRecordsBuilder()
    builder.append(1_700_000_000_000, b"k", b"v" * 100)
    batch = builder.build()
    req = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    with RawClient(bootstrap, timeout=30) as c:
        c.request(ApiKey.PRODUCE, 9, req)
        t0 = time.perf_counter()
        for _ in range(n):
            c.request(ApiKey.PRODUCE, 9, req)
        return time.perf_counter() - t0


def run_once(pythonpath: str, args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    """{workload: (rate, broker CPU seconds)} against a broker importing ``strom`` from ``pythonpath``."""
    b = start_broker(pythonpath)
    out: dict[str, tuple[float, float]] = {}
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.create_topics([NewTopic(t, num_partitions=4, replication_factor=1)
                                      for t in ("b1k", "b100", "seq")]).values():
            f.result(10)
        proc = psutil.Process(b.proc.pid)  # type: ignore[union-attr]

        def cpu() -> float:
            t = proc.cpu_times()
            return t.user + t.system

        c0 = cpu()
        dt, n = produce(b.bootstrap, "b1k", 1024, args.records_1k)
        out["produce 1 KiB (rec/s)"] = (n / dt, cpu() - c0)
        c0 = cpu()
        dt, n = produce(b.bootstrap, "b100", 100, args.records_100)
        out["produce 100 B (rec/s)"] = (n / dt, cpu() - c0)
        c0 = cpu()
        dt, got, _nbytes = lean_fetch(b.bootstrap, "b1k", 4, args.records_1k + 1)
        out["fetch 1 KiB, lean client (rec/s)"] = (got / dt, cpu() - c0)
        c0 = cpu()
        dt = sequential_produce(b.bootstrap, "seq", args.requests)
        out["sequential 1-record Produce (req/s)"] = (args.requests / dt, cpu() - c0)
    finally:
        b.stop()
        b.cleanup()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-ref", default="dd3eb76", help="a revision without broker metrics")
    ap.add_argument("--after-ref", default="71c34af",
                    help="the revision to compare with it (default: the metrics as they landed, before later "
                         "changes to the broker); 'tree' for this working tree")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records-1k", type=int, default=100_000)
    ap.add_argument("--records-100", type=int, default=300_000)
    ap.add_argument("--requests", type=int, default=5_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="strom-base-") as base, \
            tempfile.TemporaryDirectory(prefix="strom-after-") as after:
        export(args.base_ref, base)
        if args.after_ref != "tree":
            export(args.after_ref, after)
        variants = {"before": base, "after": after if args.after_ref != "tree" else os.path.abspath(ROOT)}
        results: dict[str, list[dict[str, tuple[float, float]]]] = {k: [] for k in variants}
        for r in range(args.rounds):
            order = list(variants) if r % 2 == 0 else list(reversed(variants))
            for name in order:
                results[name].append(run_once(variants[name], args))
                print(f"round {r + 1} {name}: " + ", ".join(f"{k} {v[0]:,.0f}" for k, v in results[name][-1].items()),
                      flush=True)
    print(f"\nmedians over {args.rounds} rounds (before = {args.base_ref}, after = "
          f"{'this tree' if args.after_ref == 'tree' else args.after_ref})")
    print(f"  {'workload':<38} {'before':>12} {'after':>12} {'change':>8}   {'broker CPU s before/after':>26}")
    for key in results["before"][0]:
        rb = statistics.median(x[key][0] for x in results["before"])
        ra = statistics.median(x[key][0] for x in results["after"])
        cb = statistics.median(x[key][1] for x in results["before"])
        ca = statistics.median(x[key][1] for x in results["after"])
        print(f"  {key:<38} {rb:>12,.0f} {ra:>12,.0f} {(ra - rb) / rb:>+8.1%}   {cb:>12.2f} / {ca:.2f} "
              f"({(ca - cb) / cb:+.1%})")


if __name__ == "__main__":
    main()
