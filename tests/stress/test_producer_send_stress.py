"""The issue's producer stress: 16 threads calling ``KafkaProducer.send`` into 200 partitions of a real broker with a
small ``buffer.memory`` for several seconds. Every future completes exactly once, nothing deadlocks, each thread's
records keep their order per partition, and the BufferPool is whole again at the end."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest

from strom import KafkaProducer, ProducerRecord
from strom.admin import AdminClient
from strom.admin.models import NewTopic
from strom.broker_process import BrokerProcess

pytestmark = [pytest.mark.stress, pytest.mark.timeout(180)]

THREADS = 16
PARTITIONS = 200
SECONDS = 4.0
BUFFER_MEMORY = 256 * 1024


def test_sixteen_threads_two_hundred_partitions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with BrokerProcess(data_dir=tmp_path / "d") as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("stress", PARTITIONS, 1)]).all().result(30)
        admin.close()
        producer = KafkaProducer({"bootstrap.servers": b.bootstrap, "key.serializer": "bytes",
                                  "value.serializer": "bytes", "buffer.memory": BUFFER_MEMORY,
                                  "batch.size": 4096, "linger.ms": 2, "max.block.ms": 30_000})
        lock = threading.Lock()
        completions: dict[tuple[int, int], int] = defaultdict(int)  # (thread, seq) -> callbacks seen
        results: dict[tuple[int, int], tuple[int, int]] = {}  # (thread, seq) -> (partition, offset)
        sent = [0] * THREADS
        errors: list[BaseException] = []
        stop = time.monotonic() + SECONDS

        def worker(t: int) -> None:
            seq = 0
            try:
                while time.monotonic() < stop:
                    def cb(md, exc, key=(t, seq)):  # type: ignore[no-untyped-def]
                        with lock:
                            completions[key] += 1
                            if exc is not None:
                                errors.append(exc)
                            else:
                                results[key] = (md.partition, md.offset)

                    producer.send(ProducerRecord("stress", b"%d:%d" % (t, seq), partition=(t * 7 + seq) % PARTITIONS),
                                  callback=cb)
                    seq += 1
            except BaseException as e:
                errors.append(e)
            sent[t] = seq

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        assert not any(th.is_alive() for th in threads), "a sending thread is stuck (deadlock?)"
        producer.flush(60)
        pool = producer._buffer_pool
        deadline = time.monotonic() + 10
        while pool.available_memory() != BUFFER_MEMORY and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.available_memory() == BUFFER_MEMORY
        producer.close(30)
        assert not errors, errors[:3]
        total = sum(sent)
        assert total > THREADS * 100
        assert len(completions) == total and set(completions.values()) == {1}  # each exactly once
        # Per thread and partition, later sends got later offsets.
        by_tp: dict[tuple[int, int], list[int]] = defaultdict(list)
        for (t, seq) in sorted(results):
            part, off = results[(t, seq)]
            by_tp[(t, part)].append(off)
        assert all(offs == sorted(offs) for offs in by_tp.values())
        assert len({(p, o) for p, o in results.values()}) == total  # no two records share an offset
