"""Broker benchmark: strom vs librdkafka's mock cluster vs the loopback limit, in one run.

  .venv/bin/python bench/broker.py [--records-1k N] [--records-100 N] [--rounds R]

(a) confluent-kafka Producer -> strom broker (subprocess), 1 KiB and 100-byte records, acks=1;
(b) the same producer -> librdkafka's in-memory mock cluster (a C broker);
(c) confluent-kafka Consumer reading the 1 KiB topic back from strom;
(d) raw loopback TCP between two processes (the physical limit): ``send`` of a memory buffer, and (d2)
    ``os.sendfile`` of a page-cached file (what a zero-copy Fetch does).
Prints records/s, MB/s and strom's ratios against (b) and (d).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import confluent_kafka as ck  # noqa: E402
import psutil  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from strom.broker_process import BrokerProcess  # noqa: E402


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
                     "queued.max.messages.kbytes": 1_048_576, "fetch.queue.backoff.ms": 0})
    c.list_topics(topic, timeout=10)  # connect and learn the cluster before the clock starts
    got = nbytes = 0
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(4)])
    t0 = None  # steady state: the clock starts at the first record (one fetch response at most is prefetched)
    deadline = time.monotonic() + 300
    while got < n and time.monotonic() < deadline:
        for m in c.consume(100_000, 1.0):
            if m.error():
                continue
            if t0 is None:
                t0 = time.perf_counter()
            got += 1
            nbytes += len(m.value())
    dt = time.perf_counter() - (t0 or 0.0)
    c.close()
    return dt, got, nbytes


def lean_fetch(bootstrap: str, topic: str, partitions: int, n: int) -> tuple[float, int, int]:
    """The broker's fetch path alone: Fetch requests from one connection, batches counted, records not decoded."""
    from strom.protocol.messages.fetch import FetchRequest
    from strom.record.header import parse_header
    from strom.testing.raw_client import RawClient

    offsets = [0] * partitions
    got = nbytes = 0
    with RawClient(bootstrap) as c:
        t0 = time.perf_counter()
        while got < n:
            req = FetchRequest(max_wait_ms=500, min_bytes=1, max_bytes=52_428_800, topics=[FetchRequest.FetchTopic(
                topic=topic, partitions=[FetchRequest.FetchPartition(partition=p, fetch_offset=offsets[p],
                                                                     partition_max_bytes=4_194_304)
                                         for p in range(partitions)])])
            for part in c.request(1, 11, req).responses[0].partitions:
                data, pos = part.records, 0
                while pos + 61 <= len(data):
                    h = parse_header(data, pos)
                    if pos + h.size > len(data):
                        break
                    got += h.records_count
                    offsets[part.partition_index] = h.last_offset + 1
                    pos += h.size
                nbytes += pos
        return time.perf_counter() - t0, got, nbytes


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


