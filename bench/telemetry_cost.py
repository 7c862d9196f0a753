"""What pushing the client's metrics (KIP-714, ``enable.metrics.push``) costs strom's producer: per-record
``send`` of 100 B records into one strom broker that offers client telemetry and subscribes every client to all
metrics every second (the most a subscription asks), with pushing on and off, alternating (order swapped each
round), a new producer per run. Prints records/s per run and the ratio of the sums (on / off)."""

from __future__ import annotations

import argparse
import tempfile
import time

from strom import KafkaProducer
from strom.admin import AdminClient
from strom.admin.models import AlterConfigOp, ConfigResource, ConfigResourceType
from strom.broker_process import BrokerProcess
from strom.testing.broker_process import free_port


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    broker = BrokerProcess(data_dir=tempfile.mkdtemp(prefix="bench-telemetry-"),
                           overrides={"metrics.prometheus.listener": f"http://127.0.0.1:{free_port()}"})
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.incremental_alter_configs({ConfigResource(ConfigResourceType.CLIENT_METRICS, "all"): [
            AlterConfigOp("metrics", "*"), AlterConfigOp("interval.ms", "1000")]}).all().result()
        admin.close()
        value = b"x" * 100
        rates: dict[bool, list[float]] = {True: [], False: []}
        for rnd in range(args.rounds):
            for push in ((True, False) if rnd % 2 else (False, True)):
                p = KafkaProducer({"bootstrap.servers": broker.bootstrap, "key.serializer": "bytes",
                                   "value.serializer": "bytes", "enable.metrics.push": push, "linger.ms": 5})
                p.send("warm-up", value).get(10)
                start = time.perf_counter()
                for _ in range(args.records):
                    p.send("telemetry-cost", value)
                p.flush()
                rate = args.records / (time.perf_counter() - start)
                pushes = p._client.telemetry.pushes if push else 0  # type: ignore[attr-defined]
                p.close()
                rates[push].append(rate)
                print(f"round {rnd} push={'on ' if push else 'off'}: {rate:,.0f} records/s ({pushes} pushes)",
                      flush=True)
        print(f"on / off (sums): {sum(rates[True]) / sum(rates[False]):.3f}")
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
