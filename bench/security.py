"""Produce and consume throughput over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-256) against one strom broker.

Command: ``.venv/bin/python bench/security.py`` (defaults: 200,000 × 1 KiB records, one partition per protocol's
topic, acks=1, strom's producer and consumer in this process, one after the other; certificates made at run
time). Prints records/s and MB/s per protocol and the ratio to PLAINTEXT from the same run.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from strom.security.scram import SCRAM_MECHANISMS, ScramCredential
from strom.server.security.credentials import CREDENTIALS_FILE, FileCredentialStore
from strom.testing.broker_process import BrokerProcess, free_port
from strom.testing.certs import make_pki


def produce(config: dict[str, Any], topic: str, n: int, size: int) -> float:
    from strom.producer import KafkaProducer

    producer = KafkaProducer({**config, "acks": "1", "linger.ms": 5, "batch.size": 262144,
                              "key.serializer": "bytes", "value.serializer": "bytes"})
    value = b"x" * size
    start = time.perf_counter()
    for _ in range(n):
        producer.send(topic, value=value)
    producer.flush(120)
    elapsed = time.perf_counter() - start
    producer.close(10)
    return elapsed


def consume(config: dict[str, Any], topic: str, n: int) -> float:
    from strom.consumer import KafkaConsumer

    consumer = KafkaConsumer({**config, "group.id": f"bench-{topic}-{time.time_ns()}", "auto.offset.reset": "earliest",
                              "enable.auto.commit": False, "key.deserializer": "bytes", "value.deserializer": "bytes"})
    consumer.subscribe([topic])
    got = 0
    start = None
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        records = consumer.poll(1000)
        count = records.count()
        if count and start is None:
            start = time.perf_counter()  # from the first records: the group join is not the transport's cost
        got += count
    elapsed = time.perf_counter() - (start or time.perf_counter())
    consumer.close()
    if got < n:
        raise RuntimeError(f"consumed only {got} of {n} records from {topic}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="strom-bench-security-"))
    pki = make_pki(tmp / "pki")
    plain_port, ssl_port, sasl_port = free_port(), free_port(), free_port()
    data = tmp / "data"
    mechanism = SCRAM_MECHANISMS["SCRAM-SHA-256"]
    FileCredentialStore(data / CREDENTIALS_FILE).upsert("bench", mechanism.name,
                                                        ScramCredential.generate(mechanism, "bench-pw"))
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SSL://127.0.0.1:{ssl_port},SASL_SSL://localhost:{sasl_port}",
        "ssl.keystore.location": str(pki.broker_keystore),
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
    }
    with BrokerProcess(data_dir=data, port=plain_port, overrides=overrides) as broker:
        tls = {"ssl.ca.location": str(pki.ca)}
        configs = {
            "PLAINTEXT": {"bootstrap.servers": broker.bootstrap},
            "SSL": {"bootstrap.servers": f"127.0.0.1:{ssl_port}", "security.protocol": "SSL", **tls},
            "SASL_SSL": {"bootstrap.servers": f"localhost:{sasl_port}", "security.protocol": "SASL_SSL", **tls,
                         "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bench", "sasl.password": "bench-pw"},
        }
        results: dict[str, tuple[float, float]] = {}
        for name, config in configs.items():
            topic = f"bench-{name.lower()}"
            p = produce(config, topic, args.records, args.size)
            c = consume(config, topic, args.records)
            results[name] = (args.records / p, args.records / c)
    mb = args.size / 1e6
    base_p, base_c = results["PLAINTEXT"]
    print(f"{args.records:,} x {args.size} B records, acks=1, strom producer and consumer")
    print("| protocol | produce rec/s | produce MB/s | consume rec/s | consume MB/s | produce ÷ PLAINTEXT | "
          "consume ÷ PLAINTEXT |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, (p, c) in results.items():
        print(f"| {name} | {p:,.0f} | {p * mb:,.1f} | {c:,.0f} | {c * mb:,.1f} | {p / base_p:.2f}× | "
              f"{c / base_c:.2f}× |")


if __name__ == "__main__":
    main()
