"""Produce latency while the log cleaner compacts, against the same broker idle, and the cleaner's MB/s
(issue 14's target: cleaning keeps produce p99 within 2x of an idle broker, the cleaner's throughput reported).

One strom broker subprocess (``log.cleaner.backoff.ms=200``). A topic ``changelog`` (1 partition, 16 MiB
segments, ``cleanup.policy=delete`` for now) is filled by a confluent-kafka producer with ``--records`` keyed
records of ``--size`` bytes over ``--keys`` keys, so nearly all of it is superseded. A probe connection then sends
one-record Produce requests (acks=1, 100 B) to another topic, one at a time:
  idle:     ``--requests`` requests while nothing else happens;
  cleaning: the changelog is switched to ``cleanup.policy=compact`` and the probe runs until the broker logs the
            end of that cleaning (its "cleaned ... MB/s" line, Kafka's CleanerStats); only requests sent before
            that line count.
Repeated ``--rounds`` times on fresh brokers; p50/p99/p99.9 per phase, the p99 ratio cleaning / idle, and the
cleaner's MB/s (bytes read to build the offset map and to copy the segments, over the cleaning's time) as the
broker reports it.

Run: .venv/bin/python bench/compaction.py [--records 1000000 --size 200 --keys 10000 --rounds 3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

import confluent_kafka as ck  # noqa: E402
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic  # noqa: E402
from partitions import one_record, percentiles  # noqa: E402

from strom.broker_process import BrokerProcess  # noqa: E402
from strom.protocol.api_keys import ApiKey  # noqa: E402
from strom.protocol.messages.produce import ProduceRequest  # noqa: E402
from strom.testing.raw_client import RawClient  # noqa: E402

CLEANED = re.compile(r"cleaned (\S+) up to offset (\d+): .*?([\d.]+) MB read, ([\d.]+) MB written, "
                     r"(\d+) record\(s\) removed, ([\d.]+) MB/s")


def fill(bootstrap: str, records: int, size: int, keys: int) -> float:
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "batch.size": 1_000_000,
                     "queue.buffering.max.kbytes": 1_048_576, "enable.idempotence": False})
    value = os.urandom(size)
    t0 = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce("changelog", value, key=b"key-%08d" % (i % keys))
                break
            except BufferError:
                p.poll(0.001)
    assert p.flush(120) == 0
    return time.perf_counter() - t0


def produce_once(client: RawClient, records: bytes) -> float:
    req = ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[ProduceRequest.TopicProduceData(
        name="probe", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)])])
    t = time.perf_counter()
    resp = client.request(ApiKey.PRODUCE, 9, req)
    elapsed = time.perf_counter() - t
    assert resp.responses[0].partition_responses[0].error_code == 0
    return elapsed


def one_round(args: argparse.Namespace) -> dict[str, object]:
    broker = BrokerProcess(overrides={"log.cleaner.backoff.ms": "200"})
    broker.start(timeout=60)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = [NewTopic("changelog", 1, 1, config={"cleanup.policy": "delete", "segment.bytes": str(16 << 20)}),
                  NewTopic("probe", 1, 1)]
        for f in admin.create_topics(topics).values():
            f.result(30)
        fill_s = fill(broker.bootstrap, args.records, args.size, args.keys)
        records = one_record()
        with RawClient(broker.bootstrap, timeout=60) as client:
            for _ in range(200):  # warm-up
                produce_once(client, records)
            idle = [produce_once(client, records) for _ in range(args.requests)]
            resource = ConfigResource(ConfigResource.Type.TOPIC, "changelog", incremental_configs=[
                ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
            for f in admin.incremental_alter_configs([resource]).values():
                f.result(30)
            log_start = len(broker.read_log())
            cleaning: list[tuple[float, float]] = []  # (sent at, latency)
            done = None
            deadline = time.monotonic() + 600
            while done is None and time.monotonic() < deadline:
                for _ in range(100):
                    cleaning.append((time.monotonic(), produce_once(client, records)))
                m = CLEANED.search(broker.read_log()[log_start:])
                if m and m.group(1) == "changelog-0":
                    done = time.monotonic(), m
            assert done is not None, "the changelog was not cleaned within 600 s"
        finished_at, m = done
        # the log line is read after each 100 requests: the ones sent after the cleaning ended are not counted
        during = [lat for at, lat in cleaning if at < finished_at]
        return {"fill_s": fill_s, "idle": percentiles(idle), "cleaning": percentiles(during), "samples": len(during),
                "mb_read": float(m.group(3)), "mb_written": float(m.group(4)), "removed": int(m.group(5)),
                "mb_per_s": float(m.group(6))}
    finally:
        broker.stop(timeout=60)
        broker.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=200)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--requests", type=int, default=5_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for i in range(args.rounds):
        r = one_round(args)
        rows.append(r)
        idle, cl = r["idle"], r["cleaning"]
        print(f"round {i + 1}: filled in {r['fill_s']:.1f} s; cleaner {r['mb_read']:.1f} MB read, "
              f"{r['mb_written']:.1f} MB written, {r['removed']:,} records removed, {r['mb_per_s']:.1f} MB/s; "
              f"produce p50/p99/p99.9 ms idle {idle['0.5']:.3f}/{idle['0.99']:.3f}/{idle['0.999']:.3f}, "  # type: ignore[index]
              f"cleaning {cl['0.5']:.3f}/{cl['0.99']:.3f}/{cl['0.999']:.3f} ({r['samples']} requests)",  # type: ignore[index]
              flush=True)
    print()
    print("| round | idle p50 / p99 / p99.9 ms | cleaning p50 / p99 / p99.9 ms | p99 ratio | cleaner MB/s |")
    print("|---|---|---|---:|---:|")
    ratios = []
    for i, r in enumerate(rows, 1):
        idle, cl = r["idle"], r["cleaning"]
        ratio = cl["0.99"] / idle["0.99"]  # type: ignore[index]
        ratios.append(ratio)
        print(f"| {i} | {idle['0.5']:.3f} / {idle['0.99']:.3f} / {idle['0.999']:.3f} | "  # type: ignore[index]
              f"{cl['0.5']:.3f} / {cl['0.99']:.3f} / {cl['0.999']:.3f} | {ratio:.2f}x | {r['mb_per_s']:.1f} |")  # type: ignore[index]
    print(f"p99 ratio cleaning / idle: median {statistics.median(ratios):.2f}x (target <= 2x)")


if __name__ == "__main__":
    main()
