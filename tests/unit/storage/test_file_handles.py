"""Issue 15: thousands of partitions within a small RLIMIT_NOFILE; raising the limit; refusing what cannot fit."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from strom.common.structs import TopicPartition
from strom.storage.fs import FileHandleCache, PooledFile
from strom.storage.log_config import LogConfig
from strom.storage.log_manager import LogManager

pytestmark = [pytest.mark.unit, pytest.mark.timeout(180)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def run_child(script: str, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


FLOOD = """
    import json, os, resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))  # before strom sizes its descriptor cache
    from strom.common.structs import TopicPartition
    from strom.storage.fs import FILE_HANDLES, count_open_fds
    from strom.storage.log_config import LogConfig
    from strom.storage.log_manager import LogManager
    from tests.unit.storage._batches import build_batch

    d, n = sys.argv[1], 2000
    config = LogConfig.from_broker_props({"log.segment.bytes": "1000", "log.index.interval.bytes": "1"})
    peak = 0
    def value(p, i):
        return b"p%d-%d" % (p, i) + b"x" * 300
    lm = LogManager([d], config)
    lm.load_logs()
    for p in range(n):
        lg = lm.get_or_create_log(TopicPartition("flood", p))
        for i in range(4):  # 4 batches of ~370 B in 1000-byte segments: two segments per partition
            lg.append_as_leader(build_batch([value(p, i)]), leader_epoch=1)
        lg.update_high_watermark(lg.log_end_offset)
        peak = max(peak, count_open_fds())
    segments = sum(lg.num_segments for _tp, lg in lm.all_logs())
    for p in range(n):
        data = lm.get_log(TopicPartition("flood", p)).read(0, 1 << 20).records
        assert value(p, 0) in data and value(p, 1) in data, p
    lm.shutdown()
    lm = LogManager([d], config)
    loaded = lm.load_logs()
    for p in range(n):
        lg = lm.get_log(TopicPartition("flood", p))
        lg.update_high_watermark(lg.log_end_offset)
        assert lg.log_end_offset == 4 and lg.recovered_segments_on_load == 0
        assert value(p, 3) in lg.read(3, 1 << 20).records, p
        lg.append_as_leader(build_batch([b"after restart"]), leader_epoch=2)
        peak = max(peak, count_open_fds())
    lm.shutdown()
    print(json.dumps({"loaded": loaded, "segments": segments, "peak_fds": peak,
                      "capacity": FILE_HANDLES.capacity, "opens": FILE_HANDLES.opens}))
"""


def test_2000_partitions_with_256_file_limit_then_clean_restart(fast_dir, caplog):
    tmp_path = fast_dir
    out = run_child(FLOOD, str(tmp_path))
    assert out["loaded"] == 2000
    assert out["segments"] >= 4000  # 2 segments x 3 files each: 24,000 files behind 256 descriptors
    assert out["peak_fds"] < 256 and out["capacity"] == 128
    caplog.set_level(logging.INFO, logger="strom.storage.log_manager")
    lm = LogManager([str(tmp_path)], LogConfig.from_broker_props({}))
    assert lm.load_logs() == 2000
    assert f"loaded 2000 logs from {tmp_path} (clean shutdown: True)" in caplog.text
    assert lm.get_log(TopicPartition("flood", 1999)).log_end_offset == 5
    lm.shutdown()


RAISE = """
    import json, resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096))
    from strom.storage.fs import FILE_HANDLES, raise_open_file_limit
    before = FILE_HANDLES.capacity
    old, new = raise_open_file_limit()
    print(json.dumps({"old": old, "new": new, "soft": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                      "before": before, "after": FILE_HANDLES.capacity}))
"""


def test_raise_open_file_limit_to_hard_limit():
    out = run_child(RAISE)
    assert (out["old"], out["new"], out["soft"]) == (256, 4096, 4096)
    assert (out["before"], out["after"]) == (128, 2048)


NO_FDS = """
    import json, os, resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    from strom.storage.log_config import LogConfig
    from strom.storage.log_manager import LogManager
    lm = LogManager([sys.argv[1]], LogConfig.from_broker_props({}))
    lm.load_logs()
    ok = lm.check_capacity(100)
    held = []
    try:
        while True:
            held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        for fd in held[-8:]:
            os.close(fd)
    print(json.dumps({"ok": ok, "full": lm.check_capacity(1)}))
"""


def test_check_capacity_refuses_when_descriptors_are_exhausted(tmp_path):
    out = run_child(NO_FDS, str(tmp_path))
    assert out["ok"] is None
    assert "cannot create 1 partitions" in out["full"] and "RLIMIT_NOFILE" in out["full"]


def test_check_capacity_refuses_what_memory_cannot_hold(tmp_path):
    lm = LogManager([str(tmp_path)], LogConfig.from_broker_props({}))
    try:
        assert lm.check_capacity(10) is None
        msg = lm.check_capacity(10**9)
        assert msg is not None and "cannot create 1000000000 partitions" in msg and "MiB" in msg
    finally:
        lm.shutdown()


def test_handle_cache_evicts_least_recently_used_idle_files_and_never_pinned_ones(tmp_path):
    cache = FileHandleCache(2)
    files = [PooledFile(str(tmp_path / f"f{i}"), cache) for i in range(3)]
    assert len(cache) == 2 and not files[0].is_open  # creating f2 closed f0, the least recently used
    fd1 = files[1].acquire()  # pinned
    files[0].acquire()
    files[0].release()
    files[2].acquire()
    files[2].release()
    assert files[1].is_open and os.fstat(fd1)  # the pinned descriptor stayed open through two evictions
    assert len(cache) <= 3
    files[1].release()
    os.pwrite(files[0].acquire(), b"data", 0)
    files[0].release()
    for f in files:
        f.close()
    assert len(cache) == 0
    assert (tmp_path / "f0").read_bytes() == b"data"


def test_new_log_dir_does_not_report_an_unclean_shutdown(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="strom.storage.log_manager")
    lm = LogManager([str(tmp_path / "fresh")], LogConfig.from_broker_props({}))
    assert lm.load_logs() == 0
    lm.shutdown()
    assert "clean shutdown: False" not in caplog.text
    assert f"no logs in {tmp_path / 'fresh'}" in caplog.text


def test_a_pinned_file_skipped_by_eviction_keeps_its_least_recently_used_place(tmp_path):
    cache = FileHandleCache(3)
    files = [PooledFile(str(tmp_path / f"f{i}"), cache) for i in range(3)]
    files[0].acquire()  # pinned, then the others used after it: LRU order f0 (pinned), f1, f2
    for f in files[1:]:
        f.acquire()
        f.release()
    f3 = PooledFile(str(tmp_path / "f3"), cache)
    assert [f.is_open for f in files] == [True, False, True] and f3.is_open  # f1 went, not the pinned f0
    files[0].release()
    f4 = PooledFile(str(tmp_path / "f4"), cache)  # f0 is still the least recently used: it goes next
    assert [f.is_open for f in (*files, f3, f4)] == [False, False, True, True, True]
    assert len(cache) == 3
    for f in (*files, f3, f4):
        f.close()
