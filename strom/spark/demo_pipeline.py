"""The clickstream pipeline behind ``make demo`` and ``strom pipeline demo``.

1. a generator produces JSON click events ``{"user", "page", "ts"}`` with strom's ``KafkaProducer`` into the
   multi-partition topic ``clicks`` (event time runs faster than the wall clock, so one-minute windows close
   within seconds);
2. one Structured Streaming query reads ``clicks`` with ``format("strom")``, parses the JSON, and counts page
   views per one-minute event-time window with a watermark, in append mode — each window is emitted once,
   when the watermark passes its end; a second query over the same stream writes the same counts to Parquet;
   the first writes them as JSON records to the topic ``page-counts`` with ``format("strom")``;
3. when the generator is done and the queries have read everything, it sends one closing heartbeat event
   (no user, no page) that moves event time past the last window, so the last windows close too (the
   heartbeat's own window never closes, so it is never counted);
4. the results are read back from ``page-counts`` with a batch ``format("strom")`` read and from Parquet,
   compared with a plain-Python count of the generated events, and printed as a table.

This module is the pipeline only; :mod:`strom.demo` adds the embedded broker and the command-line surface.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from strom.admin import AdminClient, NewTopic
from strom.common.structs import TopicPartition
from strom.producer.kafka_producer import KafkaProducer

__all__ = ["DemoConfig", "DemoResult", "generate_events", "expected_counts", "run_pipeline", "format_table"]

PAGES = ("/home", "/search", "/product", "/cart", "/checkout")
_PAGE_WEIGHTS = (30, 25, 25, 12, 8)
EVENT_SCHEMA = "user string, page string, ts timestamp"
WindowKey = tuple[int, str]  # (window start in epoch ms, page)


@dataclass
class DemoConfig:
    events: int = 3000
    users: int = 40
    partitions: int = 3
    window_s: int = 60
    watermark_s: int = 60
    event_span_s: int = 600
    events_per_s: float | None = 150.0  # generator pacing; None = as fast as possible
    trigger_s: float = 2.0
    max_offsets_per_trigger: int = 1000
    base_ms: int = 1_735_732_800_000  # 2025-01-01T12:00:00Z
    seed: int = 7
    clicks_topic: str = "clicks"
    counts_topic: str = "page-counts"
    timeout_s: float = 240.0


@dataclass
class DemoResult:
    expected: dict[WindowKey, int]
    from_topic: dict[WindowKey, int]
    from_parquet: dict[WindowKey, int]
    batches: int
    seconds: float

    @property
    def ok(self) -> bool:
        return self.expected == self.from_topic == self.from_parquet


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def generate_events(cfg: DemoConfig) -> list[dict[str, Any]]:
    """Deterministic clicks spread over ``event_span_s`` of event time (slightly out of order, like real ones)."""
    rng = random.Random(cfg.seed)
    step = cfg.event_span_s * 1000 / cfg.events
    out = []
    for i in range(cfg.events):
        ts = cfg.base_ms + int(i * step) + rng.randint(-1500, 1500)
        out.append({"user": f"u{rng.randrange(cfg.users):03d}", "page": rng.choices(PAGES, _PAGE_WEIGHTS)[0],
                    "ts": _iso(max(ts, cfg.base_ms))})
    return out


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def expected_counts(events: list[dict[str, Any]], window_s: int) -> dict[WindowKey, int]:
    """The same aggregate in plain Python: views per (tumbling window start, page)."""
    w = window_s * 1000
    return dict(Counter((_ms(e["ts"]) // w * w, e["page"]) for e in events if e["page"] is not None))


def _ensure_topics(bootstrap: str, cfg: DemoConfig) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        existing = admin.list_topics().names().result(30)
        # On a cluster the demo's topics are replicated (up to 3 copies, as the documents set them up).
        brokers = len(admin.describe_cluster().nodes().result(30))
        rf = min(3, brokers)
        new = [NewTopic(t, n, rf) for t, n in ((cfg.clicks_topic, cfg.partitions), (cfg.counts_topic, 1))
               if t not in existing]
        if new:
            admin.create_topics(new).all().result(30)
    finally:
        admin.close()


def _produce(bootstrap: str, topic: str, events: list[dict[str, Any]], per_s: float | None,
             say: Callable[[str], None]) -> None:
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "key.serializer": "string",
                              "value.serializer": "string", "linger.ms": "5", "client.id": "demo-generator"})
    try:
        t0, chunk = time.monotonic(), max(1, len(events) // 10)
        for i, e in enumerate(events):
            producer.send(topic, key=e["user"], value=json.dumps(e))
            if per_s and i % 50 == 49:
                ahead = (i + 1) / per_s - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)
            if i % chunk == chunk - 1:
                say(f"generator: {i + 1} events produced")
        producer.flush()
    finally:
        producer.close()


def _end_offsets(bootstrap: str, topic: str) -> dict[str, dict[str, int]]:
    """The topic's end offsets in the JSON form of ``startingOffsets`` and of the checkpointed offsets."""
    from strom.consumer.kafka_consumer import KafkaConsumer

    c = KafkaConsumer({"bootstrap.servers": bootstrap, "key.deserializer": "bytes", "value.deserializer": "bytes"})
    try:
        tps = [TopicPartition(topic, p.partition) for p in c.partitions_for(topic, timeout=30)]
        ends = c.end_offsets(tps, timeout=30)
        return {topic: {str(tp.partition): off for tp, off in sorted(ends.items())}}
    finally:
        c.close()


