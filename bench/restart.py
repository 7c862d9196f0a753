"""Broker restart time with many partitions: how long a standalone strom broker takes from process start to serving
requests, after a clean shutdown and after kill -9 (log recovery), with ``--partitions`` partitions (default
10,000, in topics of 1,000) holding ``--records`` 100-byte records each.

Side by side: the same data dir restarted by this tree and, with ``--base-ref REF``, by the code of that revision
(exported with ``git archive`` into a temporary dir), alternating, ``--rounds`` times each.

Run: .venv/bin/python bench/restart.py [--partitions 10000 --records 10 --rounds 3 --base-ref REF]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from strom.broker_process import BrokerProcess, free_port  # noqa: E402
from strom.protocol.api_keys import ApiKey  # noqa: E402
from strom.protocol.messages.produce import ProduceRequest  # noqa: E402
from strom.record.builder import MemoryRecordsBuilder  # noqa: E402
from strom.testing.raw_client import RawClient  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from partitions import create_topics  # noqa: E402


def fill(data_dir: Path, partitions: int, records: int) -> None:
    b = BrokerProcess(data_dir=data_dir, port=free_port())
    b.start(timeout=600)
    try:
        with RawClient(b.bootstrap, timeout=600) as c:
            tps = create_topics(c, partitions)
            builder = MemoryRecordsBuilder()
            for _ in range(records):
                builder.append(int(time.time() * 1000), None, b"x" * 100)
            batch = builder.build()
            by_topic: dict[str, list[int]] = {}
            for t, p in tps:
                by_topic.setdefault(t, []).append(p)
            for t, ps in by_topic.items():
                c.request(ApiKey.PRODUCE, 9, ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[
                    ProduceRequest.TopicProduceData(name=t, partition_data=[
                        ProduceRequest.PartitionProduceData(index=p, records=batch) for p in ps])]))
    finally:
        b.stop(timeout=600)


def start_time(python_path: str | None, data_dir: Path, kill: bool) -> float:
    """Seconds from spawning the broker to its "ready" line; then stop it (kill -9 when ``kill``, so the next
    start recovers)."""
    env = dict(os.environ)
    if python_path:
        env["PYTHONPATH"] = python_path
    port = free_port()
    cmd = [sys.executable, "-m", "strom.cli.main", "broker", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
           "--override", f"log.dirs={data_dir}"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                            cwd=python_path or None)
    assert proc.stdout is not None
    for raw in proc.stdout:
        if b"ready on" in raw:
            break
    elapsed = time.perf_counter() - t0
    if kill:
        proc.send_signal(signal.SIGKILL)
    else:
        proc.send_signal(signal.SIGTERM)
    proc.wait(600)
    proc.stdout.close()
    return elapsed


def export(ref: str, target: Path) -> None:
    archive = subprocess.run(["git", "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    built = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=target,
                           capture_output=True)
    if built.returncode:
        print(f"(the C accelerator of {ref} did not build: its Python paths run)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--records", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--base-ref", default=None, help="a revision to compare with, side by side")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="strom-restart-") as tmp:
        data = Path(tmp) / "data"
        t0 = time.perf_counter()
        fill(data, args.partitions, args.records)
        print(f"{args.partitions} partitions x {args.records} records written in {time.perf_counter() - t0:.1f} s")
        trees: dict[str, str | None] = {"this tree": None}
        if args.base_ref:
            base = Path(tmp) / "base"
            base.mkdir()
            export(args.base_ref, base)
            trees[args.base_ref] = str(base)
        clean: dict[str, list[float]] = {k: [] for k in trees}
        crash: dict[str, list[float]] = {k: [] for k in trees}
        for _ in range(args.rounds):
            for name, path in trees.items():
                clean[name].append(start_time(path, data, kill=True))  # after a clean stop (the fill, or below)
                crash[name].append(start_time(path, data, kill=False))  # after the kill -9 above: recovery
        print(f"\nmedian seconds to serve requests, {args.rounds} rounds, {args.partitions} partitions")
        print(f"{'tree':<14} {'clean shutdown':>15} {'after kill -9':>15}")
        for name in trees:
            print(f"{name:<14} {statistics.median(clean[name]):>15.2f} {statistics.median(crash[name]):>15.2f}")
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
