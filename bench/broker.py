"""Broker benchmark: strom vs librdkafka's mock cluster vs the loopback limit, in one run.

  .venv/bin/python bench/broker.py [--records N] [--seconds S]

(a) confluent-kafka Producer -> strom broker (subprocess), 1 KiB and 100-byte records, acks=1;
(b) the same producer -> librdkafka's in-memory mock cluster (a C broker);
(c) confluent-kafka Consumer reading the 1 KiB topic back from strom;
(d) raw loopback TCP between two processes (the physical limit).
Prints records/s, MB/s and strom's ratios against (b) and (d).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import confluent_kafka as ck  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from strom.testing.broker_process import BrokerProcess  # noqa: E402


def produce(bootstrap: str, topic: str, size: int, n: int, extra: dict | None = None) -> tuple[float, int]:  # type: ignore[type-arg]
    conf = {"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "batch.size": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576, "enable.idempotence": False, "compression.type": "none"}
    conf.update(extra or {})
    p = ck.Producer(conf)
    payload = os.urandom(size)
    p.produce(topic, payload)  # warm-up: metadata + connection
    p.flush(30)
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, payload)
                break
            except BufferError:
                p.poll(0.001)
    left = p.flush(120)
    dt = time.perf_counter() - t0
    assert left == 0, f"{left} records not delivered"
    return dt, n


def consume(bootstrap: str, topic: str, n: int) -> tuple[float, int, int]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time()}",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760})
    c.subscribe([topic])
    got = nbytes = 0
    t0 = None
    deadline = time.monotonic() + 300
    while got < n and time.monotonic() < deadline:
        for m in c.consume(100_000, 1.0):
            if m.error():
                continue
            if t0 is None:
                t0 = time.perf_counter()
            got += 1
            nbytes += len(m.value())
    dt = time.perf_counter() - (t0 or time.perf_counter())
    c.close()
    return dt, got, nbytes


def _sink(port_q: mp.Queue, total: int) -> None:  # type: ignore[type-arg]
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port_q.put(srv.getsockname()[1])
    conn, _ = srv.accept()
    buf = bytearray(1 << 20)
    got = 0
    while got < total:
        k = conn.recv_into(buf)
        if not k:
            break
        got += k
    conn.sendall(b"x")
    conn.close()


def loopback(total: int = 2 << 30) -> float:
    q: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    proc = mp.Process(target=_sink, args=(q, total))
    proc.start()
    s = socket.create_connection(("127.0.0.1", q.get()))
    chunk = b"\0" * (1 << 20)
    t0 = time.perf_counter()
    sent = 0
    while sent < total:
        s.sendall(chunk)
        sent += len(chunk)
    s.recv(1)
    dt = time.perf_counter() - t0
    s.close()
    proc.join()
    return total / dt / 1e6


def mock_cluster() -> tuple[ck.Producer, str]:
    holder = ck.Producer({"test.mock.num.brokers": 1})
    brokers = holder.list_topics(timeout=10).brokers
    return holder, ",".join(str(b) for b in brokers.values())


def row(label: str, n: int, size: int, dt: float) -> tuple[float, float]:
    rps, mbs = n / dt, n * size / dt / 1e6
    print(f"  {label:<44} {rps:>12,.0f} rec/s {mbs:>9.1f} MB/s")
    return rps, mbs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records-1k", type=int, default=300_000)
    ap.add_argument("--records-100", type=int, default=1_000_000)
    args = ap.parse_args()
    results: dict[str, tuple[float, float]] = {}
    with BrokerProcess() as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.create_topics([NewTopic(t, num_partitions=4, replication_factor=1)
                                      for t in ("b1k", "b100")]).values():
            f.result(10)
        holder, mock_bs = mock_cluster()
        print(f"strom broker at {b.bootstrap}; mock cluster at {mock_bs}; cores={os.cpu_count()}")
        for size, n, topic in ((1024, args.records_1k, "b1k"), (100, args.records_100, "b100")):
            print(f"produce {n:,} x {size} B, acks=1")
            dt, _ = produce(b.bootstrap, topic, size, n)
            results[f"strom-produce-{size}"] = row("(a) confluent-kafka -> strom", n, size, dt)
            dt, _ = produce(mock_bs, topic, size, n)
            results[f"mock-produce-{size}"] = row("(b) confluent-kafka -> librdkafka mock", n, size, dt)
        print("consume the 1 KiB topic back")
        dt, got, nbytes = consume(b.bootstrap, "b1k", args.records_1k + 1)
        results["strom-fetch-1024"] = row("(c) strom -> confluent-kafka consumer", got, 1024, dt)
        del holder
    lb = loopback()
    print(f"  {'(d) raw loopback TCP':<44} {'':>12}       {lb:>9.1f} MB/s")
    print("ratios")
    for size in (1024, 100):
        r = results[f"strom-produce-{size}"][0] / results[f"mock-produce-{size}"][0]
        print(f"  produce {size:>4} B: strom / mock cluster = {r:.2f}x")
    print(f"  fetch 1 KiB: strom / loopback = {results['strom-fetch-1024'][1] / lb:.2f}x")


if __name__ == "__main__":
    main()
