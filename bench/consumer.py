"""Consumer benchmark: strom vs kafka-python vs aiokafka vs confluent-kafka, in one run.

  .venv/bin/python bench/consumer.py [--records N] [--partitions P] [--rounds R] [--clients strom,kafka-python,...]
                                     [--arrow-max-records N] [--headers H]

One strom broker (subprocess, ``group.initial.rebalance.delay.ms=0``) holds N pre-produced 100-byte records
(confluent-kafka producer, no compression) in a topic with P partitions. Each client then runs in its own
subprocess, one after the other, as a group member (fresh group id, ``auto.offset.reset=earliest``, no
auto-commit, ``max.poll.records``-style limit 500 where the client has one) and reads every record, touching
each value (sum of the value lengths is checked). The clients take turns for R rounds (the machine is shared
and noisy: the median of the rounds is reported). Per client: steady-state records/s (clock from the first
record to the last), total records/s (clock from creating the consumer to the last record, so connecting and the
group join are included; importing the client library is not), CPU seconds of the consumer process over the same
span and records per CPU second, and the seconds ``close`` took after the last record (not counted above: strom's
consumer, as Java's, closes its fetch sessions and so waits for the fetch already parked at the broker, up to
``fetch.max.wait.ms``); then strom's ratios. ``strom-arrow`` is strom's columnar path (``poll_arrow``, up to --arrow-max-records
rows per call, default 500 as the others; values touched as one column). ``--headers H`` gives every record H
headers (``trace-id-<i>``: 16 random bytes), as tracing libraries set them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

VALUE_SIZE = 100
CLIENTS = ("strom", "strom-arrow", "strom-aio", "kafka-python", "aiokafka", "confluent-kafka")
MAX_RECORDS_ARROW = 500

# (first record's perf_counter, (perf_counter, process_time) after the last record, records, value bytes)
Run = tuple[float | None, tuple[float, float], int, int]


def _mark() -> tuple[float, float]:
    """Wall and CPU clocks when the last record has been read: closing the client (leaving the group, closing
    fetch sessions) is not part of reading."""
    return time.perf_counter(), time.process_time()


def produce(bootstrap: str, topic: str, partitions: int, n: int, headers: int = 0) -> float:
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "batch.size": 1_000_000,
                     "queue.buffering.max.kbytes": 1_048_576, "enable.idempotence": False})
    payload = os.urandom(VALUE_SIZE)
    record_headers = [(f"trace-id-{i}", os.urandom(16)) for i in range(headers)] or None
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, payload, partition=i % partitions, headers=record_headers)
                break
            except BufferError:
                p.poll(0.001)
    assert p.flush(120) == 0
    return time.perf_counter() - t0


# --------------------------------------------------------------------------------------------- clients


def run_strom(bootstrap: str, topic: str, n: int) -> Run:
    from strom.consumer import KafkaConsumer

    c = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": f"bench-strom-{time.time()}"},
                      key_deserializer="bytes", value_deserializer="bytes", auto_offset_reset="earliest",
                      enable_auto_commit=False)
    c.subscribe([topic])
    got = nbytes = 0
    first = None
    deadline = time.monotonic() + 300
    while got < n and time.monotonic() < deadline:
        records = c.poll(1.0)
        if records and first is None:
            first = time.perf_counter()
        for r in records:
            nbytes += len(r.value)
        got += len(records)
    last = _mark()
    c.close()
    return first, last, got, nbytes


def run_strom_arrow(bootstrap: str, topic: str, n: int) -> Run:
    """strom's columnar path: ``poll_arrow`` (same consumer settings, 500 records per poll; whole value
    column summed with pyarrow)."""
    import pyarrow.compute as pc

    from strom.consumer import KafkaConsumer

    c = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": f"bench-strom-arrow-{time.time()}"},
                      key_deserializer="bytes", value_deserializer="bytes", auto_offset_reset="earliest",
                      enable_auto_commit=False)
    c.subscribe([topic])
    got = nbytes = 0
    first = None
    deadline = time.monotonic() + 300
    while got < n and time.monotonic() < deadline:
        table = c.poll_arrow(1.0, max_records=MAX_RECORDS_ARROW)
        if table.num_rows and first is None:
            first = time.perf_counter()
        if table.num_rows:
            nbytes += pc.sum(pc.binary_length(table.column("value"))).as_py()
        got += table.num_rows
    last = _mark()
    c.close()
    return first, last, got, nbytes


def run_kafka_python(bootstrap: str, topic: str, n: int) -> Run:
    import kafka

    c = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"bench-kp-{time.time()}",
                            auto_offset_reset="earliest", enable_auto_commit=False)
    got = nbytes = 0
    first = None
    deadline = time.monotonic() + 300
    while got < n and time.monotonic() < deadline:
        batch = c.poll(1000, max_records=500)
        if batch and first is None:
            first = time.perf_counter()
        for records in batch.values():
            got += len(records)
            for r in records:
                nbytes += len(r.value)
    last = _mark()
    c.close()
    return first, last, got, nbytes


def run_aiokafka(bootstrap: str, topic: str, n: int) -> Run:
    import asyncio

    import aiokafka

    async def main() -> Run:
        c = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"bench-aio-{time.time()}",
                                      auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        got = nbytes = 0
        first = None
        deadline = time.monotonic() + 300
        while got < n and time.monotonic() < deadline:
            batch = await c.getmany(timeout_ms=1000, max_records=500)
            if batch and first is None:
                first = time.perf_counter()
            for records in batch.values():
                got += len(records)
                for r in records:
                    nbytes += len(r.value)
        last = _mark()
        await c.stop()
        return first, last, got, nbytes

    return asyncio.run(main())


def run_strom_aio(bootstrap: str, topic: str, n: int) -> Run:
    """``strom.aio.AsyncKafkaConsumer`` used as aiokafka's ``getmany``: ``await poll`` (500 records a poll)."""
    import asyncio

    from strom.aio import AsyncKafkaConsumer

    async def main() -> Run:
        c = AsyncKafkaConsumer({"bootstrap.servers": bootstrap, "group.id": f"bench-strom-aio-{time.time()}"},
                               key_deserializer="bytes", value_deserializer="bytes", auto_offset_reset="earliest",
                               enable_auto_commit=False)
        await c.subscribe([topic])
        got = nbytes = 0
        first = None
        deadline = time.monotonic() + 300
        while got < n and time.monotonic() < deadline:
            records = await c.poll(1.0)
            if records and first is None:
                first = time.perf_counter()
            for r in records:
                nbytes += len(r.value)
            got += len(records)
        last = _mark()
        await c.close()
        return first, last, got, nbytes

    return asyncio.run(main())


