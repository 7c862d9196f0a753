"""Log compaction on real files: dedupe with original offsets, tombstones, lags, ratios, throttling, crash-safe swap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time as _time

import pytest

from strom.common.structs import TopicPartition
from strom.common.time import SYSTEM_TIME
from strom.record.batch import DELETE_HORIZON_FLAG, RecordBatch
from strom.record.control import ControlRecordType, build_control_batch
from strom.storage.log import Log
from strom.storage.log_cleaner import CLEANER_OFFSET_CHECKPOINT_FILE, CleanerConfig, LogCleaner
from strom.storage.log_config import LogConfig
from strom.storage.log_manager import LogManager
from strom.storage.log_validator import AppendOrigin

from ._batches import T0, build_batch, split_batches

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "2000", "min.cleanable.dirty.ratio": "0.01"}
TP = TopicPartition("topic", 0)


def open_log(tmp_path, mock_time, props=None, name="topic-0", **kw) -> Log:
    return Log(str(tmp_path / name), LogConfig.from_props({**COMPACT, **(props or {})}), mock_time, **kw)


def cleaner_for(tmp_path, mock_time, *logs: Log, **config) -> LogCleaner:
    from strom.storage.log import parse_topic_partition

    pairs = [(parse_topic_partition(lg.dir), lg) for lg in logs]
    return LogCleaner(CleanerConfig(enable_cleaner=False, **config), [str(tmp_path)], lambda: pairs, mock_time)


def records_of(lg: Log) -> list:
    """Every record from the log start, in order, read as a consumer would."""
    out = []
    offset = lg.log_start_offset
    while offset < lg.log_end_offset:
        data = lg.read(offset, 1 << 20).records
        if not data:
            break
        batches = split_batches(data)
        for _b, _l, raw in batches:
            out += RecordBatch(raw).records()
        offset = batches[-1][1] + 1
    return out


def write_history(lg: Log, rounds: int = 8, keys: int = 5) -> dict[bytes, tuple[int, bytes]]:
    """``rounds`` updates of ``keys`` keys, 3 records per batch, some batches gzip'd; returns key -> last (offset, value)."""
    latest: dict[bytes, tuple[int, bytes]] = {}
    pending: list[tuple[bytes, bytes]] = []
    n = 0
    for r in range(rounds):
        for k in range(keys):
            pending.append((b"key-%d" % k, b"value-%d-%d" % (k, r) + b"." * 40))
            if len(pending) == 3:
                info = lg.append_as_leader(
                    build_batch([v for _k, v in pending], keys=[k for k, _v in pending], compression=n % 2)
                )
                for i, (key, value) in enumerate(pending):
                    latest[key] = (info.first_offset + i, value)
                pending = []
                n += 1
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    return latest


def test_compaction_keeps_last_value_per_key_at_its_original_offset(tmp_path, mock_time):
    lg = open_log(tmp_path, mock_time)
    latest = write_history(lg)
    before_size, before_leo, segments_before = lg.size_in_bytes, lg.log_end_offset, lg.num_segments
    active_before = lg.active_segment
    stats = cleaner_for(tmp_path, mock_time, lg).clean_once()
    assert stats is not None and stats.records_written < stats.records_read
    records = records_of(lg)
    assert {r.key: (r.offset, r.value) for r in records} == latest
    assert len(records) == len(latest)  # exactly one record per key survived
    assert [r.offset for r in records] == sorted(r.offset for r in records)
    assert lg.log_end_offset == before_leo and lg.log_start_offset == 0
    assert lg.size_in_bytes < before_size / 3 and lg.num_segments <= segments_before
    assert lg.active_segment is active_before  # the active segment is never touched
    for key, (offset, value) in latest.items():  # random access (a consumer seeking) finds each survivor
        first = RecordBatch(split_batches(lg.read(offset, 1).records)[0][2]).records()
        assert (key, value) in [(r.key, r.value) for r in first if r.offset == offset]
    with open(tmp_path / CLEANER_OFFSET_CHECKPOINT_FILE) as f:
        assert f.read() == f"0\n1\ntopic 0 {lg.active_segment.base_offset}\n"
    # A follower copying the cleaned log (with its offset gaps) gets the same batches.
    follower = open_log(tmp_path, mock_time, name="follower-0")
    offset = 0
    while offset < lg.log_end_offset:
        data = lg.read(offset, 1 << 20).records
        if not data:
            break
        follower.append_as_follower(data)
        offset = split_batches(data)[-1][1] + 1
    follower.update_high_watermark(follower.log_end_offset)
    assert [(r.offset, r.key, r.value) for r in records_of(follower)] == [(r.offset, r.key, r.value) for r in records]
    # A restart reads the same compacted log.
    lg.close()
    reopened = open_log(tmp_path, mock_time, had_clean_shutdown=True, recovery_point=before_leo)
    assert {r.key: (r.offset, r.value) for r in records_of(reopened)} == latest
    reopened.close()
    follower.close()


