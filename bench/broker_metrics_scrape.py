"""How long a Prometheus scrape of the broker's ``/metrics`` takes with 1,000 partitions, and whether the broker
keeps serving produce requests while 50 threads scrape it (100 scrapes).

  .venv/bin/python bench/broker_metrics_scrape.py [--partitions N] [--scrapes N]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import statistics
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from strom.admin import AdminClient, NewTopic  # noqa: E402
from strom.broker_process import BrokerProcess, free_port  # noqa: E402
from strom.producer import KafkaProducer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--scrapes", type=int, default=20)
    args = ap.parse_args()
    port = free_port()
    with BrokerProcess(overrides={"metrics.prometheus.listener": f"http://127.0.0.1:{port}"}) as b:
        with AdminClient({"bootstrap.servers": b.bootstrap}) as admin:
            admin.create_topics([NewTopic("many", args.partitions, 1)]).all().result(120)
        url = f"http://127.0.0.1:{port}/metrics"

        def scrape() -> tuple[float, int]:
            t = time.perf_counter()
            with urllib.request.urlopen(url, timeout=300) as r:
                body = r.read()
            return (time.perf_counter() - t) * 1000, len(body)

        scrape()
        times = [scrape() for _ in range(args.scrapes)]
        print(f"{args.partitions} partitions (+ __consumer_offsets when created): scrape median "
              f"{statistics.median(t for t, _ in times):.1f} ms, max {max(t for t, _ in times):.1f} ms, "
              f"{times[0][1]:,} bytes")
        producer = KafkaProducer({"bootstrap.servers": b.bootstrap}, key_serializer="bytes",
                                 value_serializer="bytes")
        try:
            t = time.perf_counter()
            producer.send("many", value=b"x" * 100, partition=0).get(30)
            for i in range(2000):
                producer.send("many", value=b"x" * 100, partition=i % args.partitions)
            producer.flush(60)
            quiet = time.perf_counter() - t
            with cf.ThreadPoolExecutor(50) as pool:
                futures = [pool.submit(scrape) for _ in range(100)]
                t = time.perf_counter()
                for i in range(2000):
                    producer.send("many", value=b"x" * 100, partition=i % args.partitions)
                producer.flush(60)
                busy = time.perf_counter() - t
                done = [f.result() for f in futures]
        finally:
            producer.close()
        print(f"2,000 records to {args.partitions} partitions: {quiet:.2f} s alone, {busy:.2f} s during "
              f"{len(done)} scrapes by 50 threads (all answered)")


if __name__ == "__main__":
    main()
