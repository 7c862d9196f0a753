"""Producer benchmark: strom's KafkaProducer vs kafka-python, aiokafka and confluent-kafka, in one run.

  .venv/bin/python bench/producer.py [--count-small N] [--count-large N] [--targets strom,mock]
                                     [--clients strom,kafka-python,aiokafka,confluent] [--profile] [--headers H]
                                     [--rounds R]

Against the same broker and topic — a strom broker subprocess, then librdkafka's mock cluster (in this
process, native threads) — for 100-byte and 1 KiB records with acks=1 and acks=all, each client runs in its own
subprocess using its fastest idiomatic asynchronous API (strom/kafka-python: ``send`` + ``flush``; aiokafka:
``send`` futures + ``gather``; confluent-kafka: ``produce`` + ``poll(0)`` + ``flush``). The clock starts after
a warm-up record (metadata, connections) and stops when every record has been acknowledged. Common settings:
linger.ms=5, batch.size=64 KiB, no compression, idempotence off (so acks=all means the same work for all).
``strom-bulk`` is strom's bulk path: ``send_many`` with lists of 100,000 values (no headers); ``strom-aio`` is
``strom.aio.AsyncKafkaProducer`` used as aiokafka is (``await send`` futures + ``gather``). ``--headers H``
gives every record H headers (``trace-id-<i>``: 16 random bytes), as tracing libraries set them.
``--rounds R`` runs every client R times per cell, in the given order and then reversed, alternately (so no
client always runs first, right after the broker started or after the other sizes' cells), and reports each
client's best run with the rates of all of them.
Prints records/s, MB/s, peak RSS per client and strom's ratio to each. ``--profile`` writes a pyinstrument
profile of strom's 100-byte acks=1 run to ``bench/out/``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

CLIENTS = ["strom", "strom-bulk", "strom-aio", "kafka-python", "aiokafka", "confluent"]
LINGER_MS = 5
BATCH = 65536
HEADERS: list[tuple[str, bytes]] | None = None  # set in the worker from --headers


# ----------------------------------------------------------------------------------------------- workers


def _strom(bootstrap: str, topic: str, payload: bytes, n: int, acks: str, mock: bool) -> float:
    from strom import KafkaProducer
    from strom.metrics import metric_values

    p = KafkaProducer({"bootstrap.servers": bootstrap, "key.serializer": "bytes", "value.serializer": "bytes",
                       "acks": acks, "linger.ms": LINGER_MS, "batch.size": BATCH, "enable.idempotence": False})
    p.send(topic, payload).get(30)
    send = p.send
    headers = HEADERS
    t0 = time.perf_counter()
    if headers:
        for _ in range(n):
            send(topic, payload, headers=headers)
    else:
        for _ in range(n):
            send(topic, payload)
    p.flush()
    dt = time.perf_counter() - t0
    assert metric_values(p.metrics(), "producer-metrics")["record-error-total"] == 0
    p.close()
    return dt


def _strom_bulk(bootstrap: str, topic: str, payload: bytes, n: int, acks: str, mock: bool) -> float:
    """strom's bulk path: ``send_many`` of the values in slices of 100,000, then ``flush``."""
    from strom import KafkaProducer
    from strom.metrics import metric_values

    p = KafkaProducer({"bootstrap.servers": bootstrap, "key.serializer": "bytes", "value.serializer": "bytes",
                       "acks": acks, "linger.ms": LINGER_MS, "batch.size": BATCH, "enable.idempotence": False})
    p.send(topic, payload).get(30)
    values = [payload] * min(n, 100_000)
    t0 = time.perf_counter()
    left = n
    while left > 0:
        p.send_many(topic, values if left >= len(values) else values[:left])
        left -= len(values)
    p.flush()
    dt = time.perf_counter() - t0
    assert metric_values(p.metrics(), "producer-metrics")["record-error-total"] == 0
    p.close()
    return dt


def _kafka_python(bootstrap: str, topic: str, payload: bytes, n: int, acks: str, mock: bool) -> float:
    from kafka import KafkaProducer

    kwargs: dict[str, Any] = {"bootstrap_servers": bootstrap, "acks": acks if acks == "all" else int(acks),
                              "linger_ms": LINGER_MS, "batch_size": BATCH}
    if mock:
        kwargs["api_version"] = (2, 3, 0)  # librdkafka mock's ApiVersions quirk (see shared notes)
    p = KafkaProducer(enable_idempotence=False, **kwargs)
    p.send(topic, payload).get(30)
    send = p.send
    t0 = time.perf_counter()
    headers = HEADERS
    futures = ([send(topic, payload, headers=headers) for _ in range(n)] if headers
               else [send(topic, payload) for _ in range(n)])
    p.flush()
    dt = time.perf_counter() - t0
    assert all(f.succeeded() for f in futures[-100:])
    p.close()
    return dt