def test_second_cleaning_only_maps_new_dirty_section(tmp_path, mock_time):
    lg = open_log(tmp_path, mock_time)
    write_history(lg)
    cleaner = cleaner_for(tmp_path, mock_time, lg)
    cleaner.clean_once()
    assert cleaner.clean_once() is None  # nothing dirty since
    lg.append_as_leader(build_batch([b"new"], keys=[b"key-0"]))
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    stats = cleaner.clean_once()
    assert stats is not None and stats.map_records_read == 1
    assert {r.key: r.value for r in records_of(lg)}[b"key-0"] == b"new"
    lg.close()


def test_tombstones_survive_delete_retention_then_go(tmp_path, mock_time):
    lg = open_log(tmp_path, mock_time, {"delete.retention.ms": "1000"})
    lg.append_as_leader(build_batch([b"v1", b"v2"], keys=[b"k1", b"k2"]))
    lg.append_as_leader(build_batch([None], keys=[b"k1"], base_timestamp=T0 + 5))  # tombstone for k1
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    cleaner = cleaner_for(tmp_path, mock_time, lg)
    cleaner.clean_once()
    records = records_of(lg)
    assert [(r.offset, r.key, r.value) for r in records] == [(1, b"k2", b"v2"), (2, b"k1", None)]
    assert records[1].timestamp == T0 + 5  # the record keeps its timestamp
    tomb = split_batches(lg.read(2, 1 << 20).records)[0][2]
    assert RecordBatch(tomb).attributes & DELETE_HORIZON_FLAG
    assert RecordBatch(tomb).base_timestamp == mock_time.milliseconds() + 1000
    mock_time.sleep(999)
    assert cleaner.clean_once() is None  # the horizon has not passed: nothing to do
    assert [r.key for r in records_of(lg)] == [b"k2", b"k1"]
    mock_time.sleep(1)
    stats = cleaner.clean_once()  # nothing dirty, but a delete horizon passed: clean to drop the tombstone
    assert stats is not None and stats.tombstones_removed == 1
    assert [(r.offset, r.key, r.value) for r in records_of(lg)] == [(1, b"k2", b"v2")]
    assert lg.log_end_offset == 3
    lg.close()


def test_dirtiest_log_first_and_ratio_threshold(tmp_path, mock_time):
    props = {"min.cleanable.dirty.ratio": "0.5"}
    very = open_log(tmp_path, mock_time, props, name="very-0")
    write_history(very, rounds=8)
    little = open_log(tmp_path, mock_time, props, name="little-0")
    for k in range(40):  # all distinct keys: dirty ratio 1.0 too, but after one cleaning nothing shrinks
        little.append_as_leader(build_batch([b"v"], keys=[b"u-%d" % k]))
    little.roll()
    little.update_high_watermark(little.log_end_offset)
    delete_only = Log(str(tmp_path / "plain-0"), LogConfig.from_props({"segment.bytes": "2000"}), mock_time)
    write_history(delete_only)
    cleaner = cleaner_for(tmp_path, mock_time, very, little, delete_only)
    ltc = cleaner.manager.grab_filthiest_compacted_log()
    assert ltc is not None and ltc.cleanable_ratio == 1.0
    cleaner.manager.done_cleaning(ltc.tp, str(tmp_path), None, None)
    cleaner.clean_once()
    cleaner.clean_once()
    assert cleaner.clean_once() is None  # both compacted logs clean now; the delete-policy log is never cleaned
    # 'little' gets one new duplicate: dirty 1 small segment vs a clean section 40 records long -> below 0.5
    little.append_as_leader(build_batch([b"w"], keys=[b"u-0"]))
    little.roll()
    little.update_high_watermark(little.log_end_offset)
    assert cleaner.clean_once() is None
    assert len(records_of(delete_only)) == 39  # untouched: 13 batches of 3
    for lg in (very, little, delete_only):
        lg.close()


