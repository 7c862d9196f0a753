"""The calling thread's CPU per ``KafkaProducer.send()``, with and without the C encoders, in one run.

  .venv/bin/python bench/send_path.py [--count N] [--size BYTES] [--headers H] [--rounds R]

One producer against a strom broker subprocess that is paused (SIGSTOP) while the records are sent, so the I/O
thread cannot take the GIL for responses and the figure is the calling thread's own work per record: partitioning,
the accumulator, the batch and the record's encoding. ``buffer.memory`` is large enough for every record of a
round; the broker resumes and the producer flushes between rounds. Variants alternate round by round (the order
reversed every other round): ``c`` as installed (``strom/record/_fastencode.c``: records written into the batch's
buffer, headers given as plain pairs encoded) and ``python`` (both switched off, the pure-Python paths an install
without a compiler uses). Prints µs of thread CPU per send for each round, the best of each variant and their
ratio. (Complements ``bench/producer.py``, whose end-to-end rates also carry the I/O thread and the GIL hand-offs
between the two threads.)
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=100_000, help="records per round (default 100,000)")
    ap.add_argument("--size", type=int, default=1024, help="value bytes (default 1024)")
    ap.add_argument("--headers", type=int, default=1, help="headers per record (default 1)")
    ap.add_argument("--rounds", type=int, default=4, help="rounds per variant (default 4)")
    args = ap.parse_args()

    import strom.producer.kafka_producer as kp
    import strom.record.builder as builder
    import strom.record.sizes as sizes
    from strom.admin import AdminClient, NewTopic
    from strom.broker_process import BrokerProcess
    from strom.producer import KafkaProducer

    if builder._encode_record is None or sizes.encode_plain_headers is None:
        sys.exit("send_path: the C encoder (strom/record/_fastencode.c) is not built: nothing to compare")
    variants = {
        "c": (builder._encode_record, sizes.encode_plain_headers, kp._encode_plain_headers),
        "python": (None, None, lambda headers: None),
    }
    results: dict[str, list[float]] = {name: [] for name in variants}
    with BrokerProcess() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("send-path", 4, 1)])
        admin.close()
        producer = KafkaProducer({"bootstrap.servers": broker.bootstrap, "key.serializer": "bytes",
                                  "value.serializer": "bytes", "linger.ms": 5, "batch.size": 65536, "acks": "1",
                                  "enable.idempotence": False,
                                  "buffer.memory": max(1 << 26, 2 * args.count * (args.size + 100))})
        payload = os.urandom(args.size)
        headers = [(f"trace-id-{i}", os.urandom(16)) for i in range(args.headers)] or None
        producer.send("send-path", payload, headers=headers).get(30)
        send = producer.send
        for r in range(args.rounds):
            for name in (list(variants) if r % 2 == 0 else list(variants)[::-1]):
                builder._encode_record, sizes.encode_plain_headers, kp._encode_plain_headers = variants[name]
                assert broker.proc is not None
                os.kill(broker.proc.pid, signal.SIGSTOP)
                try:
                    t0 = time.thread_time()
                    for _ in range(args.count):
                        send("send-path", payload, headers=headers)
                    results[name].append((time.thread_time() - t0) / args.count * 1e6)
                finally:
                    os.kill(broker.proc.pid, signal.SIGCONT)
                producer.flush()
        producer.close()
    print(f"{args.count:,} sends of {args.size} B with {args.headers} header(s), µs of the calling thread's CPU:")
    for name, values in results.items():
        print(f"  {name:7s} best {min(values):.2f}  rounds: {', '.join(f'{v:.2f}' for v in values)}")
    print(f"  python / c: {min(results['python']) / min(results['c']):.2f}×")


if __name__ == "__main__":
    main()
