"""``make demo``: a clickstream pipeline through an embedded strom broker and Spark Structured Streaming.

Starts a real strom broker subprocess on a free loopback port with a temporary data dir, starts a ``local[2]``
Spark session, and runs :mod:`strom.spark.demo_pipeline`: a generator produces JSON click events with strom's
producer into a three-partition topic; a streaming query reads them with ``format("strom")``, counts page
views per one-minute event-time window with a watermark, and writes the counts to a second topic (with
``format("strom")``) and to Parquet. The counts are then read back, checked against a plain-Python count of
the same events, and shown as a table. Everything is stopped and removed at the end, also on Ctrl-C.
``strom pipeline demo`` runs the same with options (``--bootstrap-server`` uses an existing cluster).
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["run_demo", "main"]


def _say(line: str) -> None:
    print(line, flush=True)


def run_demo(events: int = 3000, events_per_s: float | None = 150.0, bootstrap: str | None = None,
             workdir: str | None = None, say: Callable[[str], None] = _say) -> int:
    """Run the demo; returns the exit code (0 when the three result sets agree)."""
    from strom.spark.local import check_requirements

    problem = check_requirements()
    if problem:
        say(f"strom demo: cannot run the Spark pipeline: {problem}")
        return 2
    from strom.broker_process import BrokerProcess
    from strom.spark.demo_pipeline import DemoConfig, format_table, run_pipeline
    from strom.spark.local import local_session, stop_session

    t0 = time.monotonic()
    cfg = DemoConfig(events=events, events_per_s=events_per_s)
    with tempfile.TemporaryDirectory(prefix="strom-demo-") as tmp:
        work = Path(workdir) if workdir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        broker = None
        spark = None
        try:
            if bootstrap is None:
                say("strom demo: starting an embedded strom broker ...")
                broker = BrokerProcess(data_dir=Path(tmp) / "broker-data").start()
                bootstrap = broker.bootstrap
                say(f"broker ready on {bootstrap} (data in {broker.data_dir})")
            else:
                say(f"strom demo: using the cluster at {bootstrap}")
            say("starting Spark (local[2]); the JVM takes a few seconds ...")
            t_spark = time.monotonic()
            spark = local_session("strom-demo", say=say, log_dir=tmp)
            say(f"Spark {spark.version} ready in {time.monotonic() - t_spark:.1f}s")
            result = run_pipeline(spark, bootstrap, cfg, work, say=say)
            say("")
            say(f"page views per minute (read back from topic '{cfg.counts_topic}' with format(\"strom\")):")
            say(format_table(result.from_topic, cfg.window_s))
            say("")
            checks = [("topic 'page-counts'", result.from_topic), ("Parquet", result.from_parquet)]
            for name, got in checks:
                verdict = "matches" if got == result.expected else "DOES NOT match"
                say(f"{name}: {len(got)} window/page counts, {sum(got.values())} views — {verdict} the "
                    f"plain-Python count of the {cfg.events} generated events")
            say(f"pipeline: {result.batches} micro-batches in {result.seconds:.1f}s")
            return 0 if result.ok else 1
        except KeyboardInterrupt:
            say("interrupted; stopping ...")
            return 130
        finally:
            say("stopping Spark and the broker ...")
            if spark is not None:
                stop_session(spark)
            if broker is not None:
                broker.stop()
                broker.cleanup()
            say(f"done in {time.monotonic() - t0:.1f}s; nothing left running.")


def main() -> int:
    return run_demo()


if __name__ == "__main__":
    sys.exit(main())
