"""The executors' pooled consumers (``strom.spark.kafka_io``): which idle consumer a range read takes.

A consumer's last poll leaves a fetch at its position, parked by the broker as a long poll when that is the log
end; no other fetch goes to that broker until it returns. These tests use a long ``fetch.max.wait.ms`` so that
waiting for a parked fetch would show (and fail the deadline), and check which pooled consumer each read took.
No Spark needed: ``read_range`` is what a Spark task runs.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from strom.broker_process import BrokerProcess
from strom.spark import kafka_io
from strom.spark.planning import OffsetRange
from tests.spark.helpers import create_topic, produce

pytestmark = [pytest.mark.timeout(120)]

PARKED_WAIT_MS = 20_000  # how long a parked fetch would hold a reused consumer


@pytest.fixture
def pool() -> Iterator[None]:
    kafka_io.close_pooled_consumers()
    yield
    kafka_io.close_pooled_consumers()


@pytest.fixture(scope="module")
def topic(broker: BrokerProcess) -> str:
    create_topic(broker.bootstrap, "pooled", 3)
    produce(broker.bootstrap, "pooled", [(p, None, f"p{p}-{i}".encode()) for p in range(3) for i in range(50)])
    return "pooled"


def read(bootstrap: str, topic: str, partition: int, start: int, end: int, max_wait_ms: int,
         group_id: str | None = None) -> list[bytes]:
    conf = {"bootstrap.servers": bootstrap, "fetch.max.wait.ms": str(max_wait_ms)}
    values: list[bytes] = []
    for table in kafka_io.read_range(conf, OffsetRange(topic, partition, start, end), True, poll_timeout_ms=60_000,
                                     group_id=group_id):
        values.extend(table.column("value").to_pylist())
    return values


def idle() -> list[tuple[int, int, int]]:
    """(partition, position, consumer id) of the idle consumers, least recently released first."""
    return [(e.tp.partition, e.position, id(e.consumer)) for e in kafka_io._idle]


def test_another_partition_does_not_wait_for_a_parked_fetch(broker: BrokerProcess, topic: str, pool: None) -> None:
    t0 = time.monotonic()
    assert read(broker.bootstrap, topic, 0, 0, 50, PARKED_WAIT_MS) == [f"p0-{i}".encode() for i in range(50)]
    [(_, position, first)] = idle()
    assert position == 50  # at the log end: its last fetch is parked there
    assert read(broker.bootstrap, topic, 1, 0, 50, PARKED_WAIT_MS) == [f"p1-{i}".encode() for i in range(50)]
    # the same partition again from its start: the parked fetch (at 50) is not the one wanted either
    assert read(broker.bootstrap, topic, 0, 10, 20, PARKED_WAIT_MS) == [f"p0-{i}".encode() for i in range(10, 20)]
    assert len({c for _, _, c in idle()}) == 3 and first in {c for _, _, c in idle()}
    assert time.monotonic() - t0 < PARKED_WAIT_MS / 2000  # no read waited out a parked fetch


def test_a_read_that_continues_takes_the_consumer_that_stopped_there(broker: BrokerProcess, pool: None) -> None:
    create_topic(broker.bootstrap, "continued", 1)
    produce(broker.bootstrap, "continued", [(0, None, b"a%d" % i) for i in range(5)])
    assert read(broker.bootstrap, "continued", 0, 0, 5, PARKED_WAIT_MS) == [b"a%d" % i for i in range(5)]
    [(_, _, consumer)] = idle()
    produce(broker.bootstrap, "continued", [(0, None, b"b%d" % i) for i in range(5)])  # answers the parked fetch
    assert read(broker.bootstrap, "continued", 0, 5, 10, PARKED_WAIT_MS) == [b"b%d" % i for i in range(5)]
    assert idle() == [(0, 10, consumer)]


def test_a_consumer_whose_fetch_has_expired_is_reused_for_anything(broker: BrokerProcess, topic: str,
                                                                    pool: None) -> None:
    read(broker.bootstrap, topic, 0, 0, 50, 0)  # fetch.max.wait.ms=0: no fetch stays parked
    [(_, _, consumer)] = idle()
    assert read(broker.bootstrap, topic, 2, 5, 8, 0) == [b"p2-5", b"p2-6", b"p2-7"]
    assert idle() == [(2, 50, consumer)]  # the position is past the range: the whole batch was read


def test_the_next_querys_read_takes_the_consumer_of_the_last_one(broker: BrokerProcess, topic: str,
                                                                  pool: None) -> None:
    """Each batch query has its own executor group id; the pool does not key on it (the consumers never use
    their group), so a second query's read takes the first one's consumer once its parked fetch is back."""
    read(broker.bootstrap, topic, 0, 0, 50, 0, group_id="spark-kafka-relation-1-executor")
    [(_, _, consumer)] = idle()
    assert read(broker.bootstrap, topic, 0, 0, 50, 0, group_id="spark-kafka-relation-2-executor") == [
        f"p0-{i}".encode() for i in range(50)]
    assert idle() == [(0, 50, consumer)]


def test_the_sources_default_long_poll_lets_the_next_query_reuse_a_consumer(broker: BrokerProcess, topic: str,
                                                                            pool: None,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``kafka.fetch.max.wait.ms`` a range read's consumer is free for another range 100 ms after it
    stopped at the log end (Kafka's 500 ms default would make a query that follows within half a second open
    new consumers)."""
    conf = {"bootstrap.servers": broker.bootstrap}
    list(kafka_io.read_range(conf, OffsetRange(topic, 1, 0, 50), True, group_id="q1"))
    [(_, _, consumer)] = idle()
    # the next query comes 150 ms later on the pool's clock (its rule: the parked fetch's longest wait has passed)
    monkeypatch.setattr(kafka_io, "time", SimpleNamespace(monotonic=lambda: time.monotonic() + 0.15))
    got = [v for t in kafka_io.read_range(conf, OffsetRange(topic, 1, 20, 30), True, group_id="q2")
           for v in t.column("value").to_pylist()]
    assert got == [b"p1-%d" % i for i in range(20, 30)]
    assert [c for _, _, c in idle()] == [consumer]


