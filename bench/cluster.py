"""Cluster benchmark: the price of 3-way synchronous replication, and failover time, on one LocalCluster.

  .venv/bin/python bench/cluster.py [--count N] [--size BYTES] [--rounds R] [--clients strom,confluent]

One real ZooKeeper + 3 ``strom broker`` processes on loopback (strom.testing.cluster.LocalCluster, ZooKeeper
session timeout 4000 ms), in one run:

1. Throughput, side by side, for each client (strom's KafkaProducer, confluent-kafka's Producer), 1 KiB records
   to 3-partition topics: acks=all + idempotence on a topic with replication factor 3 and
   min.insync.replicas=2, vs acks=1 on a topic with replication factor 1. The clock starts after a warm-up record
   and stops when every record is acknowledged. linger.ms=5, batch.size=64 KiB, no compression. The producer
   runs in this process; brokers and ZooKeeper share the machine's cores with it. Each pair (acks=1, acks=all)
   runs ``--repeat`` times, alternating, and the medians are reported, with the CPU time each run cost per MB
   produced: the three broker processes together (from /proc) and this process (the client). The client
   ``confluent-noidem`` is confluent-kafka with idempotence off for acks=all (librdkafka's idempotent producer
   keeps one produce request in flight per partition; see bench/README.md).
2. Failover: a strom producer (acks=all, idempotent) writes one record at a time (send + get) to a partition with
   replication 3 and min.insync.replicas=2; the leader is killed with SIGKILL (kill -9), or stopped with SIGTERM
   (controlled shutdown); the figure is the longest pause between acknowledged writes from the signal until the
   old leader's process has exited and one more write was acknowledged (for kill -9: signal to the first write
   acknowledged by the successor). The broker is restarted and the preferred leader elected back between rounds.

Prints a table and the ratios; numbers for bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from typing import Any

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from strom.testing.cluster import LocalCluster, wait_until  # noqa: E402

LINGER_MS = 5
BATCH = 65536


_HZ = os.sysconf("SC_CLK_TCK")


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _HZ


def _self_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def _timed_run(fn: Any, cluster: LocalCluster, topic: str, payload: bytes, n: int, acks: str,
               ) -> tuple[float, float, float]:
    """(records/s, broker CPU ms per MB, client CPU ms per MB) of one run."""
    pids = [b.proc.pid for b in cluster.brokers.values() if b.proc is not None]
    brokers0 = sum(_proc_cpu_s(p) for p in pids)
    client0 = _self_cpu_s()
    rate = fn(cluster.bootstrap, topic, payload, n, acks)
    mb = n * len(payload) / 1e6
    brokers = sum(_proc_cpu_s(p) for p in pids) - brokers0
    return rate, brokers * 1000 / mb, (_self_cpu_s() - client0) * 1000 / mb


def _strom_rate(bootstrap: str, topic: str, payload: bytes, n: int, acks: str) -> float:
    from strom import KafkaProducer
    from strom.metrics import metric_values

    p = KafkaProducer({"bootstrap.servers": bootstrap, "key.serializer": "bytes", "value.serializer": "bytes",
                       "acks": acks, "linger.ms": LINGER_MS, "batch.size": BATCH,
                       "enable.idempotence": acks == "all"})
    p.send(topic, payload).get(30)
    send = p.send
    t0 = time.perf_counter()
    for _ in range(n):
        send(topic, payload)
    p.flush()
    dt = time.perf_counter() - t0
    assert metric_values(p.metrics(), "producer-metrics")["record-error-total"] == 0
    p.close()
    return n / dt


def _confluent_rate(bootstrap: str, topic: str, payload: bytes, n: int, acks: str,
                    idempotence: bool = True) -> float:
    from confluent_kafka import Producer

    errors = [0]

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors[0] += 1

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": LINGER_MS, "batch.size": BATCH,
                  "enable.idempotence": acks == "all" and idempotence, "queue.buffering.max.messages": 1_000_000,
                  "queue.buffering.max.kbytes": 2_000_000})
    p.produce(topic, payload)
    p.flush(30)
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, payload, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(120)
    dt = time.perf_counter() - t0
    assert errors[0] == 0
    return n / dt


def _confluent_noidem_rate(bootstrap: str, topic: str, payload: bytes, n: int, acks: str) -> float:
    return _confluent_rate(bootstrap, topic, payload, n, acks, idempotence=False)


def _leader(admin: Any, topic: str) -> int:
    return admin.describe_topics([topic])[topic].result(30).partitions[0].leader.node_id


def _in_sync(admin: Any, topic: str) -> bool:
    p = admin.describe_topics([topic])[topic].result(30).partitions[0]
    return len(p.isr) == 3 and p.leader is not None and p.leader.node_id == p.replicas[0].node_id


def _failover(cluster: LocalCluster, admin: Any, topic: str, how: str) -> float:
    """The longest pause in acknowledged acks=all writes from the signal to the leader until its process has
    exited and a write has been acknowledged after that (by then necessarily by the successor)."""
    from strom import KafkaProducer
    from strom.common.structs import TopicPartition

    p = KafkaProducer({"bootstrap.servers": cluster.bootstrap, "key.serializer": "bytes",
                       "value.serializer": "bytes", "acks": "all", "enable.idempotence": True, "linger.ms": 0,
                       "retry.backoff.ms": 20})
    victim = _leader(admin, topic)
    try:
        for _ in range(20):  # warm: connections and metadata
            p.send(topic, b"warm", partition=0).get(30)
        signalled_at = time.perf_counter()
        if how == "kill":
            stopper = threading.Thread(target=cluster.brokers[victim].kill)
        else:  # SIGTERM: controlled shutdown (leadership moves first), then exit
            stopper = threading.Thread(target=cluster.brokers[victim].stop, kwargs={"timeout": 60})
        stopper.start()
        acks = [signalled_at]
        exited_at = None
        while True:
            p.send(topic, b"x", partition=0).get(120)
            acks.append(time.perf_counter())
            if exited_at is None and not stopper.is_alive():
                exited_at = acks[-1]
            elif exited_at is not None:
                break
        stopper.join()
    finally:
        p.close(10)
    cluster.brokers[victim].start(timeout=60)

    def back() -> bool:
        if _in_sync(admin, topic):
            return True
        admin.elect_leaders("preferred", [TopicPartition(topic, 0)]).partitions().result(30)
        return False

    wait_until(back, 120, "the ISR back to 3 and the preferred leader back", interval_s=0.5)
    return max(b - a for a, b in zip(acks, acks[1:], strict=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each (client, acks) pair; medians reported")
    ap.add_argument("--clients", default="strom,confluent,confluent-noidem")
    ap.add_argument("--skip-failover", action="store_true")
    args = ap.parse_args()

    from strom import AdminClient
    from strom.admin import NewTopic

    payload = b"x" * args.size
    with LocalCluster(3) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("r3", 3, 3, None, {"min.insync.replicas": "2"}), NewTopic("r1", 3, 1),
                             NewTopic("fo", 1, 3, None, {"min.insync.replicas": "2"})]).all().result(60)
        wait_until(lambda: all(len(p.isr) == 3 for t in ("r3", "fo")
                               for p in admin.describe_topics([t])[t].result(30).partitions), 60, "ISR of 3")
        for client in args.clients.split(","):
            fn = {"strom": _strom_rate, "confluent": _confluent_rate,
                  "confluent-noidem": _confluent_noidem_rate}[client]
            runs1, runs3 = [], []
            for i in range(args.repeat):
                runs1.append(_timed_run(fn, cluster, "r1", payload, args.count, "1"))
                runs3.append(_timed_run(fn, cluster, "r3", payload, args.count, "all"))
                print(f"  {client} run {i + 1}: acks=1 {runs1[-1][0]:,.0f} rec/s, acks=all {runs3[-1][0]:,.0f} rec/s",
                      flush=True)
            r1, b1, c1 = (statistics.median(x) for x in zip(*runs1, strict=True))
            r3, b3, c3 = (statistics.median(x) for x in zip(*runs3, strict=True))
            print(f"{client:16s} acks=1 rf=1: {r1:9,.0f} rec/s ({r1 * args.size / 1e6:5.1f} MB/s, CPU ms/MB brokers "
                  f"{b1:4.1f} client {c1:4.1f})   acks=all rf=3: {r3:9,.0f} rec/s ({r3 * args.size / 1e6:5.1f} MB/s, "
                  f"CPU ms/MB brokers {b3:4.1f} client {c3:4.1f})   ratio {r3 / r1:.2f}x", flush=True)
        if args.skip_failover:
            admin.close(10)
            return
        kills = [_failover(cluster, admin, "fo", "kill") for _ in range(args.rounds)]
        print("failover after kill -9 (s):", ", ".join(f"{x:.2f}" for x in kills),
              f"median {statistics.median(kills):.2f}", flush=True)
        stops = [_failover(cluster, admin, "fo", "term") for _ in range(args.rounds)]
        print("failover after SIGTERM (controlled shutdown) (s):", ", ".join(f"{x:.3f}" for x in stops),
              f"median {statistics.median(stops):.3f}", flush=True)
        admin.close(10)
    print(f"\nzookeeper.session.timeout.ms={cluster.session_timeout_ms}; {args.count:,} x {args.size} B records")


if __name__ == "__main__":
    main()
