"""Storage throughput: append (1 KiB records in 16 KiB batches, no fsync) and sequential read, in MB/s.

Run: ``.venv/bin/python -m tests.unit.storage.bench_storage [total_mib]`` (not collected by pytest). Belongs in
``bench/`` once the lead moves it there.
"""

from __future__ import annotations

import os
import struct
import sys
import tempfile
import time

from strom.storage.log import Log
from strom.storage.log_config import LogConfig

from ._batches import build_batch


def main(total_mib: int = 256) -> None:
    batch = build_batch([os.urandom(1000) for _ in range(16)])  # 16 records of ~1 KiB -> ~16.3 KiB batch
    n = total_mib * 1024 * 1024 // len(batch)
    with tempfile.TemporaryDirectory() as d:
        lg = Log(os.path.join(d, "bench-0"), LogConfig.from_props({"segment.bytes": str(256 * 1024 * 1024)}))
        t0 = time.perf_counter()
        for _ in range(n):
            lg.append_as_leader(batch)
        t1 = time.perf_counter()
        lg.update_high_watermark(lg.log_end_offset)
        total = n * len(batch)
        print(
            f"append: {n} batches of {len(batch)} B, {total / (t1 - t0) / 1e6:.0f} MB/s, "
            f"{n / (t1 - t0):.0f} batches/s, {n * 16 / (t1 - t0):.0f} records/s, {lg.num_segments} segments"
        )
        for max_bytes in (1024 * 1024, 64 * 1024):
            offset, read_bytes, reads = 0, 0, 0
            t0 = time.perf_counter()
            hw = lg.high_watermark
            while offset < hw:
                data = lg.read(offset, max_bytes, max_offset=hw).records
                pos = 0
                while pos < len(data):  # find the next fetch offset like a client would
                    base, length = struct.unpack_from(">qi", data, pos)
                    last = base + struct.unpack_from(">i", data, pos + 23)[0]
                    pos += length + 12
                offset = last + 1
                read_bytes += len(data)
                reads += 1
            t1 = time.perf_counter()
            print(
                f"read (max_bytes={max_bytes // 1024} KiB): {read_bytes / (t1 - t0) / 1e6:.0f} MB/s, "
                f"{reads / (t1 - t0):.0f} reads/s"
            )
        t0 = time.perf_counter()
        lg.flush()
        print(f"final fsync of {total / 1e6:.0f} MB: {time.perf_counter() - t0:.2f} s")
        lg.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 256)