def _start_queries(spark: Any, bootstrap: str, cfg: DemoConfig, workdir: Path,
                   start: dict[str, dict[str, int]]) -> tuple[Any, Any]:
    from pyspark.sql import functions as F

    clicks = (spark.readStream.format("strom").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", cfg.clicks_topic).option("startingOffsets", json.dumps(start))
              .option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger)).load())
    events = clicks.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e")).select("e.*")
    counts = (events.withWatermark("ts", f"{cfg.watermark_s} seconds")
              .groupBy(F.window("ts", f"{cfg.window_s} seconds"), "page").count()
              .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                      "page", F.col("count").alias("views")))
    fmt = "yyyy-MM-dd'T'HH:mm:ss'Z'"
    as_records = counts.select(
        F.concat_ws("|", F.date_format("window_start", fmt), "page").alias("key"),
        F.to_json(F.struct(F.date_format("window_start", fmt).alias("window_start"),
                           F.date_format("window_end", fmt).alias("window_end"), "page", "views")).alias("value"))
    trigger = {"processingTime": f"{int(cfg.trigger_s * 1000)} milliseconds"}
    to_topic = (as_records.writeStream.queryName("page_counts_to_strom").format("strom")
                .option("kafka.bootstrap.servers", bootstrap).option("topic", cfg.counts_topic)
                .option("checkpointLocation", str(workdir / "checkpoints" / "topic")).outputMode("append")
                .trigger(**trigger).start())
    to_parquet = (counts.writeStream.queryName("page_counts_to_parquet").format("parquet")
                  .option("path", str(workdir / "page_counts.parquet"))
                  .option("checkpointLocation", str(workdir / "checkpoints" / "parquet")).outputMode("append")
                  .trigger(**trigger).start())
    return to_topic, to_parquet


class _ProgressPrinter:
    """Prints each new micro-batch of the queries (from ``recentProgress``)."""

    def __init__(self, queries: list[Any], say: Callable[[str], None]) -> None:
        self.queries, self.say = queries, say
        self.seen: dict[str, int] = {}
        self.batches = 0

    def poll(self) -> None:
        for q in self.queries:
            for p in q.recentProgress:
                if p["batchId"] <= self.seen.get(q.name, -1):
                    continue
                self.seen[q.name] = p["batchId"]
                self.batches += 1
                rows = p["numInputRows"]
                out = p["sink"].get("numOutputRows", -1)
                wm = p.get("eventTime", {}).get("watermark", "")
                self.say(f"  [{q.name}] batch {p['batchId']}: {rows} events in"
                         + (f", {out} window counts out" if out >= 0 else "")
                         + (f", watermark {wm[11:19]}" if wm and not wm.startswith("1970") else ""))


def _source_end(q: Any) -> dict[str, Any] | None:
    p = q.lastProgress
    if not p or not p["sources"]:
        return None
    end = p["sources"][0]["endOffset"]
    return json.loads(end) if isinstance(end, str) else end


def _watermark_ms(q: Any) -> int:
    p = q.lastProgress
    wm = (p or {}).get("eventTime", {}).get("watermark")
    return _ms(wm) if wm else 0