def test_min_compaction_lag_keeps_young_records_dirty(tmp_path, mock_time):
    lg = open_log(tmp_path, mock_time, {"min.compaction.lag.ms": "60000"})
    now = mock_time.milliseconds()
    lg.append_as_leader(build_batch([b"old"], keys=[b"k"], base_timestamp=now - 120_000))
    lg.roll()
    lg.append_as_leader(build_batch([b"young"], keys=[b"k"], base_timestamp=now - 1000))
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    cleaner = cleaner_for(tmp_path, mock_time, lg)
    cleaner.clean_once()
    assert [r.value for r in records_of(lg)] == [b"old", b"young"]  # the young segment is uncleanable yet
    mock_time.sleep(60_000)
    cleaner.clean_once()
    assert [r.value for r in records_of(lg)] == [b"young"]
    lg.close()


def test_max_compaction_lag_forces_cleaning_below_the_ratio(tmp_path, mock_time):
    lg = open_log(tmp_path, mock_time, {"min.cleanable.dirty.ratio": "0.99", "max.compaction.lag.ms": "60000"})
    now = mock_time.milliseconds()
    for i in range(10):
        lg.append_as_leader(build_batch([b"a-%d" % i], keys=[b"k-%d" % i], base_timestamp=now))
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    cleaner = cleaner_for(tmp_path, mock_time, lg)
    cleaner.clean_once()  # first cleaning: ratio 1.0
    lg.append_as_leader(build_batch([b"b"], keys=[b"k-0"], base_timestamp=now))
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    assert cleaner.clean_once() is None  # dirty ratio ~0.1 < 0.99 and the record is not old enough
    mock_time.sleep(60_001)
    assert cleaner.clean_once() is not None
    assert {r.key: r.value for r in records_of(lg)}[b"k-0"] == b"b"
    assert len(records_of(lg)) == 10
    lg.close()


def test_compact_and_delete_policy_does_both(tmp_path, mock_time):
    props = {"cleanup.policy": "compact,delete", "retention.ms": "10000", "file.delete.delay.ms": "0"}
    lg = open_log(tmp_path, mock_time, props)
    now = mock_time.milliseconds()
    for i in range(9):
        lg.append_as_leader(build_batch([b"x" * 100], keys=[b"k-%d" % (i % 3)], base_timestamp=now - 20_000))
    lg.append_as_leader(build_batch([b"only-old"], keys=[b"old"], base_timestamp=now - 20_000))  # offset 9
    lg.roll()
    for i in range(30):
        lg.append_as_leader(build_batch([b"y-%d" % i], keys=[b"k-%d" % (i % 3)], base_timestamp=now))
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    cleaner_for(tmp_path, mock_time, lg).clean_once()
    assert sorted(r.value for r in records_of(lg)) == [b"only-old", b"y-27", b"y-28", b"y-29"]
    assert lg.delete_old_segments() == 1  # retention removes the expired segment that compaction kept
    assert lg.log_start_offset == 10
    assert sorted(r.value for r in records_of(lg)) == [b"y-27", b"y-28", b"y-29"]
    lg.close()


