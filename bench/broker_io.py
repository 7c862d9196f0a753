"""Broker I/O: zero-copy Fetch and a loop that never waits for the disk, before / after, side by side in one run.

  .venv/bin/python bench/broker_io.py [--base-ref REF] [--rounds R] [--fetch-mb MB] [--lag-seconds S]
                                      [--ingest-records N] [--only fetch|lag|ingest]

The base revision's ``strom`` package is exported with ``git archive`` and run with ``PYTHONPATH`` pointing at
it; the clients are this tree's. Per round and per broker (order swapped every round):

(f) large-batch Fetch: ``--fetch-mb`` batches of ~1 MB written into 4 partitions, then read back ``--passes`` times by one
    connection with Fetch v11 (``partition_max_bytes`` 4 MiB, ``max_bytes`` 16 MiB); the client receives each
    frame into one buffer with ``recv_into`` and decodes it without copying the records. MB/s and broker CPU.
(l) loop lag under fsync-per-message load: a broker with ``log.flush.interval.messages=1``; 4 producer
    connections send one-record 1 KiB batches (acks=1) as fast as they are answered while a fifth connection
    sends ApiVersions every 5 ms; the round-trip times of those ApiVersions are the loop's lag (a loop blocked
    in fsync answers nothing). p50 / p99 / max ms, and produce requests/s.
(i) ingest: a confluent-kafka producer (``bench/broker.py``'s settings: acks=1, 1 MB batches, linger 5 ms) sends
    ``--ingest-records`` 1 KiB records into 4 partitions; MB/s and the broker's CPU per MB (user and system).

Then, in the same run, the machine's loopback limits: ``send`` of a 1 MiB buffer and ``os.sendfile`` of a
page-cached 256 MiB file between two processes. The fetch ratio the issue asks for is broker MB/s divided by the
loopback sendfile MB/s.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

import psutil  # noqa: E402

from strom.broker_process import BrokerProcess  # noqa: E402
from strom.protocol.api_keys import ApiKey  # noqa: E402
from strom.protocol.connection import KafkaConnection  # noqa: E402
from strom.protocol.messages.api_versions import ApiVersionsRequest  # noqa: E402
from strom.protocol.messages.create_topics import CreateTopicsRequest  # noqa: E402
from strom.protocol.messages.fetch import FetchRequest, FetchResponse  # noqa: E402
from strom.protocol.messages.produce import ProduceRequest  # noqa: E402
from strom.record.builder import MemoryRecordsBuilder  # noqa: E402
from strom.record.header import parse_header  # noqa: E402
from strom.testing.raw_client import RawClient  # noqa: E402

PARTITIONS = 4


def export(ref: str, into: str) -> None:
    archive = subprocess.run(["git", "-C", ROOT, "archive", ref, "strom"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)


def start_broker(pythonpath: str, overrides: dict[str, str] | None = None) -> BrokerProcess:
    """A broker running the ``strom`` package found in ``pythonpath``. The process starts in that directory too:
    ``python -m`` puts the working directory first on ``sys.path``, so a broker started from the repository's
    root would import this tree's ``strom`` whatever ``PYTHONPATH`` says."""
    old, cwd = os.environ.get("PYTHONPATH"), os.getcwd()
    os.environ["PYTHONPATH"] = pythonpath
    os.chdir(pythonpath)
    try:
        b = BrokerProcess(overrides=overrides)
        b.start()
    finally:
        os.chdir(cwd)
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    return b


def create_topic(bootstrap: str, name: str) -> None:
    with RawClient(bootstrap) as c:
        r = c.request(ApiKey.CREATE_TOPICS, 4, CreateTopicsRequest(timeout_ms=10_000, topics=[
            CreateTopicsRequest.CreatableTopic(name=name, num_partitions=PARTITIONS, replication_factor=1)]))
        assert r.topics[0].error_code == 0, r


def produce_request(topic: str, partition: int, batch: bytes, acks: int = 1) -> ProduceRequest:
    return ProduceRequest(acks=acks, timeout_ms=30_000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=batch)])])


def fill(bootstrap: str, topic: str, mb: int) -> int:
    """``mb`` batches of ~1 MB (60 records of 16 KiB: under max.message.bytes), round-robin over the partitions;
    returns bytes written."""
    b = MemoryRecordsBuilder()
    value = os.urandom(16 << 10)
    for i in range(60):
        b.append(1_700_000_000_000 + i, None, value)
    batch = b.build()
    with RawClient(bootstrap, timeout=60) as c:
        for i in range(mb):
            r = c.request(ApiKey.PRODUCE, 9, produce_request(topic, i % PARTITIONS, batch))
            assert r.responses[0].partition_responses[0].error_code == 0
    return mb * len(batch)


