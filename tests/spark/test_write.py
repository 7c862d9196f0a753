"""Writes: batch round trip, streaming strom -> strom with a replayed batch, sink validation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from strom.broker_process import BrokerProcess
from tests.spark.helpers import consume_all, create_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


def test_batch_write_then_read_round_trip(spark: Any, broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "rt_a", 2)
    create_topic(broker.bootstrap, "rt_b", 1)
    rows = [("rt_a" if i % 3 else "rt_b", f"k{i}", f"v{i}", i % 2 if i % 3 else 0) for i in range(40)]
    df = spark.createDataFrame(rows, "topic string, key string, value string, partition int").selectExpr(
        "topic", "key", "cast(value as binary) as value", "partition",
        "array(named_struct('key', 'i', 'value', cast(key as binary))) as headers")
    df.write.format("strom").option("kafka.bootstrap.servers", broker.bootstrap).mode("append").save()
    back = (spark.read.format("strom").option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribePattern", "rt_.*").option("includeHeaders", "true").load()
            .selectExpr("topic", "cast(key as string) k", "cast(value as string) v", "partition", "headers")
            .collect())
    assert sorted((r.topic, r.k, r.v, r.partition) for r in back) == sorted(rows)
    assert all(r.headers[0].key == "i" and r.headers[0].value == r.k.encode() for r in back)


def test_topic_option_overrides_column_and_bad_schemas(spark: Any, broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "rt_c", 1)
    df = spark.createDataFrame([("nope", "x")], "topic string, value string")
    df.write.format("strom").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", "rt_c") \
        .mode("append").save()
    assert [r.value for r in consume_all(broker.bootstrap, "rt_c", 1)] == [b"x"]

    def write(frame: Any, **options: str) -> None:
        w = frame.write.format("strom").option("kafka.bootstrap.servers", broker.bootstrap).mode("append")
        for k, v in options.items():
            w = w.option(k, v)
        w.save()

    with pytest.raises(Exception, match="topic option required when no 'topic' attribute is present"):
        write(spark.createDataFrame([("x",)], "value string"))
    with pytest.raises(Exception, match="Required attribute 'value' not found"):
        write(spark.createDataFrame([("x",)], "key string"), topic="rt_c")
    with pytest.raises(Exception, match="key attribute type must be a string or binary"):
        write(spark.createDataFrame([(1, "x")], "key int, value string"), topic="rt_c")
    with pytest.raises(Exception, match="Kafka option 'value.serializer' is not supported"):
        write(spark.createDataFrame([("x",)], "value string"), topic="rt_c", **{"kafka.value.serializer": "x"})


@pytest.mark.parametrize(("skip", "transactional"), [(True, False), (False, False), (True, True)])
def test_streaming_write_replayed_batch_writes_nothing_twice(spark: Any, broker: BrokerProcess, tmp_path: Path,
                                                             skip: bool, transactional: bool) -> None:
    src, dst = f"src_{skip}_{transactional}", f"dst_{skip}_{transactional}"
    create_topic(broker.bootstrap, src, 2)
    create_topic(broker.bootstrap, dst, 3)
    produce(broker.bootstrap, src, [(p, f"k{p}{i}".encode(), f"v{p}-{i}".encode()) for p in range(2)
                                      for i in range(12)])
    ckpt = tmp_path / "ckpt"

    def run() -> Any:
        q = (spark.readStream.format("strom").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", src).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "10")
             .load().selectExpr("key", "value").writeStream.format("strom")
             .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", dst).option("skipCommittedTasks", str(skip).lower())
             .option("transactional", str(transactional).lower())
             .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
        assert q.awaitTermination(120)
        return q

    run()
    first = consume_all(broker.bootstrap, dst, 3)
    assert sorted(r.value for r in first) == sorted(f"v{p}-{i}".encode() for p in range(2) for i in range(12))
    # Forget that the last batch was committed: Spark re-runs it on restart (a crash after the sink wrote).
    commits = sorted((ckpt / "commits").glob("[0-9]*"), key=lambda f: int(f.name))
    last = commits[-1]
    last.unlink()
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
    shutil.rmtree(ckpt / "state", ignore_errors=True)
    q = run()
    assert [p["batchId"] for p in q.recentProgress if p["numInputRows"]] == [int(last.name)]
    again = consume_all(broker.bootstrap, dst, 3)
    replayed = q.recentProgress[0]["numInputRows"]
    assert replayed == 4
    # with the markers the replayed batch writes nothing; without them (Spark's sink) it is written again
    assert len(again) == (24 if skip else 24 + replayed)
    offsets = json.loads((ckpt / "offsets" / last.name).read_text().splitlines()[-1])
    assert offsets == {src: {"0": 12, "1": 12}}
    if transactional:
        # Each task's rows and its marker were one transaction: a read_committed reader sees each row once.
        committed = consume_all(broker.bootstrap, dst, 3, isolation_level="read_committed")
        assert sorted(r.value for r in committed) == sorted(f"v{p}-{i}".encode() for p in range(2)
                                                            for i in range(12))