def test_producer_last_batch_kept_empty_and_dedupe_survives_restart(tmp_path, mock_time):
    lg = open_log(tmp_path, mock_time)
    b0 = build_batch([b"a"], keys=[b"k"], producer_id=9, producer_epoch=0, base_sequence=0)
    lg.append_as_leader(b0)
    lg.append_as_leader(build_batch([b"b"], keys=[b"k"]))  # supersedes the producer's only record
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    cleaner_for(tmp_path, mock_time, lg).clean_once()
    first = split_batches(lg.read(0, 1 << 20).records)
    assert first[0][:2] == (0, 0) and RecordBatch(first[0][2]).records_count == 0  # emptied, kept
    assert [r.value for r in records_of(lg)] == [b"b"]
    lg.close()
    reopened = open_log(tmp_path, mock_time)
    dup = reopened.append_as_leader(b0)  # the retried batch is still recognised
    assert (dup.first_offset, dup.num_batches) == (0, 0)
    reopened.close()


def test_throttle_sleeps_to_the_configured_rate(tmp_path, mock_time):
    lg = open_log(tmp_path, mock_time)
    write_history(lg, rounds=20)
    cleaner = cleaner_for(tmp_path, mock_time, lg, max_io_bytes_per_second=1000.0)
    cleaner.throttler.check_interval_ms = 0
    start = mock_time.milliseconds()
    stats = cleaner.clean_once()
    moved = stats.bytes_read + stats.bytes_written + stats.map_bytes_read
    assert cleaner.throttler.slept_ms > 0
    assert mock_time.milliseconds() - start >= moved * 1000 / 1000 * 0.9  # MockTime: slept as much as the rate asks
    lg.close()


def test_cleaner_config_from_broker_props():
    cfg = CleanerConfig.from_broker_props(
        {"log.cleaner.threads": "2", "log.cleaner.dedupe.buffer.size": "1048576", "log.cleaner.enable": "false",
         "log.cleaner.io.max.bytes.per.second": "5e6", "log.cleaner.backoff.ms": "100", "other": "x"}
    )
    assert (cfg.num_threads, cfg.dedupe_buffer_size, cfg.enable_cleaner) == (2, 1048576, False)
    assert (cfg.max_io_bytes_per_second, cfg.backoff_ms) == (5e6, 100)
    with pytest.raises(ValueError, match="log.cleaner.threads"):
        CleanerConfig.from_broker_props({"log.cleaner.threads": "two"})
    with pytest.raises(ValueError, match="log.cleaner.io.buffer.load.factor"):
        CleanerConfig.from_broker_props({"log.cleaner.io.buffer.load.factor": "1.5"})


def test_log_manager_runs_cleaner_threads_and_aborts_on_delete(tmp_path):
    cfg = CleanerConfig(backoff_ms=20)
    lm = LogManager([str(tmp_path)], LogConfig.from_broker_props({}), SYSTEM_TIME, cleaner_config=cfg)
    lm.load_logs()
    lm.startup()
    try:
        lg = lm.get_or_create_log(TP, LogConfig.from_props(COMPACT))
        latest = write_history(lg)
        deadline = _time.monotonic() + 30
        while {r.key: (r.offset, r.value) for r in records_of(lg)} != latest or len(records_of(lg)) != 5:
            assert _time.monotonic() < deadline, "the cleaner thread did not compact the log"
            _time.sleep(0.02)
        assert lm.cleaner.cleanings >= 1
        assert lm.delete_log(TP)
        assert "topic" not in (tmp_path / CLEANER_OFFSET_CHECKPOINT_FILE).read_text()
    finally:
        lm.shutdown()


CRASH = """
    import json, os, sys
    from strom.common.structs import TopicPartition
    from strom.storage.log import Log
    from strom.storage.log_cleaner import CleanerConfig, LogCleaner
    from strom.storage.log_config import LogConfig
    from strom.storage import log as log_module

    d, crash_at = sys.argv[1], int(sys.argv[2])
    config = LogConfig.from_props(json.loads(sys.argv[3]))
    lg = Log(os.path.join(d, "topic-0"), config, had_clean_shutdown=True, recovery_point=10**9)
    lg.update_high_watermark(lg.log_end_offset)
    calls = 0
    real_replace, real_fsync = os.replace, os.fsync
    def counted(real):
        def f(*a, **k):
            global calls
            calls += 1
            if calls == crash_at:
                os._exit(9)  # kill -9: no cleanup, no flush of Python state
            return real(*a, **k)
        return f
    os.replace = counted(real_replace)
    os.fsync = counted(real_fsync)
    cleaner = LogCleaner(CleanerConfig(enable_cleaner=False), [d], lambda: [(TopicPartition("topic", 0), lg)])
    cleaner.clean_once()
    print(json.dumps({"calls": calls}))
"""