class FrameClient:
    """One connection; each response frame is received into one buffer (no re-assembly copies)."""

    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn = KafkaConnection("client", client_id="bench")
        self.buf = bytearray(32 << 20)

    def fetch(self, req: FetchRequest, version: int = 11) -> FetchResponse:
        cid, data = self.conn.send_request(ApiKey.FETCH, version, req)
        self.sock.sendall(data)
        view = memoryview(self.buf)
        got = 0
        while got < 4:
            got += self.sock.recv_into(view[got:])
        size = struct.unpack_from(">i", self.buf)[0] + 4
        if size > len(self.buf):
            self.buf.extend(bytes(size - len(self.buf)))
            view = memoryview(self.buf)
        while got < size:
            got += self.sock.recv_into(view[got:size])
        assert struct.unpack_from(">i", self.buf, 4)[0] == cid
        return FetchResponse.decode(view[8:size], version)

    def close(self) -> None:
        self.sock.close()


def fetch_all(bootstrap: str, topic: str, passes: int) -> tuple[float, int]:
    """Read every partition from offset 0 to its end ``passes`` times; (seconds, bytes of records)."""
    c = FrameClient(bootstrap)
    nbytes = 0
    try:
        t0 = time.perf_counter()
        for _ in range(passes):
            offsets = [0] * PARTITIONS
            done = [False] * PARTITIONS
            while not all(done):
                req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=16 << 20, isolation_level=0,
                                   topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                                       FetchRequest.FetchPartition(partition=p, fetch_offset=offsets[p],
                                                                   partition_max_bytes=4 << 20)
                                       for p in range(PARTITIONS) if not done[p]])])
                for part in c.fetch(req).responses[0].partitions:
                    data = part.records
                    if not data:
                        done[part.partition_index] = True
                        continue
                    pos = last = 0
                    while pos + 61 <= len(data):
                        h = parse_header(data, pos)
                        last = h.last_offset
                        pos += h.size
                    offsets[part.partition_index] = last + 1
                    nbytes += len(data)
        return time.perf_counter() - t0, nbytes
    finally:
        c.close()


def loop_lag(bootstrap: str, topic: str, seconds: float) -> tuple[list[float], int]:
    """ApiVersions round trips (ms) on an idle connection while 4 connections produce; and produce count."""
    b = MemoryRecordsBuilder()
    b.append(1_700_000_000_000, b"k", os.urandom(1024))
    rtts, counts = produce_while_probing(bootstrap, topic, [b.build()] * PARTITIONS, seconds)
    return rtts, sum(counts)


def produce_while_probing(bootstrap: str, topic: str, batches: list[bytes], seconds: float,
                          ) -> tuple[list[float], list[int]]:
    """One connection per partition sends ``batches[p]`` to partition p (acks=1) as fast as it is answered while
    :func:`api_versions_round_trips` runs for ``seconds``: its round trips, and the requests each connection made."""
    stop = threading.Event()
    counts = [0] * len(batches)

    def producer(p: int) -> None:
        with RawClient(bootstrap, timeout=60) as c:
            req = produce_request(topic, p, batches[p])
            while not stop.is_set():
                r = c.request(ApiKey.PRODUCE, 9, req)
                assert r.responses[0].partition_responses[0].error_code == 0
                counts[p] += 1

    threads = [threading.Thread(target=producer, args=(p,)) for p in range(len(batches))]
    for t in threads:
        t.start()
    try:
        rtts = api_versions_round_trips(bootstrap, seconds)
    finally:
        stop.set()
        for t in threads:
            t.join()
    return rtts, counts


def api_versions_round_trips(bootstrap: str, seconds: float, every: float = 0.005) -> list[float]:
    """Round trips (ms) of ApiVersions sent on a connection of their own every ``every`` seconds for ``seconds``:
    how long the broker's event loop keeps an idle connection waiting."""
    rtts: list[float] = []
    with RawClient(bootstrap) as probe:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            probe.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="bench",
                                                                    client_software_version="1"))
            rtts.append((time.perf_counter() - t0) * 1000)
            time.sleep(every)
    return rtts


def run_once(pythonpath: str, args: argparse.Namespace) -> dict[str, float]:
    out: dict[str, float] = {}
    if args.only in (None, "fetch"):
        run_fetch(pythonpath, args, out)
    if args.only in (None, "lag"):
        run_lag(pythonpath, args, out)
    if args.only in (None, "ingest"):
        run_ingest(pythonpath, args, out)
    return out


def run_ingest(pythonpath: str, args: argparse.Namespace, out: dict[str, float]) -> None:
    from broker import produce  # bench/broker.py (this script's directory is first on sys.path)

    b = start_broker(pythonpath)
    try:
        proc = psutil.Process(b.proc.pid)  # type: ignore[union-attr]
        create_topic(b.bootstrap, "ingest")
        produce(b.bootstrap, "ingest", 1024, 20_000)  # warm up the code paths
        c0 = proc.cpu_times()
        dt, n = produce(b.bootstrap, "ingest", 1024, args.ingest_records)
        c1 = proc.cpu_times()
        mb = n * 1024 / 1e6
        out["ingest MB/s"] = mb / dt
        out["ingest broker user ms/MB"] = (c1.user - c0.user) * 1e3 / mb
        out["ingest broker sys ms/MB"] = (c1.system - c0.system) * 1e3 / mb
    finally:
        b.stop()
        b.cleanup()


