"""Batch reads: exact offset ranges, earliest/latest, headers, options Spark's connector rejects."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from strom.broker_process import BrokerProcess
from strom.common.structs import TopicPartition
from tests.spark.helpers import create_topic, delete_records, produce

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def loaded(broker: BrokerProcess) -> Iterator[BrokerProcess]:
    create_topic(broker.bootstrap, "events", 3)
    produce(broker.bootstrap, "events", [(p, f"k{p}".encode(), f"p{p}-{i}".encode()) for p in range(3)
                                         for i in range(10)])
    yield broker


def read(spark: Any, bootstrap: str, **options: str) -> list[Any]:
    r = spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load().collect()


def test_exact_offset_ranges(spark: Any, loaded: BrokerProcess) -> None:
    t = time.monotonic()
    rows = read(spark, loaded.bootstrap, subscribe="events",
                startingOffsets=json.dumps({"events": {"0": 2, "1": -2, "2": 9}}),
                endingOffsets=json.dumps({"events": {"0": 5, "1": 3, "2": -1}}))
    got = sorted((r.partition, r.offset, r.value) for r in rows)
    want = sorted([(0, o, f"p0-{o}".encode()) for o in range(2, 5)] + [(1, o, f"p1-{o}".encode()) for o in range(3)]
                  + [(2, 9, b"p2-9")])
    assert got == want
    r0 = rows[0]
    assert r0.topic == "events" and r0.key == f"k{r0.partition}".encode() and r0.timestampType == 0
    assert abs(r0.timestamp.timestamp() - time.time()) < 600
    print(f"exact ranges read in {time.monotonic() - t:.1f}s")


def test_earliest_to_latest_with_min_partitions(spark: Any, loaded: BrokerProcess) -> None:
    df = (spark.read.format("strom").option("kafka.bootstrap.servers", loaded.bootstrap)
          .option("subscribePattern", "ev.*").option("minPartitions", "6").load())
    assert df.rdd.getNumPartitions() == 6
    rows = df.collect()
    assert len(rows) == 30 and len({(r.partition, r.offset) for r in rows}) == 30
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


def test_assign_and_headers(spark: Any, loaded: BrokerProcess) -> None:
    rows = read(spark, loaded.bootstrap, assign=json.dumps({"events": [1]}), includeHeaders="true")
    assert sorted(r.offset for r in rows) == list(range(10))
    assert all(r.partition == 1 and r.headers == [] for r in rows)


@pytest.mark.parametrize("options, message", [
    ({}, "One of the following options must be specified for Kafka source"),
    ({"subscribe": "a", "assign": '{"a":[0]}'}, "Only one of the following options can be specified"),
    ({"subscribe": "events", "startingOffsets": "latest"}, "starting offset can't be latest for batch queries"),
    ({"subscribe": "events", "endingOffsets": "earliest"}, "ending offset can't be earliest for batch queries"),
    ({"subscribe": "events", "kafka.auto.offset.reset": "earliest"}, "Kafka option 'auto.offset.reset' is not"),
    ({"subscribe": "events", "minPartitions": "0"}, "minPartitions must be positive"),
    ({"assign": "events"}, "No topicpartitions to assign as specified value for option 'assign' is 'events'"),
])
def test_rejected_options(spark: Any, loaded: BrokerProcess, options: dict[str, str], message: str) -> None:
    with pytest.raises(Exception, match=message.replace("(", r"\(")):
        read(spark, loaded.bootstrap, **options)


def test_fail_on_data_loss(spark: Any, broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "lossy", 1)
    produce(broker.bootstrap, "lossy", [(0, None, f"v{i}".encode()) for i in range(10)])
    delete_records(broker.bootstrap, {TopicPartition("lossy", 0): 6})
    ranges = json.dumps({"lossy": {"0": 2}})
    with pytest.raises(Exception, match=r"Cannot fetch offset 2 of lossy-0: the log starts at 6 now.*failOnDataLoss"):
        read(spark, broker.bootstrap, subscribe="lossy", startingOffsets=ranges)
    rows = read(spark, broker.bootstrap, subscribe="lossy", startingOffsets=ranges, failOnDataLoss="false")
    assert sorted(r.offset for r in rows) == [6, 7, 8, 9]
    assert sorted(r.offset for r in read(spark, broker.bootstrap, subscribe="lossy")) == [6, 7, 8, 9]
