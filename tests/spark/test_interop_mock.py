"""format("strom") against another Kafka implementation: librdkafka's mock cluster (confluent-kafka)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.interop, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def mock_cluster() -> Iterator[tuple[Any, str]]:
    ck = pytest.importorskip("confluent_kafka")
    p = ck.Producer({"test.mock.num.brokers": 1})
    broker = next(iter(p.list_topics(timeout=10).brokers.values()))
    bootstrap = f"{broker.host}:{broker.port}"
    yield p, bootstrap
    p.flush(10)


def test_read_and_write_a_librdkafka_mock_cluster(spark: Any, mock_cluster: tuple[Any, str], tmp_path: Path) -> None:
    producer, bootstrap = mock_cluster
    for i in range(40):
        producer.produce("mk", value=f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 4)
    assert producer.flush(30) == 0
    rows = (spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap).option("subscribe", "mk")
            .load().collect())
    assert sorted(r.value for r in rows) == sorted(f"v{i}".encode() for i in range(40))
    assert {r.partition for r in rows} == {0, 1, 2, 3}
    producer.produce("mk-out", value=b"x", partition=0)  # auto-creates the output topic
    assert producer.flush(30) == 0
    q = (spark.readStream.format("strom").option("kafka.bootstrap.servers", bootstrap).option("subscribe", "mk")
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "15").load()
         .selectExpr("key", "value").writeStream.format("strom").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", "mk-out").option("checkpointLocation", str(tmp_path / "ckpt"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(120)
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [12, 12, 12, 4]  # 3 per partition
    back = (spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap).option("subscribe", "mk-out")
            .load().collect())
    assert sorted(r.value for r in back) == sorted([b"x"] + [f"v{i}".encode() for i in range(40)])
