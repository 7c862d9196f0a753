"""Producer accumulator benchmark: strom's ``RecordAccumulator.append`` beside kafka-python's, in one run.

  .venv/bin/python bench/accumulator.py [--records N] [--rounds R]

Single-threaded appends of N records with 100-byte values and no key, to one partition and spread over 100
partitions, into a fresh accumulator each round (batch.size 16384, no compression, linger 0, 64 MiB buffer for
strom). This is the part of ``send()`` that stays after serialization and partitioning (DESIGN's producer hot
path). Each round runs both clients one after the other; the best of R rounds is reported with strom's ratio.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

VALUE = b"v" * 100


def strom_appends(records: int, partitions: int) -> float:
    from strom.common.structs import TopicPartition
    from strom.producer.internals.buffer_pool import BufferPool
    from strom.producer.internals.record_accumulator import RecordAccumulator
    from strom.testing.mock_time import MockTime

    clock = MockTime()
    pool = BufferPool(64 * 1024 * 1024, 16384, time=clock)
    acc = RecordAccumulator(16384, 0, 0, 100, 120_000, pool, clock)
    tps = [TopicPartition("bench", p) for p in range(partitions)]
    now = clock.milliseconds()
    append = acc.append
    started = time.perf_counter()
    for i in range(records):
        append(tps[i % partitions], now, None, VALUE, None, None, 1000, False, now)
    return records / (time.perf_counter() - started)


def kafka_python_appends(records: int, partitions: int) -> float:
    from kafka.producer.record_accumulator import RecordAccumulator
    from kafka.structs import TopicPartition

    acc = RecordAccumulator(batch_size=16384)
    tps = [TopicPartition("bench", p) for p in range(partitions)]
    now = time.time()
    ts = int(now * 1000)
    append = acc.append
    started = time.perf_counter()
    for i in range(records):
        append(tps[i % partitions], ts, None, VALUE, [], now=now)
    return records / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"RecordAccumulator.append, {args.records:,} × 100 B values, no key, best of {args.rounds} rounds")
    print(f"{'partitions':>10} | {'strom appends/s':>16} | {'kafka-python appends/s':>22} | strom / kafka-python")
    for partitions in (1, 100):
        best = {"strom": 0.0, "kafka-python": 0.0}
        for _ in range(args.rounds):
            best["strom"] = max(best["strom"], strom_appends(args.records, partitions))
            best["kafka-python"] = max(best["kafka-python"], kafka_python_appends(args.records, partitions))
        print(f"{partitions:>10} | {best['strom']:>16,.0f} | {best['kafka-python']:>22,.0f} | "
              f"{best['strom'] / best['kafka-python']:.2f}×")


if __name__ == "__main__":
    main()
