"""Micro-benchmark of the record layer (not a test; run ``.venv/bin/python -m tests.unit.record.bench_record_layer``).

Measures ``MemoryRecordsBuilder.append`` throughput (10-byte keys, 100-byte values, batches of up to
16 KiB like the producer's default ``batch.size``) uncompressed and with lz4 (build/compress included),
and record decoding throughput of ``RecordBatch.records()`` over the same batches.
"""

from __future__ import annotations

import os
import sys
import time

from strom.record import CompressionType, MemoryRecordsBuilder, RecordBatch


def bench(
    codec: CompressionType, n: int = 200_000, batch_size: int = 16384
) -> tuple[float, float, float, float]:
    keys = [b"key-%06d" % (i % 100_000) for i in range(1000)]
    value = os.urandom(50) + b"x" * 50
    ts = 1_700_000_000_000
    batches: list[bytes] = []
    t0 = time.perf_counter()
    b = MemoryRecordsBuilder(codec, write_limit=batch_size)
    for i in range(n):
        k = keys[i % 1000]
        if not b.has_room_for(ts, k, value):
            batches.append(b.build())
            b = MemoryRecordsBuilder(codec, write_limit=batch_size)
        b.append(ts, k, value)
    batches.append(b.build())
    t1 = time.perf_counter()
    # append only: same batch boundaries, no has_room_for, no build
    per_batch = RecordBatch(batches[0]).records_count
    t2 = time.perf_counter()
    for start in range(0, n, per_batch):
        append = MemoryRecordsBuilder(codec, write_limit=batch_size).append
        for i in range(start, min(n, start + per_batch)):
            append(ts, keys[i % 1000], value)
    t3 = time.perf_counter()
    count = 0
    # try_append: the combined has_room_for + append
    t6 = time.perf_counter()
    b = MemoryRecordsBuilder(codec, write_limit=batch_size)
    built = 0
    for i in range(n):
        k = keys[i % 1000]
        if b.try_append(ts, k, value) < 0:
            b.build()
            built += 1
            b = MemoryRecordsBuilder(codec, write_limit=batch_size)
            b.append(ts, k, value)
    b.build()
    t7 = time.perf_counter()
    assert built + 1 == len(batches)
    t4 = time.perf_counter()
    for data in batches:
        count += len(RecordBatch(data).records())
    t5 = time.perf_counter()
    assert count == n
    return n / (t1 - t0), n / (t3 - t2), n / (t5 - t4), n / (t7 - t6)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    for codec in (
        CompressionType.NONE,
        CompressionType.LZ4,
        CompressionType.ZSTD,
        CompressionType.SNAPPY,
        CompressionType.GZIP,
    ):
        full, raw, dec, tri = bench(codec, n)
        print(
            f"{codec.config_name:7s} has_room_for+append+build {full:>10,.0f}/s  try_append+build {tri:>10,.0f}/s"
            f"  append only {raw:>10,.0f}/s  decode {dec:>10,.0f} records/s"
        )


if __name__ == "__main__":
    main()
