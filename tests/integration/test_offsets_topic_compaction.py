"""``__consumer_offsets`` is compacted by the log cleaner, as in Kafka: a group that commits the same partitions
over and over leaves one record per key in the cleaned segments, a deleted group's tombstones remove its records,
and a restarted broker replays the cleaned log into the same committed offsets and groups."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from strom.admin import AdminClient, NewTopic
from strom.broker_process import BrokerProcess
from strom.common.structs import TopicPartition
from strom.consumer import KafkaConsumer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

COMMITS = 1500  # well below anything a coordinator-side workaround would act on: only the cleaner shrinks this
OVERRIDES = {"offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": "16384",
             "log.cleaner.backoff.ms": "100", "group.initial.rebalance.delay.ms": "0"}


def _segment_bytes(b: BrokerProcess) -> int:
    return sum(f.stat().st_size for f in (b.data_dir / "__consumer_offsets-0").glob("*.log"))


def _committer(b: BrokerProcess, group: str) -> KafkaConsumer:
    return KafkaConsumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False},
                         key_deserializer="bytes", value_deserializer="bytes")


def test_the_cleaner_compacts_committed_offsets_and_a_restart_replays_them(tmp_path: Path) -> None:
    b = BrokerProcess(data_dir=tmp_path / "data", overrides=OVERRIDES).start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        try:
            admin.create_topics([NewTopic("t", 3, 1)]).all().result(30)
        finally:
            admin.close()
        tps = [TopicPartition("t", p) for p in range(3)]
        kept, gone = _committer(b, "kept"), _committer(b, "gone")
        try:
            for i in range(COMMITS):
                kept.commit_sync({tp: i * 10 + tp.partition for tp in tps})
            gone.commit_sync({tps[0]: 7})
        finally:
            kept.close()
            gone.close()
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        try:
            admin.delete_consumer_groups(["gone"]).all().result(30)
        finally:
            admin.close()
        check = _committer(b, "kept")
        try:
            offsets_tp = TopicPartition("__consumer_offsets", 0)
            written = check.end_offsets([offsets_tp], timeout=30)[offsets_tp]
        finally:
            check.close()
        assert written >= 3 * COMMITS  # every commit appended its three offset records

        # the cleaner leaves the active segment and cleaned ones holding one record per live key
        deadline = time.monotonic() + 60
        while _segment_bytes(b) > 4 * 16384:
            assert time.monotonic() < deadline, f"{_segment_bytes(b)} bytes on disk for {written} records"
            time.sleep(0.2)

        b.restart()
        check = _committer(b, "kept")
        try:
            assert {tp: om.offset for tp, om in check.committed(set(tps), timeout=30).items()} == {
                tp: (COMMITS - 1) * 10 + tp.partition for tp in tps}
        finally:
            check.close()
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        try:
            groups = {g.group_id for g in admin.list_consumer_groups().all().result(30)}
        finally:
            admin.close()
        assert "kept" in groups and "gone" not in groups
    finally:
        b.stop()
        b.cleanup()