def run_fetch(pythonpath: str, args: argparse.Namespace, out: dict[str, float]) -> None:
    b = start_broker(pythonpath)
    try:
        proc = psutil.Process(b.proc.pid)  # type: ignore[union-attr]
        create_topic(b.bootstrap, "big")
        fill(b.bootstrap, "big", args.fetch_mb)
        fetch_all(b.bootstrap, "big", 1)  # warm the page cache and the code paths
        c0 = sum(proc.cpu_times()[:2])
        dt, nbytes = fetch_all(b.bootstrap, "big", args.passes)
        out["fetch MB/s"] = nbytes / dt / 1e6
        out["fetch broker CPU s/GB"] = (sum(proc.cpu_times()[:2]) - c0) / (nbytes / 1e9)
    finally:
        b.stop()
        b.cleanup()


def run_lag(pythonpath: str, args: argparse.Namespace, out: dict[str, float]) -> None:
    b = start_broker(pythonpath, {"log.flush.interval.messages": "1"})
    try:
        create_topic(b.bootstrap, "lag")
        rtts, produced = loop_lag(b.bootstrap, "lag", args.lag_seconds)
        rtts.sort()
        out["lag p50 ms"] = rtts[len(rtts) // 2]
        out["lag p99 ms"] = rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))]
        out["lag max ms"] = rtts[-1]
        out["produce req/s (fsync each)"] = produced / args.lag_seconds
    finally:
        b.stop()
        b.cleanup()


# -- loopback limits ---------------------------------------------------------------------------------------------


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


def loopback(total: int, path: str | None) -> float:
    """MB/s from this process to a sink process: ``sendall`` of a 1 MiB buffer, or ``os.sendfile`` of ``path``."""
    q: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    proc = mp.Process(target=_sink, args=(q, total))
    proc.start()
    s = socket.create_connection(("127.0.0.1", q.get()))
    t0 = time.perf_counter()
    sent = 0
    if path is None:
        chunk = b"\0" * (1 << 20)
        while sent < total:
            s.sendall(chunk)
            sent += len(chunk)
    else:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            while sent < total:
                offset = sent % size
                sent += os.sendfile(s.fileno(), f.fileno(), offset, min(size - offset, total - sent))
    s.recv(1)
    dt = time.perf_counter() - t0
    s.close()
    proc.join()
    return total / dt / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-ref", default="82162b9", help="the revision before zero-copy Fetch and the log flusher")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fetch-mb", type=int, default=256)
    ap.add_argument("--passes", type=int, default=4, help="times the fetch client reads the whole topic")
    ap.add_argument("--lag-seconds", type=float, default=8.0)
    ap.add_argument("--ingest-records", type=int, default=1_000_000)
    ap.add_argument("--only", choices=("fetch", "lag", "ingest"), default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="strom-base-") as base:
        export(args.base_ref, base)
        variants = {"before": base, "after": os.path.abspath(ROOT)}
        results: dict[str, list[dict[str, float]]] = {k: [] for k in variants}
        lo_plain: list[float] = []
        lo_sendfile: list[float] = []
        with tempfile.NamedTemporaryFile(prefix="strom-sendfile-") as f:
            f.write(os.urandom(1 << 20) * 256)
            f.flush()
            for r in range(args.rounds):
                order = list(variants) if r % 2 == 0 else list(reversed(variants))
                for name in order:
                    results[name].append(run_once(variants[name], args))
                    print(f"round {r + 1} {name}: " + ", ".join(f"{k} {v:,.2f}" for k, v in results[name][-1].items()),
                          flush=True)
                if args.only in ("lag", "ingest"):
                    continue
                lo_plain.append(loopback(2 << 30, None))
                lo_sendfile.append(loopback(2 << 30, f.name))
                print(f"round {r + 1} loopback: send {lo_plain[-1]:,.0f} MB/s, sendfile {lo_sendfile[-1]:,.0f} MB/s",
                      flush=True)
    print(f"\nmedians over {args.rounds} rounds (before = {args.base_ref}, after = this tree)")
    print(f"  {'measurement':<30} {'before':>10} {'after':>10}")
    for key in results["before"][0]:
        rb = statistics.median(x[key] for x in results["before"])
        ra = statistics.median(x[key] for x in results["after"])
        print(f"  {key:<30} {rb:>10,.2f} {ra:>10,.2f}")
    if args.only in ("lag", "ingest"):
        return
    plain, sf = statistics.median(lo_plain), statistics.median(lo_sendfile)
    print(f"  {'loopback send MB/s':<30} {plain:>10,.0f}")
    print(f"  {'loopback sendfile MB/s':<30} {sf:>10,.0f}")
    for name in variants:
        fetch = statistics.median(x["fetch MB/s"] for x in results[name])
        print(f"  fetch / loopback sendfile, {name}: {fetch / sf:.2f}x   (/ loopback send: {fetch / plain:.2f}x)")


if __name__ == "__main__":
    main()