def run_confluent(bootstrap: str, topic: str, n: int) -> Run:
    import confluent_kafka as ck

    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-ck-{time.time()}",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got = nbytes = 0
    first = None
    deadline = time.monotonic() + 300
    while got < n and time.monotonic() < deadline:
        for m in c.consume(500, 1.0):
            if m.error():
                continue
            if first is None:
                first = time.perf_counter()
            got += 1
            nbytes += len(m.value())
    last = _mark()
    c.close()
    return first, last, got, nbytes


RUNNERS = {"strom": run_strom, "strom-arrow": run_strom_arrow, "strom-aio": run_strom_aio,
           "kafka-python": run_kafka_python, "aiokafka": run_aiokafka, "confluent-kafka": run_confluent}


IMPORTS = {"strom": "strom.consumer", "strom-arrow": "strom.consumer.internals.arrow_decoder", "strom-aio": "strom.aio",
           "kafka-python": "kafka", "aiokafka": "aiokafka", "confluent-kafka": "confluent_kafka"}


def child(client: str, bootstrap: str, topic: str, n: int) -> None:
    """Run one client (in a subprocess) and print one JSON line. Importing the client is not timed."""
    import importlib

    importlib.import_module(IMPORTS[client])
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    first, (last, last_cpu), got, nbytes = RUNNERS[client](bootstrap, topic, n)
    end = time.perf_counter()
    print(json.dumps({"client": client, "records": got, "bytes": nbytes, "total_s": last - t0,
                      "steady_s": last - first if first else None, "cpu_s": last_cpu - cpu0,
                      "close_s": end - last}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--arrow-max-records", type=int, default=500)
    parser.add_argument("--headers", type=int, default=0, help="headers on every record")
    parser.add_argument("--child", nargs=3, metavar=("CLIENT", "BOOTSTRAP", "TOPIC"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    global MAX_RECORDS_ARROW
    MAX_RECORDS_ARROW = args.arrow_max_records
    if args.child:
        child(args.child[0], args.child[1], args.child[2], args.records)
        return
    import statistics

    from strom.broker_process import BrokerProcess

    runs: dict[str, list[dict]] = {}  # type: ignore[type-arg]
    clients = args.clients.split(",")
    with BrokerProcess(overrides={"group.initial.rebalance.delay.ms": "0"}) as broker:
        topic = "bench-consumer"
        dt = produce(broker.bootstrap, topic, args.partitions, args.records, args.headers)
        print(f"produced {args.records:,} x {VALUE_SIZE} B records ({args.headers} headers each) into "
              f"{args.partitions} partitions in {dt:.1f}s")
        for _round in range(args.rounds):
            for client in clients:
                out = subprocess.run([sys.executable, __file__, "--records", str(args.records),
                                      "--arrow-max-records", str(args.arrow_max_records), "--child", client,
                                      broker.bootstrap, topic], capture_output=True, text=True, timeout=600)
                lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
                if out.returncode != 0 or not lines:
                    print(f"{client}: failed\n{out.stderr[-2000:]}")
                    continue
                r = json.loads(lines[-1])
                if r["records"] != args.records or r["bytes"] != args.records * VALUE_SIZE:
                    print(f"{client}: incomplete ({r['records']:,} records, {r['bytes']:,} bytes)")
                    continue
                runs.setdefault(client, []).append(r)
    results = {}
    for client, rs in runs.items():
        results[client] = {
            "steady": statistics.median(r["records"] / r["steady_s"] for r in rs),
            "total": statistics.median(r["records"] / r["total_s"] for r in rs),
            "cpu": statistics.median(r["cpu_s"] for r in rs),
            "per_cpu": statistics.median(r["records"] / r["cpu_s"] for r in rs),
            "all_steady": [round(r["records"] / r["steady_s"]) for r in rs],
            "close": statistics.median(r["close_s"] for r in rs),
        }
    print()
    print(f"medians of {args.rounds} rounds")
    print("| client | records/s (steady) | records/s (incl. join) | CPU s | records per CPU s | close s |")
    print("|---|---:|---:|---:|---:|---:|")
    for client, r in results.items():
        print(f"| {client} | {r['steady']:,.0f} | {r['total']:,.0f} | {r['cpu']:.2f} | {r['per_cpu']:,.0f} | {r['close']:.2f} |")
    for client, r in results.items():
        print(f"{client} steady rounds: {r['all_steady']}")
    for mine in ("strom", "strom-arrow"):
        if mine not in results:
            continue
        s = results[mine]
        for other in ("kafka-python", "aiokafka", "confluent-kafka"):
            if other in results:
                o = results[other]
                print(f"{mine} / {other}: {s['steady'] / o['steady']:.2f}x steady, {s['total'] / o['total']:.2f}x "
                      f"incl. join, {s['per_cpu'] / o['per_cpu']:.2f}x records per CPU second")


if __name__ == "__main__":
    main()
