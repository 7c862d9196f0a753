"""Broker benchmark: strom vs librdkafka's mock cluster vs the loopback limit, in one run.

  .venv/bin/python bench/broker.py [--records-1k N] [--records-100 N] [--rounds R]

(a) confluent-kafka Producer -> strom broker (subprocess), 1 KiB and 100-byte records, acks=1;
(b) the same producer -> librdkafka's in-memory mock cluster (a C broker);
(c) confluent-kafka Consumer reading the 1 KiB topic back from strom;
(d) raw loopback TCP between two processes (the physical limit): ``send`` of a memory buffer, and (d2)
    ``os.sendfile`` of a page-cached file (what a zero-copy Fetch does).
With ``--floor`` (1 KiB rounds only), what bounds the 1 KiB ingest ratio, in the same run:
(b2) the same producer -> the mock cluster in a process of its own (a broker process that keeps records in memory);
(b3) as (b2), beside a process copying memory for as much CPU as strom's broker used in (a) (what the producer
     reaches against a broker that costs what strom's costs but does nothing);
(e)  the kernel's floor for a broker that keeps what it receives: loopback ``recv_into`` then ``pwrite`` to a file,
     the receiver's CPU per MB (and ``recv_into`` alone);
(b4) as (b3), the copying process using what (e) would cost at (b2)'s rate: the best ratio a broker that writes
     to the page cache and does nothing else could reach against the mock on this machine.
Prints records/s, MB/s and strom's ratios against (b) and (d).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import socket
import subprocess
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


_MOCK_HOLDER = """
import sys
import confluent_kafka as ck
h = ck.Producer({"test.mock.num.brokers": 1})
print(",".join(str(b) for b in h.list_topics(timeout=10).brokers.values()), flush=True)
sys.stdin.read()
"""

_COPY_HOG = """
import sys, time
cores = float(sys.argv[1])
src, dst = bytearray(8 << 20), bytearray(8 << 20)
period = 0.01
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < period * cores:
        dst[:] = src
    time.sleep(period * (1 - cores))
