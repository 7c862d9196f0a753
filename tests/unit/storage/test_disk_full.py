"""Issue 15: a disk that fills up in the middle of an append leaves the log exactly as before the append.

The log lives on a real 2 MiB tmpfs (we run as root, as CI does), so the kernel answers a partial write and then
ENOSPC. Where mounting is not allowed, the same scenario runs under RLIMIT_FSIZE, where the kernel likewise
writes up to the limit and then fails (EFBIG): a real partial write either way, nothing injected.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from .conftest import mount_tmpfs, unmount

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

SCRIPT = """
    import json, os, resource, signal, sys
    d, mode = sys.argv[1], sys.argv[2]
    if mode == "fsize":
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing us
        resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, resource.RLIM_INFINITY))
    from strom.common.error_codes import KafkaStorageError
    from strom.storage.log import Log
    from strom.storage.log_config import LogConfig
    from tests.unit.storage._batches import build_batch

    config = LogConfig.from_props({"segment.bytes": str(1 << 30), "index.interval.bytes": "1"})
    lg = Log(os.path.join(d, "full-0"), config)
    segment_file = lg.active_segment.log.path
    acked, error = [], None
    for i in range(1000):
        value = (b"%06d" % i) * 5000  # 30 KB records: the failing write is cut in the middle
        size_before = os.stat(segment_file).st_size
        try:
            info = lg.append_as_leader(build_batch([value]), leader_epoch=0)
        except KafkaStorageError as e:
            error = str(e)
            break
        acked.append((info.first_offset, value))
    lg.update_high_watermark(lg.log_end_offset)
    after = os.stat(segment_file).st_size
    readable = all(v in lg.read(o, 1 << 20).records for o, v in acked)
    try:
        lg.close()
        close_error = None
    except KafkaStorageError as e:
        close_error = str(e)
    recovered = Log(os.path.join(d, "full-0"), config, had_clean_shutdown=False)
    recovered.update_high_watermark(recovered.log_end_offset)
    print(json.dumps({
        "acked": len(acked), "error": error, "size_before": size_before, "size_after": after,
        "leo": lg.log_end_offset, "readable": readable, "close_error": close_error,
        "truncated_on_recovery": recovered.truncated_bytes_on_load, "leo_recovered": recovered.log_end_offset,
        "recovered_readable": all(v in recovered.read(o, 1 << 20).records for o, v in acked),
        "tmp_files": [n for n in os.listdir(os.path.join(d, "full-0")) if n.endswith(".tmp")],
    }))
"""


def test_failed_append_on_full_disk_leaves_no_stray_bytes(tmp_path):
    disk = tmp_path / "disk"
    mounted = mount_tmpfs(disk, "2m")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(SCRIPT), str(disk), "tmpfs" if mounted else "fsize"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=110,
        )
    finally:
        if mounted:
            unmount(disk)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["error"] is not None and ("No space left" in out["error"] or "too large" in out["error"])
    assert 10 < out["acked"] < 1000
    # The failed batch was partly written by the kernel; the file is back to its size before the append.
    assert out["size_after"] == out["size_before"]
    assert out["leo"] == out["acked"] and out["readable"]
    assert out["truncated_on_recovery"] == 0  # recovery finds no torn tail: there was none left
    assert out["leo_recovered"] == out["acked"] and out["recovered_readable"]
    assert out["tmp_files"] == []


DELETE_SCRIPT = """
    import json, os, resource, signal, sys
    d, mode = sys.argv[1], sys.argv[2]
    if mode == "fsize":
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))
    from strom.common.error_codes import KafkaStorageError
    from strom.common.structs import TopicPartition
    from strom.storage.log_config import LogConfig
    from strom.storage.log_manager import LogManager
    from tests.unit.storage._batches import build_batch

    lm = LogManager([d], LogConfig.from_broker_props({"log.segment.bytes": str(1 << 30)}))
    lm.load_logs()
    big, small = TopicPartition("big", 0), TopicPartition("small", 0)
    lm.get_or_create_log(small).append_as_leader(build_batch([b"s"]))
    lg = lm.get_or_create_log(big)
    full = None
    for i in range(1000):
        try:
            lg.append_as_leader(build_batch([b"x" * 30000]))
        except KafkaStorageError as e:
            full = str(e)
            break
    free_before = os.statvfs(d).f_bavail
    lm.delete_log(big)  # frees the space even though no byte can be written
    free_after = os.statvfs(d).f_bavail
    info = lm.get_log(small).append_as_leader(build_batch([b"t" * 30000]))
    acked = 2
    for i in range(1000):  # fill the disk again, then shut down on it
        try:
            lm.get_log(small).append_as_leader(build_batch([b"u" * 30000]))
            acked += 1
        except KafkaStorageError:
            break
    dirs = sorted(os.listdir(d))
    lm.shutdown()  # must not raise: checkpoints that cannot be written make the next start recover instead
    lm = LogManager([d], LogConfig.from_broker_props({}))
    lm.load_logs()
    leo = lm.get_log(small).log_end_offset
    lm.shutdown()
    print(json.dumps({"full": full, "freed": free_after > free_before, "after_delete": info.first_offset,
                      "dirs": dirs, "acked": acked, "leo_after_restart": leo}))
"""


def test_deleting_a_topic_on_a_full_disk_frees_space(tmp_path):
    disk = tmp_path / "disk"
    mounted = mount_tmpfs(disk, "2m")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(DELETE_SCRIPT), str(disk), "tmpfs" if mounted else "fsize"],
            capture_output=True, text=True, cwd=ROOT, timeout=110,
        )
    finally:
        if mounted:
            unmount(disk)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["full"] is not None
    assert out["after_delete"] == 1
    assert out["leo_after_restart"] == out["acked"]  # every acknowledged record survived the full-disk shutdown
    assert "big-0" not in out["dirs"] and not [n for n in out["dirs"] if n.endswith("-delete")]
    if mounted:
        assert out["freed"]