def _wait(cond: Callable[[], bool], printer: _ProgressPrinter, queries: list[Any], deadline: float,
          what: str) -> None:
    while not cond():
        printer.poll()
        for q in queries:
            if q.exception() is not None:
                raise RuntimeError(f"query {q.name} failed: {q.exception()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.25)
    printer.poll()


def _read_results(spark: Any, bootstrap: str, cfg: DemoConfig, workdir: Path,
                  start: dict[str, dict[str, int]]) -> tuple[dict, dict]:
    rows = (spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", cfg.counts_topic).option("startingOffsets", json.dumps(start)).load().selectExpr("cast(value as string) as v").collect())
    from_topic: dict[WindowKey, int] = {}
    for r in rows:
        rec = json.loads(r.v)
        from_topic[(_ms(rec["window_start"]), rec["page"])] = rec["views"]
    pq = spark.read.parquet(str(workdir / "page_counts.parquet")).collect()
    from_parquet = {(int(r.window_start.timestamp() * 1000), r.page): r.views for r in pq}
    return from_topic, from_parquet


def run_pipeline(spark: Any, bootstrap: str, cfg: DemoConfig, workdir: Path,
                 say: Callable[[str], None] = print) -> DemoResult:
    """Run the whole pipeline against ``bootstrap`` with an existing session (``strom.spark`` registered)."""
    t0 = time.monotonic()
    deadline = t0 + cfg.timeout_s
    _ensure_topics(bootstrap, cfg)
    # Start after whatever the topics already hold (a rerun, or a shared cluster): this run's data only.
    clicks_start = _end_offsets(bootstrap, cfg.clicks_topic)
    counts_start = _end_offsets(bootstrap, cfg.counts_topic)
    events = generate_events(cfg)
    expected = expected_counts(events, cfg.window_s)
    say(f"starting the streaming queries (reading '{cfg.clicks_topic}', writing '{cfg.counts_topic}' and Parquet)")
    queries = list(_start_queries(spark, bootstrap, cfg, workdir, clicks_start))
    printer = _ProgressPrinter(queries, say)
    try:
        say(f"generator: producing {len(events)} click events into '{cfg.clicks_topic}' "
            f"({cfg.partitions} partitions)")
        import threading

        failure: list[BaseException] = []

        def generate() -> None:
            try:
                _produce(bootstrap, cfg.clicks_topic, events, cfg.events_per_s, say)
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                failure.append(e)

        gen = threading.Thread(target=generate, name="demo-generator", daemon=True)
        gen.start()
        _wait(lambda: not gen.is_alive(), printer, queries, deadline, "the generator")
        if failure:
            raise failure[0]
        target = _end_offsets(bootstrap, cfg.clicks_topic)
        _wait(lambda: all(_source_end(q) == target for q in queries), printer, queries, deadline,
              "the queries to read every event")
        last_end = max(k[0] for k in expected) + cfg.window_s * 1000
        heartbeat = {"user": None, "page": None, "ts": _iso(last_end + cfg.watermark_s * 1000 + 1000)}
        say("generator: closing heartbeat sent (moves event time past the last window)")
        _produce(bootstrap, cfg.clicks_topic, [heartbeat], None, lambda _m: None)
        _wait(lambda: all(_watermark_ms(q) >= last_end for q in queries), printer, queries, deadline,
              "the last windows to close")
    finally:
        for q in queries:
            q.stop()
    from_topic, from_parquet = _read_results(spark, bootstrap, cfg, workdir, counts_start)
    return DemoResult(expected, from_topic, from_parquet, printer.batches, time.monotonic() - t0)


def format_table(counts: dict[WindowKey, int], window_s: int = 60) -> str:
    """Windows as rows, pages as columns, plus totals."""
    windows = sorted({w for w, _ in counts})
    head = f"{'window (UTC)':<13}" + "".join(f"{p:>10}" for p in PAGES) + f"{'total':>8}"
    lines = [head, "-" * len(head)]
    for w in windows:
        start = datetime.fromtimestamp(w / 1000, UTC)
        cells = [counts.get((w, p), 0) for p in PAGES]
        lines.append(f"{start:%H:%M}-{datetime.fromtimestamp(w / 1000 + window_s, UTC):%H:%M}  "
                     + "".join(f"{c:>10}" for c in cells) + f"{sum(cells):>8}")
    totals = [sum(v for (_, p), v in counts.items() if p == page) for page in PAGES]
    lines.append("-" * len(head))
    lines.append(f"{'total':<13}" + "".join(f"{c:>10}" for c in totals) + f"{sum(totals):>8}")
    return "\n".join(lines)