def test_idle_consumers_beyond_the_cap_are_closed(broker: BrokerProcess, topic: str, pool: None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_io, "MAX_IDLE_CONSUMERS", 2)
    read(broker.bootstrap, topic, 0, 0, 50, PARKED_WAIT_MS)
    oldest = kafka_io._idle[0].consumer
    read(broker.bootstrap, topic, 1, 0, 50, PARKED_WAIT_MS)
    read(broker.bootstrap, topic, 2, 0, 50, PARKED_WAIT_MS)
    assert [p for p, _, _ in idle()] == [1, 2]
    assert oldest._closed


def test_a_read_does_not_import_pandas(broker: BrokerProcess, topic: str) -> None:
    """pyarrow imports pandas on the first ``pa.array``, ``to_numpy`` or compute call with a Python scalar
    (0.2-2 s of a fresh Spark worker); the columnar read path uses none of them."""
    script = f"""
import sys
from pyspark.sql.pandas.types import to_arrow_schema
from strom.spark.kafka_io import read_range
from strom.spark.planning import OffsetRange
from strom.spark.reader import source_schema, table_to_batches
schema = to_arrow_schema(source_schema(False), timezone="UTC")
batches = [b for t in read_range({{"bootstrap.servers": "{broker.bootstrap}"}}, OffsetRange("{topic}", 1, 10, 20), True)
           for b in table_to_batches(t, schema, False)]
assert [v for b in batches for v in b.column("value").to_pylist()] == [b"p1-%d" % i for i in range(10, 20)]
print(sorted(m for m in sys.modules if m == "pandas" or m.startswith("pandas.")))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
