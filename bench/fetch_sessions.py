"""Fetch sessions (KIP-227) on and off, side by side: consumers that use them, against two brokers in one run.

  .venv/bin/python bench/fetch_sessions.py [--records N] [--partitions P] [--rounds R] [--clients strom,kafka-python]

Two strom brokers hold the same N pre-produced 100-byte records in a topic of P partitions: one with the default
session cache, one with ``max.incremental.fetch.session.cache.slots=0`` (every fetch is a full one). Each client
reads every record from each broker in turn (bench/consumer.py's child runs: its own subprocess, a fresh group),
R rounds, alternating which broker goes first. Reported per client and broker: median steady records/s (first
record to last) and records per CPU second of the consumer process, and the sessions-on / sessions-off ratio.
Sessions pay most with many partitions of which few have data; with a pre-filled topic every partition has data,
so this measures that the saving on requests and responses is not eaten by the session bookkeeping.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

CONSUMER = os.path.join(os.path.dirname(__file__), "consumer.py")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=600_000)
    parser.add_argument("--partitions", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--clients", default="strom,kafka-python")
    args = parser.parse_args()

    from bench.consumer import VALUE_SIZE, produce
    from strom.broker_process import BrokerProcess

    modes = {"sessions on": {}, "sessions off": {"max.incremental.fetch.session.cache.slots": "0"}}
    brokers = {m: BrokerProcess(overrides={"group.initial.rebalance.delay.ms": "0", **o}) for m, o in modes.items()}
    topic = "bench-fetch-sessions"
    runs: dict[tuple[str, str], list[dict]] = {}  # type: ignore[type-arg]
    try:
        for m, b in brokers.items():
            b.start()
            dt = produce(b.bootstrap, topic, args.partitions, args.records)
            print(f"{m}: produced {args.records:,} x {VALUE_SIZE} B records into {args.partitions} partitions "
                  f"in {dt:.1f}s")
        order = list(brokers)
        for rnd in range(args.rounds):
            for m in order if rnd % 2 == 0 else reversed(order):
                for client in args.clients.split(","):
                    out = subprocess.run([sys.executable, CONSUMER, "--records", str(args.records), "--child", client,
                                          brokers[m].bootstrap, topic], capture_output=True, text=True, timeout=600)
                    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
                    if out.returncode != 0 or not lines:
                        print(f"{client} / {m}: failed\n{out.stderr[-2000:]}")
                        continue
                    r = json.loads(lines[-1])
                    if r["records"] != args.records:
                        print(f"{client} / {m}: incomplete ({r['records']:,} records)")
                        continue
                    runs.setdefault((client, m), []).append(r)
    finally:
        for b in brokers.values():
            b.stop()
    print()
    print(f"medians of {args.rounds} rounds, {args.partitions} partitions")
    print("| client | broker | records/s (steady) | records per CPU s | steady rounds |")
    print("|---|---|---:|---:|---|")
    steady: dict[tuple[str, str], float] = {}
    for (client, m), rs in runs.items():
        steady[(client, m)] = statistics.median(r["records"] / r["steady_s"] for r in rs)
        per_cpu = statistics.median(r["records"] / r["cpu_s"] for r in rs)
        rounds = [round(r["records"] / r["steady_s"]) for r in rs]
        print(f"| {client} | {m} | {steady[(client, m)]:,.0f} | {per_cpu:,.0f} | {rounds} |")
    for client in args.clients.split(","):
        on, off = steady.get((client, "sessions on")), steady.get((client, "sessions off"))
        if on and off:
            print(f"{client}: sessions on / off = {on / off:.2f}x steady")


if __name__ == "__main__":
    main()