def test_kill_at_every_step_of_a_cleaning_leaves_a_readable_log(tmp_path, mock_time):
    base = tmp_path / "base"
    base.mkdir()
    lg = open_log(base, mock_time)
    latest = write_history(lg)
    lg.close()
    props = json.dumps(COMPACT)

    def run(d, crash_at):
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(CRASH), str(d), str(crash_at), props],
            capture_output=True, text=True, cwd=ROOT, timeout=60,
        )

    full = run(_copy(base, tmp_path / "full"), 0)
    assert full.returncode == 0, full.stderr[-2000:]
    steps = json.loads(full.stdout.strip().splitlines()[-1])["calls"]
    assert steps >= 10  # fsyncs and renames of every group's swap, and the checkpoint
    for crash_at in range(1, steps + 1):
        d = _copy(base, tmp_path / f"crash-{crash_at}")
        proc = run(d, crash_at)
        assert proc.returncode == 9, (crash_at, proc.stderr[-2000:])
        recovered = Log(str(d / "topic-0"), LogConfig.from_props(COMPACT), mock_time)  # an unclean restart
        recovered.update_high_watermark(recovered.log_end_offset)
        records = records_of(recovered)
        got = {}
        for r in records:
            got[r.key] = (r.offset, r.value)
        assert got == latest, crash_at  # every key's last value, at its offset, whatever was half done
        assert recovered.log_end_offset == lg.log_end_offset
        assert not [n for n in os.listdir(d / "topic-0") if n.endswith((".cleaned", ".swap"))]
        recovered.close()


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_compacted_topic_refuses_records_without_key(tmp_path, mock_time):
    from strom.common.error_codes import ErrorCode, InvalidRecordError

    lg = open_log(tmp_path, mock_time)
    lg.append_as_leader(build_batch([b"a"], keys=[b"k"]))
    for compression in (0, 1):
        with pytest.raises(InvalidRecordError, match="Compacted topic cannot accept message without key") as e:
            lg.append_as_leader(build_batch([b"b", b"c"], keys=[b"k", None], compression=compression))
        assert e.value.errno == ErrorCode.INVALID_RECORD
    assert lg.log_end_offset == 1
    plain = Log(str(tmp_path / "plain-0"), LogConfig.from_props({}), mock_time)
    assert plain.append_as_leader(build_batch([b"b"])).first_offset == 0  # delete-policy topics take them
    plain.close()
    lg.close()


def test_readers_during_cleaning_always_see_a_consistent_log(tmp_path, mock_time):
    import threading

    lg = open_log(tmp_path, mock_time)
    latest = write_history(lg, rounds=20)
    cleaner = cleaner_for(tmp_path, mock_time, lg)
    stop = threading.Event()
    problems: list[str] = []
    passes = [0]

    def reader() -> None:
        while not stop.is_set():
            offset, last = 0, -1
            try:
                while offset < lg.log_end_offset:
                    data = lg.read(offset, 1 << 20).records
                    if not data:
                        break
                    for base, last_offset, raw in split_batches(data):
                        batch = RecordBatch(raw)
                        if not batch.is_valid() or base <= last:
                            problems.append(f"bad batch {base} after {last}")
                        last = last_offset
                    offset = last + 1
            except Exception as e:  # noqa: BLE001 - any failure of a read is what this test looks for
                problems.append(repr(e))
            passes[0] += 1

    t = threading.Thread(target=reader)
    t.start()
    try:
        for r in range(5):
            cleaner.clean_once()
            latest.update({b"key-%d" % r: (lg.append_as_leader(build_batch([b"again"], keys=[b"key-%d" % r])).first_offset, b"again")})
            lg.roll()
            lg.update_high_watermark(lg.log_end_offset)
        deadline = _time.monotonic() + 20
        start_passes = passes[0]
        while passes[0] < start_passes + 3:  # let the reader finish a few full passes over the final log
            assert _time.monotonic() < deadline
            _time.sleep(0.01)
    finally:
        stop.set()
        t.join()
    cleaner.clean_once()
    assert problems == []
    assert {r.key: (r.offset, r.value) for r in records_of(lg)} == latest
    lg.close()


