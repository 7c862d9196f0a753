"""Columnar decoder micro-benchmark: ``poll_arrow``'s vectorized decoder vs the record decoder, per record.

  .venv/bin/python bench/arrow_decoder.py [--records N] [--repeat R]

One record batch per shape, built with strom's ``MemoryRecordsBuilder`` and decoded in a loop in this process:
  spark-topic  keys k0, k2, .. k998 cycling, 100-byte values, one timestamp (the Spark benchmark's batches)
  fixed        no keys, 100-byte values (the consumer benchmark's batches)
  vary         keys k<i>, values of 50-150 random bytes
For each shape: ns per record of ``decode_batch_columns`` (the vectorized path) and of the record decoder
made columns (``records_to_columns(decode_records(...))``, what the columnar path falls back to), best of
--repeat timings, and the ratio.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from strom.consumer.internals.arrow_decoder import decode_batch_columns, records_to_columns  # noqa: E402
from strom.record.batch import RecordBatch, decode_records  # noqa: E402
from strom.record.builder import MemoryRecordsBuilder  # noqa: E402
from strom.record.header import HEADER_SIZE  # noqa: E402

TS = 1_700_000_000_000


def build(shape: str, n: int) -> bytes:
    rng = random.Random(1)
    payload = os.urandom(100)
    b = MemoryRecordsBuilder()
    for i in range(n):
        if shape == "spark-topic":
            b.append(TS, b"k%d" % (2 * i % 1000), payload)
        elif shape == "fixed":
            b.append(TS, None, payload)
        else:
            b.append(TS, b"k%d" % i, os.urandom(rng.randint(50, 150)))
    return bytes(b.build())


def best_ns(fn, n: int, repeat: int) -> float:  # type: ignore[no-untyped-def]
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(20):
            fn()
        best = min(best, (time.perf_counter() - t0) / 20)
    return best / n * 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=8775, help="records per batch")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    print("| shape | vectorized ns/record | record decoder ns/record | ratio |\n|---|---:|---:|---:|")
    for shape in ("spark-topic", "fixed", "vary"):
        data = build(shape, args.records)
        h = RecordBatch(data).header
        a = (data, HEADER_SIZE, len(data), h.records_count, 0, h.base_timestamp)
        fast = best_ns(lambda a=a: decode_batch_columns(*a), h.records_count, args.repeat)
        slow = best_ns(lambda a=a: records_to_columns(decode_records(*a), 0), h.records_count, args.repeat)
        print(f"| {shape} | {fast:.0f} | {slow:.0f} | {slow / fast:.1f}x |")


if __name__ == "__main__":
    main()
