"""Web console response times with many topics: is it still responsive with 1,000 topics?

  .venv/bin/python bench/ui.py [--topics N] [--groups G]

One strom broker subprocess with N single-partition topics (10 records each) and G consumer groups (each with a
committed offset on 10 topics); the console (strom.ui, Flask's threaded server, snapshot cache off so every
request asks the cluster) on a loopback port. Each page is fetched 5 times over HTTP; the median is reported,
first with every request asking the cluster (snapshot cache off, no sampler), then as ``strom ui`` runs (the
sampler refreshing the cluster-wide snapshots every 5 s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--groups", type=int, default=20)
    args = ap.parse_args()

    from werkzeug.serving import make_server

    from strom.admin import AdminClient, NewTopic
    from strom.common.structs import TopicPartition
    from strom.producer import KafkaProducer
    from strom.testing.broker_process import BrokerProcess
    from strom.ui.app import create_app
    from strom.ui.cluster_view import ClusterView

    names = [f"topic-{i:04d}" for i in range(args.topics)]
    with BrokerProcess() as broker:
        with AdminClient({"bootstrap.servers": broker.bootstrap, "request.timeout.ms": 120_000,
                          "default.api.timeout.ms": 300_000}) as admin:
            t0 = time.perf_counter()
            for i in range(0, len(names), 200):
                admin.create_topics([NewTopic(n, 1, 1) for n in names[i:i + 200]]).all().result(300)
            print(f"created {len(names)} topics in {time.perf_counter() - t0:.1f} s")
            with KafkaProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20},
                               key_serializer="bytes", value_serializer="bytes") as producer:
                for n in names:
                    for j in range(10):
                        producer.send(n, value=b'{"n": %d}' % j)
                producer.flush(120)
            for g in range(args.groups):
                admin.alter_consumer_group_offsets(
                    f"group-{g}", {TopicPartition(names[(g * 10 + k) % len(names)], 0): 5 for k in range(10)}) \
                    .all().result(60)
        middle = names[len(names) // 2]
        pages = ["/", "/brokers", "/topics", f"/topics/{middle}", f"/topics/{middle}/messages?partition=0",
                 "/groups", "/groups/group-1", "/metrics"]
        print(f"\n{args.topics} topics, {args.groups} groups; median ms of 5 requests\n")
        print("| page | uncached | as served by `strom ui` | bytes |")
        print("|---|---:|---:|---:|")
        timings: dict[str, list[float]] = {}
        sizes: dict[str, int] = {}
        for sampling in (False, True):
            view = ClusterView(broker.bootstrap, sample_interval_s=5.0 if sampling else 0, cache_ttl_s=0.0)
            server = make_server("127.0.0.1", 0, create_app(view), threaded=True)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            base = f"http://127.0.0.1:{server.server_port}"
            try:
                if sampling:
                    view.start_sampling()
                    urllib.request.urlopen(base + "/", timeout=120).read()  # after the first sample
                for page in pages:
                    times = []
                    for _ in range(5):
                        t0 = time.perf_counter()
                        with urllib.request.urlopen(base + page, timeout=120) as resp:
                            sizes[page] = len(resp.read())
                        times.append((time.perf_counter() - t0) * 1000)
                    timings.setdefault(page, []).append(statistics.median(times))
                t0 = time.perf_counter()
                view.sample_once()
                timings.setdefault("sample", []).append((time.perf_counter() - t0) * 1000)
            finally:
                server.shutdown()
                view.close()
        for page in pages:
            cold, warm = timings[page]
            print(f"| `{page}` | {cold:,.0f} | {warm:,.0f} | {sizes[page]:,} |")
        print(f"| one rate/lag sample (sampler thread) | {timings['sample'][0]:,.0f} | {timings['sample'][1]:,.0f} | |")

if __name__ == "__main__":
    main()