def test_small_segments_merge_into_one_and_every_survivor_is_seekable(tmp_path, mock_time):
    lg = open_log(tmp_path, mock_time)
    latest = {}
    for i in range(40):
        key = b"key-%d" % (i % 7)
        latest[key] = (lg.append_as_leader(build_batch([b"v%d" % i], keys=[key])).first_offset, b"v%d" % i)
        if i % 3 == 2:
            lg.roll()  # many small segments
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    segments_before = lg.num_segments
    cleaner_for(tmp_path, mock_time, lg).clean_once()
    assert lg.num_segments < segments_before / 3  # groups of small segments became one segment each
    for key, (offset, value) in latest.items():  # a consumer seeking to each survivor finds it
        first = RecordBatch(split_batches(lg.read(offset, 1).records)[0][2]).records()
        assert [(r.key, r.value) for r in first if r.offset == offset] == [(key, value)]
    assert lg.read(0, 1 << 20).records  # and reading from the start works too
    assert {r.key: (r.offset, r.value) for r in records_of(lg)} == latest
    lg.close()


def test_log_manager_truncation_lowers_the_cleaner_checkpoint(tmp_path, mock_time):
    lm = LogManager([str(tmp_path)], LogConfig.from_broker_props({}), mock_time)
    lm.load_logs()
    lg = lm.get_or_create_log(TP, LogConfig.from_props(COMPACT))
    write_history(lg)
    assert lm.cleaner.clean_once() is not None
    checkpoint = tmp_path / CLEANER_OFFSET_CHECKPOINT_FILE
    assert checkpoint.read_text() == f"0\n1\ntopic 0 {lg.log_end_offset}\n"
    assert lm.truncate_to(TP, 20)
    assert lg.log_end_offset <= 20
    assert checkpoint.read_text() == f"0\n1\ntopic 0 {lg.log_end_offset}\n"
    lm.truncate_fully_and_start_at(TP, 100)
    assert checkpoint.read_text() == "0\n1\ntopic 0 100\n"
    assert lm.cleaner.clean_once() is None  # paused states were released: nothing dirty, nothing to do
    lg.append_as_leader(build_batch([b"a"], keys=[b"k"]))
    lg.append_as_leader(build_batch([b"b"], keys=[b"k"]))
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    assert lm.cleaner.clean_once() is not None  # and cleaning resumes
    assert [(r.offset, r.value) for r in records_of(lg)] == [(101, b"b")]
    lm.shutdown()


# --- transactions ------------------------------------------------------------------------------------------------

TXN = 0x10  # the transactional attribute


def txn_batch(lg: Log, pid: int, seq: int, key: bytes, value: bytes) -> int:
    """One transactional record of producer ``pid``; returns its offset."""
    batch = build_batch([value], keys=[key], attributes=TXN, producer_id=pid, producer_epoch=0, base_sequence=seq)
    return lg.append_as_leader(batch).first_offset


def end_txn(lg: Log, pid: int, kind: ControlRecordType) -> int:
    info = lg.append_as_leader(build_control_batch(kind, 0, pid, 0, T0), origin=AppendOrigin.COORDINATOR)
    return info.first_offset


def batches_of(lg: Log) -> list[RecordBatch]:
    out, offset = [], lg.log_start_offset
    while offset < lg.log_end_offset:
        batches = split_batches(lg.read(offset, 1 << 20).records)
        out += [RecordBatch(raw) for _b, _l, raw in batches]
        offset = batches[-1][1] + 1
    return out


def data_of(lg: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for b in batches_of(lg) if not b.is_control for r in b.records()]


def markers_of(lg: Log) -> list[tuple[int, bool]]:
    """(offset, has a delete horizon) of every transaction marker."""
    return [(b.base_offset, bool(b.attributes & DELETE_HORIZON_FLAG)) for b in batches_of(lg) if b.is_control]