"""


def mock_process() -> tuple[subprocess.Popen, str]:  # type: ignore[type-arg]
    """librdkafka's mock cluster held by a process of its own: its bootstrap address."""
    proc = subprocess.Popen([sys.executable, "-c", _MOCK_HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def copy_hog(cores: float) -> subprocess.Popen:  # type: ignore[type-arg]
    """A process copying 8 MiB buffers for ``cores`` of one CPU (duty cycle over 10 ms)."""
    return subprocess.Popen([sys.executable, "-c", _COPY_HOG, f"{min(max(cores, 0.05), 0.95):.3f}"])


def _floor_sender(port: int, total: int) -> None:
    s = socket.create_connection(("127.0.0.1", port))
    chunk = os.urandom(1 << 20)
    for _ in range(total >> 20):
        s.sendall(chunk)
    s.close()


def receive_floor(write: bool, total: int = 1 << 30) -> tuple[float, float]:
    """Loopback ``recv_into`` of ``total`` bytes (and ``pwrite`` of each read to a file when ``write``): MB/s and
    the receiver's CPU ms per MB."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    proc = mp.Process(target=_floor_sender, args=(srv.getsockname()[1], total))
    proc.start()
    conn, _ = srv.accept()
    buf = memoryview(bytearray(1 << 20))
    with tempfile.TemporaryFile(prefix="strom-floor-") as f:
        r0, t0, got = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(), 0
        while n := conn.recv_into(buf):
            if write:
                os.pwrite(f.fileno(), buf[:n], got)
            got += n
        dt, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    conn.close()
    srv.close()
    proc.join()
    cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
    return got / dt / 1e6, cpu * 1e3 / (got / 1e6)


def row(label: str, n: int, size: int, dt: float) -> tuple[float, float]:
    rps, mbs = n / dt, n * size / dt / 1e6
    print(f"  {label:<44} {rps:>12,.0f} rec/s {mbs:>9.1f} MB/s")
    return rps, mbs


def measure_floor(floor: dict[str, list[float]], n: int, size: int, topic: str, strom_rps: float,
                  broker_cores: float) -> None:
    """(e), (b2), (b3) and (b4) of the module docstring, one each."""
    recv_mbs, recv_ms = receive_floor(write=False)
    write_mbs, write_ms = receive_floor(write=True)
    print(f"  {'(e) loopback recv_into, receiver':<44} {'':>12}       {recv_mbs:>9.1f} MB/s ({recv_ms:.2f} ms per MB)")
    print(f"  {'(e) loopback recv_into + pwrite, receiver':<44} {'':>12}       {write_mbs:>9.1f} MB/s "
          f"({write_ms:.2f} ms per MB)")
    proc, bootstrap = mock_process()
    try:
        mp_ = psutil.Process(proc.pid)
        c0, m0 = mp_.cpu_times(), psutil.Process().cpu_times()
        dt, _ = produce(bootstrap, topic, size, n)
        c1, m1 = mp_.cpu_times(), psutil.Process().cpu_times()
        own = row("(b2) confluent-kafka -> mock, own process", n, size, dt)
        mb = n * size / 1e6
        print(f"      cpu: mock broker {(c1.user - c0.user + c1.system - c0.system) * 1e3 / mb:.2f} ms per MB, producer "
              f"{(m1.user - m0.user + m1.system - m0.system) * 1e3 / mb:.2f} ms per MB")
        beside = {}
        floor_cores = write_ms * own[1] / 1e3  # the kernel's floor at the mock's rate
        for label, cores in (("b3", broker_cores), ("b4", floor_cores)):
            hog = copy_hog(cores)
            try:
                time.sleep(0.2)
                dt, _ = produce(bootstrap, topic, size, n)
            finally:
                hog.kill()
                hog.wait()
            what = "strom's broker" if label == "b3" else "the floor (e)"
            beside[label] = row(f"({label}) as (b2), beside {cores:.2f} cores ({what})", n, size, dt)[0] / own[0]
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
    floor["own"].append(strom_rps / own[0])
    floor["hog"].append(beside["b3"])
    floor["floor"].append(beside["b4"])
    floor["recv"].append(recv_ms)
    floor["write"].append(write_ms)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records-1k", type=int, default=300_000)
    ap.add_argument("--records-100", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=1, help="produce runs (strom, then the mock) per record size")
    ap.add_argument("--floor", action="store_true", help="1 KiB rounds also measure (b2), (b3) and (e)")
    args = ap.parse_args()
    floor: dict[str, list[float]] = {"own": [], "hog": [], "floor": [], "recv": [], "write": []}
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
                if args.floor and size == 1024:
                    measure_floor(floor, n, size, topic, strom[0], broker_cpu / dt)
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
    if args.floor:
        print(f"  produce 1024 B: strom / mock in its own process = {', '.join(f'{r:.2f}x' for r in floor['own'])}; "
              f"(b3) / (b2) = {', '.join(f'{r:.2f}x' for r in floor['hog'])}; "
              f"(b4) / (b2) = {', '.join(f'{r:.2f}x' for r in floor['floor'])}")
        print(f"  kernel floor of a broker that writes what it receives: recv_into + pwrite "
              f"{', '.join(f'{r:.2f}' for r in floor['write'])} ms per MB (recv_into alone "
              f"{', '.join(f'{r:.2f}' for r in floor['recv'])})")
    print(f"  fetch 1 KiB: strom / loopback = {results['strom-fetch-1024'][1] / lb:.2f}x (confluent-kafka consumer), "
          f"{results['strom-lean-fetch'][1] / lb:.2f}x (lean fetch client); "
          f"lean / loopback sendfile = {results['strom-lean-fetch'][1] / lbs:.2f}x")


if __name__ == "__main__":
    main()