async def _timed_async_sends(send: Any, topic: str, payload: bytes, n: int) -> float:
    """aiokafka's idiom (strom.aio's too): ``n`` awaited sends, then every future gathered; the seconds taken."""
    import asyncio

    headers = HEADERS
    t0 = time.perf_counter()
    if headers:
        futures = [await send(topic, payload, headers=headers) for _ in range(n)]
    else:
        futures = [await send(topic, payload) for _ in range(n)]
    await asyncio.gather(*futures)
    return time.perf_counter() - t0


def _aiokafka(bootstrap: str, topic: str, payload: bytes, n: int, acks: str, mock: bool) -> float:
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def run() -> float:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=acks if acks == "all" else int(acks),
                             linger_ms=LINGER_MS, max_batch_size=BATCH, enable_idempotence=False)
        await p.start()
        await (await p.send(topic, payload))
        dt = await _timed_async_sends(p.send, topic, payload, n)
        await p.stop()
        return dt

    return asyncio.run(run())


def _strom_aio(bootstrap: str, topic: str, payload: bytes, n: int, acks: str, mock: bool) -> float:
    import asyncio

    from strom.aio import AsyncKafkaProducer

    async def run() -> float:
        p = AsyncKafkaProducer({"bootstrap.servers": bootstrap, "key.serializer": "bytes",
                                "value.serializer": "bytes", "acks": acks, "linger.ms": LINGER_MS,
                                "batch.size": BATCH, "enable.idempotence": False})
        await p.send_and_wait(topic, payload)
        dt = await _timed_async_sends(p.send, topic, payload, n)
        await p.close()
        return dt

    return asyncio.run(run())


def _confluent(bootstrap: str, topic: str, payload: bytes, n: int, acks: str, mock: bool) -> float:
    import confluent_kafka as ck

    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": LINGER_MS, "batch.size": BATCH,
                     "enable.idempotence": False, "compression.type": "none",
                     "queue.buffering.max.kbytes": 65536})
    p.produce(topic, payload)
    p.flush(30)
    errors: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    produce, poll = p.produce, p.poll
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                produce(topic, payload, on_delivery=report, headers=HEADERS)
                break
            except BufferError:
                poll(0.001)
        if i % 1000 == 0:
            poll(0)
    left = p.flush(300)
    dt = time.perf_counter() - t0
    assert left == 0 and not errors
    return dt


WORKERS = {"strom": _strom, "strom-bulk": _strom_bulk, "strom-aio": _strom_aio, "kafka-python": _kafka_python,
           "aiokafka": _aiokafka, "confluent": _confluent}


def worker_main(args: argparse.Namespace) -> None:
    global HEADERS
    HEADERS = [(f"trace-id-{i}", os.urandom(16)) for i in range(args.headers)] or None
    payload = os.urandom(args.size)
    fn = WORKERS[args.worker]
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0005)
        profiler.start()
        dt = fn(args.bootstrap, args.topic, payload, args.count, args.acks, args.mock)
        profiler.stop()
        os.makedirs(os.path.join(ROOT, "bench", "out"), exist_ok=True)
        path = os.path.join(ROOT, "bench", "out", f"producer-{args.worker}-{args.size}.txt")
        with open(path, "w") as f:
            f.write(profiler.output_text(unicode=False, color=False, show_all=False))
    else:
        dt = fn(args.bootstrap, args.topic, payload, args.count, args.acks, args.mock)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": dt, "count": args.count, "size": args.size, "peak_rss_mb": peak_kb / 1024}))


# ----------------------------------------------------------------------------------------------- driver


