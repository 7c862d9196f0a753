"""The cleaner's record work in a worker process: the same cleaning as in-thread, byte for byte, and a worker that
dies fails only the cleaning in progress."""

from __future__ import annotations

import os
import signal

import pytest

from strom.record.batch import RecordBatch
from strom.storage.cleaner_records import ProcessRecordFilter

from .test_log_cleaner import cleaner_for, open_log, records_of, write_history

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def _segment_bytes(lg) -> list[bytes]:
    return [open(s.log.path, "rb").read() for s in lg.segments]


def test_worker_process_cleans_exactly_as_the_thread_does(tmp_path, mock_time):
    logs = {}
    for mode in ("thread", "process"):
        lg = open_log(tmp_path / mode, mock_time)
        latest = write_history(lg, rounds=12, keys=7)
        cleaner = cleaner_for(tmp_path / mode, mock_time, lg)
        cleaner._worker_processes = mode == "process"
        stats = cleaner.clean_once()
        assert stats is not None and stats.records_read > stats.records_written > 0
        kinds = {type(c.records).__name__ for c in cleaner._cleaners}
        assert kinds == {"ProcessRecordFilter" if mode == "process" else "RecordFilter"}
        cleaner.shutdown()
        logs[mode] = (lg, latest, stats)
    (thread_log, latest, thread_stats), (process_log, _, process_stats) = logs["thread"], logs["process"]
    assert _segment_bytes(process_log) == _segment_bytes(thread_log)
    assert (process_stats.records_read, process_stats.records_written, process_stats.map_records_read,
            process_stats.bytes_written) == (thread_stats.records_read, thread_stats.records_written,
                                             thread_stats.map_records_read, thread_stats.bytes_written)
    survivors = {r.key: (r.offset, r.value) for r in records_of(process_log)}
    assert survivors == latest


def test_a_worker_that_dies_fails_the_call_and_the_next_call_starts_a_new_one(tmp_path, mock_time, monkeypatch):
    lg = open_log(tmp_path, mock_time)
    latest = write_history(lg, rounds=12, keys=7)
    seg = lg.segments[0]
    first_batch = next(iter(seg.log.batches()))
    item = (first_batch.position, first_batch.size, first_batch.last_offset, first_batch.header.records_count, True)
    work = ProcessRecordFilter(1 << 20)
    work.reset(0)  # starts the worker
    first = work._proc
    assert first is not None and first.poll() is None
    conn = work._conn
    real_send = conn.send

    def dies_before_answering(request):  # the worker is gone by the time the request reaches it
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        return real_send(request)

    monkeypatch.setattr(conn, "send", dies_before_answering)
    with pytest.raises(OSError, match="worker process ended"):
        work.map_batches(seg.log.path, [item], 0)
    assert work._proc is None and first.returncode == -signal.SIGKILL
    work.reset(0)  # a new worker
    second = work._proc
    assert second is not None and second.pid != first.pid
    assert work.map_batches(seg.log.path, [item], 0) == (-1, first_batch.header.records_count, first_batch.size)
    os.kill(second.pid, signal.SIGKILL)  # dead between calls: replaced before the next one
    second.wait()
    work.reset(0)
    assert work._proc is not None and work._proc.pid not in (first.pid, second.pid)
    work.close()
    # a cleaner with its own worker still cleans the log
    cleaner = cleaner_for(tmp_path, mock_time, lg)
    assert cleaner.clean_once() is not None
    assert {r.key: (r.offset, r.value) for r in records_of(lg)} == latest
    cleaner.shutdown()


def test_worker_errors_come_back_as_the_same_exception(tmp_path):
    path = tmp_path / "garbage.log"
    path.write_bytes(b"\x00" * 200)
    work = ProcessRecordFilter(1 << 20)
    try:
        work.reset(0)
        with pytest.raises(Exception) as thread_error:
            RecordBatch(b"\x00" * 100).records()
        with pytest.raises(type(thread_error.value)):
            work.map_batches(str(path), [(0, 100, 0, 1, True)], 0)
        with pytest.raises(OSError, match="ends at 200"):
            work.map_batches(str(path), [(150, 100, 0, 1, True)], 0)
    finally:
        work.close()


def test_the_worker_exits_when_the_broker_side_closes(tmp_path):
    work = ProcessRecordFilter(1 << 20)
    work.reset(0)
    proc = work._proc
    assert proc is not None
    conn = work._conn
    assert conn is not None
    conn.close()  # as when the broker process dies: the worker reads EOF
    assert proc.wait(10) == 0