def test_aborted_data_supersedes_nothing_and_goes_then_its_marker_goes_after_the_horizon(tmp_path, mock_time):
    lg = open_log(tmp_path, mock_time, {"delete.retention.ms": "1000"})
    lg.append_as_leader(build_batch([b"v1"], keys=[b"k1"]))                   # 0 committed k1
    assert txn_batch(lg, 7, 0, b"k1", b"aborted") == 1                          # 1 k1 in a txn that aborts
    assert end_txn(lg, 7, ControlRecordType.ABORT) == 2                         # 2
    txn_batch(lg, 7, 1, b"k3", b"x")                                            # 3 the next txn of pid 7 ...
    end_txn(lg, 7, ControlRecordType.COMMIT)                                    # 4 ... commits
    txn_batch(lg, 8, 0, b"k2", b"c1")                                           # 5 committed, superseded by 7
    end_txn(lg, 8, ControlRecordType.COMMIT)                                    # 6
    lg.append_as_leader(build_batch([b"v2"], keys=[b"k2"]))                   # 7
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    cleaner = cleaner_for(tmp_path, mock_time, lg)
    stats = cleaner.clean_once()
    assert stats is not None and stats.aborted_records_removed == 1
    # k1's committed value survives: the aborted write was not taken as its latest value
    assert data_of(lg) == [(0, b"k1", b"v1"), (3, b"k3", b"x"), (7, b"k2", b"v2")]
    # pid 8's batch lost its record but stays as an empty batch (it is the producer's last one)
    assert [(b.base_offset, b.records_count) for b in batches_of(lg) if b.producer_id == 8 and not b.is_control] \
        == [(5, 0)]
    # every marker stays: each transaction still had a batch before it in this cleaning
    assert markers_of(lg) == [(2, False), (4, False), (6, False)]

    # The next cleaning finds no batch of pid 7's aborted transaction before its marker: the marker gets a
    # delete horizon; the commit markers still follow batches of their transactions.
    lg.append_as_leader(build_batch([b"z"], keys=[b"k9"]))
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    assert cleaner.clean_once() is not None
    assert markers_of(lg) == [(2, True), (4, False), (6, False)]
    abort = next(b for b in batches_of(lg) if b.base_offset == 2)
    assert abort.base_timestamp == mock_time.milliseconds() + 1000
    assert abort.control_record_type() == ControlRecordType.ABORT  # still a valid marker
    mock_time.sleep(1000)
    stats = cleaner.clean_once()  # the horizon passed: clean to drop it
    assert stats is not None and stats.markers_removed == 1
    assert markers_of(lg) == [(4, False), (6, False)]
    assert data_of(lg) == [(0, b"k1", b"v1"), (3, b"k3", b"x"), (7, b"k2", b"v2"), (8, b"k9", b"z")]
    lg.close()
    reopened = open_log(tmp_path, mock_time)  # producer state and the LSO rebuilt from the cleaned log
    reopened.update_high_watermark(reopened.log_end_offset)
    assert reopened.last_stable_offset == reopened.log_end_offset
    reopened.close()


def test_an_open_transaction_stops_the_cleaning_at_its_first_record(tmp_path, mock_time):
    lg = open_log(tmp_path, mock_time)
    lg.append_as_leader(build_batch([b"a"], keys=[b"k"]))                     # 0
    lg.append_as_leader(build_batch([b"b"], keys=[b"k"]))                     # 1
    txn_batch(lg, 9, 0, b"k", b"open")                                          # 2: may still abort
    lg.append_as_leader(build_batch([b"c"], keys=[b"k"]))                     # 3
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.first_unstable_offset == 2
    cleaner_for(tmp_path, mock_time, lg).clean_once()
    # only [0, 2) was cleanable: had offset 3 counted, the open transaction's record and offset 1 would be gone
    assert data_of(lg) == [(1, b"k", b"b"), (2, b"k", b"open"), (3, b"k", b"c")]
    with open(tmp_path / CLEANER_OFFSET_CHECKPOINT_FILE) as f:
        assert f.read().split()[-1] == "2"
    lg.close()