def loopback(total: int = 2 << 30, path: str | None = None) -> float:
    """MB/s to a sink process: ``sendall`` of a 1 MiB buffer, or ``os.sendfile`` of the file ``path``."""
    q: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    proc = mp.Process(target=_sink, args=(q, total))
    proc.start()
    s = socket.create_connection(("127.0.0.1", q.get()))
    chunk = b"\0" * (1 << 20)
    t0 = time.perf_counter()
    sent = 0
    if path is not None:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            while sent < total:
                offset = sent % size
                sent += os.sendfile(s.fileno(), f.fileno(), offset, min(size - offset, total - sent))
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
    ap.add_argument("--rounds", type=int, default=1, help="produce runs (strom, then the mock) per record size")
    args = ap.parse_args()
    results: dict[str, tuple[float, float]] = {}
    with BrokerProcess() as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.create_topics([NewTopic(t, num_partitions=4, replication_factor=1)
                                      for t in ("b1k", "b100")]).values():
            f.result(10)
        holder, mock_bs = mock_cluster()
        print(f"strom broker at {b.bootstrap}; mock cluster at {mock_bs}; cores={os.cpu_count()}")
        bp = psutil.Process(b.proc.pid)
        me = psutil.Process()
        ratios: dict[int, list[float]] = {1024: [], 100: []}
        for rnd in range(args.rounds):
            for size, n, topic in ((1024, args.records_1k, "b1k"), (100, args.records_100, "b100")):
                print(f"produce {n:,} x {size} B, acks=1" + (f" (round {rnd + 1})" if args.rounds > 1 else ""))
                c0, m0 = bp.cpu_times(), me.cpu_times()
                dt, _ = produce(b.bootstrap, topic, size, n)
                c1, m1 = bp.cpu_times(), me.cpu_times()
                strom = row("(a) confluent-kafka -> strom", n, size, dt)
                broker_cpu = c1.user - c0.user + c1.system - c0.system
                producer_cpu = m1.user - m0.user + m1.system - m0.system
                print(f"      cpu: broker {broker_cpu / dt:.2f} cores ({broker_cpu * 1e3 / (n * size / 1e6):.2f} ms "
                      f"per MB, {(c1.system - c0.system) / max(broker_cpu, 1e-9):.0%} system), producer "
                      f"{producer_cpu / dt:.2f} cores ({producer_cpu * 1e3 / (n * size / 1e6):.2f} ms per MB)")
                m0 = me.cpu_times()
                dt, _ = produce(mock_bs, topic, size, n)
                m1 = me.cpu_times()
                mock = row("(b) confluent-kafka -> librdkafka mock", n, size, dt)
                both = m1.user - m0.user + m1.system - m0.system
                print(f"      cpu: producer and mock broker (one process) {both / dt:.2f} cores "
                      f"({both * 1e3 / (n * size / 1e6):.2f} ms per MB, {(m1.system - m0.system) / max(both, 1e-9):.0%} "
                      f"system)")
                ratios[size].append(strom[0] / mock[0])
                results[f"strom-produce-{size}"], results[f"mock-produce-{size}"] = strom, mock
        print("consume the 1 KiB topic back")
        c0, m0 = bp.cpu_times(), me.cpu_times()
        dt, got, nbytes = consume(b.bootstrap, "b1k", args.records_1k + 1)
        c1, m1 = bp.cpu_times(), me.cpu_times()
        results["strom-fetch-1024"] = row("(c) strom -> confluent-kafka consumer", got, 1024, dt)
        print(f"      cpu: broker {(c1.user - c0.user + c1.system - c0.system) / dt:.2f}, "
              f"consumer {(m1.user - m0.user + m1.system - m0.system) / dt:.2f} cores")
        c0 = bp.cpu_times()
        dt, got, nbytes = lean_fetch(b.bootstrap, "b1k", 4, args.records_1k + 1)
        c1 = bp.cpu_times()
        results["strom-lean-fetch"] = (got / dt, nbytes / dt / 1e6)
        print(f"  {'(c2) strom fetch path, lean client':<44} {got / dt:>12,.0f} rec/s {nbytes / dt / 1e6:>9.1f} MB/s")
        print(f"      cpu: broker {(c1.user - c0.user + c1.system - c0.system) / dt:.2f} cores")
        del holder
    lb = loopback()
    print(f"  {'(d) raw loopback TCP':<44} {'':>12}       {lb:>9.1f} MB/s")
    with tempfile.NamedTemporaryFile(prefix="strom-sendfile-") as f:
        f.write(os.urandom(1 << 20) * 256)
        f.flush()
        lbs = loopback(path=f.name)
    print(f"  {'(d2) loopback sendfile of a cached file':<44} {'':>12}       {lbs:>9.1f} MB/s")
    print("ratios")
    for size in (1024, 100):
        print(f"  produce {size:>4} B: strom / mock cluster = {', '.join(f'{r:.2f}x' for r in ratios[size])}")
    print(f"  fetch 1 KiB: strom / loopback = {results['strom-fetch-1024'][1] / lb:.2f}x (confluent-kafka consumer), "
          f"{results['strom-lean-fetch'][1] / lb:.2f}x (lean fetch client); "
          f"lean / loopback sendfile = {results['strom-lean-fetch'][1] / lbs:.2f}x")


if __name__ == "__main__":
    main()
