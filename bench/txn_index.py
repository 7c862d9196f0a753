"""read_committed Fetch cost of the aborted-transaction index: ``TransactionIndex.collect_aborted`` at the tail of a
partition that has seen many aborted transactions, beside the linear scan it replaced, in one run.

  .venv/bin/python bench/txn_index.py [--entries N] [--calls C]

N aborted transactions (markers 10 offsets apart) are loaded; each call asks for the ones overlapping the last
1,000 offsets, as a consumer reading at the log end does on every fetch.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from strom.storage.transaction_index import AbortedTxn, TransactionIndex  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        idx = TransactionIndex(d)
        for i in range(args.entries):
            idx.append(AbortedTxn(i % 50, i * 10, i * 10 + 5, i * 10))
        end = args.entries * 10
        results = {}
        for name, lookup in (("bisect (strom)", idx.collect_aborted),
                             ("linear scan", lambda f, u: [e for e in idx.entries
                                                           if e.last_offset >= f and e.first_offset < u])):
            t = time.perf_counter()
            for _ in range(args.calls):
                found = lookup(end - 1_000, end)
            results[name] = (time.perf_counter() - t) / args.calls * 1e6
            print(f"{name:15s} {results[name]:10.1f} us per fetch ({len(found)} aborted transactions found)")
        print(f"ratio linear / bisect: {results['linear scan'] / results['bisect (strom)']:.0f}x")


if __name__ == "__main__":
    main()