def run_worker(client: str, bootstrap: str, topic: str, size: int, count: int, acks: str, mock: bool,
               profile: bool = False, headers: int = 0) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", client, "--bootstrap", bootstrap, "--topic", topic,
           "--size", str(size), "--count", str(count), "--acks", acks, "--headers", str(headers)]
    if mock:
        cmd.append("--mock")
    if profile:
        cmd.append("--profile")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"error": (out.stderr or out.stdout)[-600:]}
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker")
    ap.add_argument("--bootstrap")
    ap.add_argument("--topic", default="bench-producer")
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--acks", default="1")
    ap.add_argument("--mock", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--count-small", type=int, default=200_000)
    ap.add_argument("--count-large", type=int, default=100_000)
    ap.add_argument("--targets", default="strom,mock")
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--headers", type=int, default=0, help="headers on every record")
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs per client and cell, the clients' order reversed every other round; best reported")
    args = ap.parse_args()
    if args.worker:
        worker_main(args)
        return

    from confluent_kafka.admin import AdminClient, NewTopic

    from strom.broker_process import BrokerProcess
    from strom.testing.mock_cluster import MockCluster

    clients = args.clients.split(",")
    results: list[tuple[str, int, str, str, dict[str, Any]]] = []
    for target in args.targets.split(","):
        if target == "strom":
            ctx: Any = BrokerProcess()
            ctx.start()
            bootstrap = ctx.bootstrap
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(args.topic, num_partitions=args.partitions,
                                          replication_factor=1)])[args.topic].result(30)
        else:
            ctx = MockCluster(3)
            bootstrap = ctx.bootstrap_servers
            ctx.create_topic(args.topic, args.partitions, 3)
        try:
            for size, count in ((100, args.count_small), (1024, args.count_large)):
                for acks in ("1", "all"):
                    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in clients}
                    for rnd in range(args.rounds):
                        # Alternate the clients' order from round to round: none always runs first on the cell.
                        for client in clients if rnd % 2 == 0 else clients[::-1]:
                            r = run_worker(client, bootstrap, args.topic, size, count, acks, target == "mock",
                                           args.profile and client == "strom" and size == 100 and acks == "1"
                                           and rnd == 0, args.headers)
                            runs[client].append(r)
                            print(_row(target, size, acks, client, r), flush=True)
                    for client in clients:
                        results.append((target, size, acks, client, _best(runs[client])))
        finally:
            if target == "strom":
                del admin  # (else its librdkafka threads log the broker's shutdown)
                ctx.stop()
                ctx.cleanup()
            else:
                ctx.close()
    print()
    print(_table(results, clients))


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A client's fastest run of a cell, with the rates of all its runs (``rates``); an error if any run failed."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    best = dict(max(runs, key=_rate))
    best["rates"] = [_rate(r) for r in runs]
    return best


def _rate(r: dict[str, Any]) -> float:
    return r["count"] / r["seconds"] if "seconds" in r else float("nan")


def _row(target: str, size: int, acks: str, client: str, r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{target:5} {size:5}B acks={acks:3} {client:13} ERROR {r['error']!r}"
    rate = _rate(r)
    return (f"{target:5} {size:5}B acks={acks:3} {client:13} {rate:>12,.0f} rec/s {rate * size / 1e6:8.1f} MB/s "
            f"peak RSS {r['peak_rss_mb']:.0f} MB")


def _ratio(x: float) -> str:
    return "—" if x != x else f"{x:.2f}×"  # a client not run (or failed): no ratio


def _table(results: list[tuple[str, int, str, str, dict[str, Any]]], clients: list[str]) -> str:
    many = any(len(r.get("rates", ())) > 1 for *_, r in results)
    mine = [c for c in ("strom", "strom-bulk", "strom-aio") if c in clients] or ["strom"]
    lines = ["| broker | record | acks | client | records/s | MB/s | peak RSS MB | "
             + "".join(f"{c} ÷ client | " for c in mine) + ("records/s of each round |" if many else ""),
             "|---|---:|---:|---|---:|---:|---:|" + "---:|" * len(mine) + ("---|" if many else "")]
    by_client = {c: {(t, s, a): _rate(r) for t, s, a, cl, r in results if cl == c} for c in mine}
    for target, size, acks, client, r in results:
        rate = _rate(r)
        ratios = [by_client[c].get((target, size, acks), float("nan")) / rate if rate == rate and rate
                  else float("nan") for c in mine]
        rss = f"{r['peak_rss_mb']:.0f}" if "peak_rss_mb" in r else "-"
        rounds = (" " + ", ".join(f"{x:,.0f}" for x in r.get("rates", ())) + " |") if many else ""
        lines.append(f"| {target} | {size} B | {acks} | {client} | {rate:,.0f} | {rate * size / 1e6:.1f} | {rss} | "
                     + "".join(f"{_ratio(x)} | " for x in ratios) + rounds.lstrip())
    return "\n".join(lines)

if __name__ == "__main__":
    main()
