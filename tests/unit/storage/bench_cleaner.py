"""Log cleaner throughput: compact a log of 100-byte records over a small key space, report MB/s.

Run: ``.venv/bin/python -m tests.unit.storage.bench_cleaner [total_mib] [keys]`` (not collected by pytest).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from strom.common.structs import TopicPartition
from strom.storage.log import Log
from strom.storage.log_cleaner import CleanerConfig, LogCleaner
from strom.storage.log_config import LogConfig

from ._batches import build_batch


def main(total_mib: int = 32, keys: int = 10_000) -> None:
    per_batch = 100
    with tempfile.TemporaryDirectory() as d:
        config = LogConfig.from_props({"cleanup.policy": "compact", "segment.bytes": str(8 << 20)})
        lg = Log(os.path.join(d, "bench-0"), config)
        n = 0
        while lg.size_in_bytes < total_mib << 20:
            ks = [b"key-%08d" % ((n + i) % keys) for i in range(per_batch)]
            lg.append_as_leader(build_batch([b"v" * 80] * per_batch, keys=ks))
            n += per_batch
        lg.roll()
        lg.update_high_watermark(lg.log_end_offset)
        size = lg.size_in_bytes
        cleaner = LogCleaner(CleanerConfig(enable_cleaner=False), [d], lambda: [(TopicPartition("bench", 0), lg)])
        t0 = time.perf_counter()
        stats = cleaner.clean_once()
        elapsed = time.perf_counter() - t0
        assert stats is not None
        print(
            f"cleaned {size / 1e6:.1f} MB ({n} records, {keys} keys) in {elapsed:.2f} s: "
            f"{size / 1e6 / elapsed:.1f} MB/s of log, {n / elapsed:.0f} records/s; "
            f"{lg.size_in_bytes / 1e6:.2f} MB left, {stats.records_written} records kept"
        )
        lg.close()


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
