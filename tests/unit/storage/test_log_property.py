"""Property tests: random batch sequences, reads from random offsets return exactly the right batches;
a flush thread running alongside appends never corrupts anything."""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.storage.log import Log
from strom.storage.log_config import LogConfig

from ._batches import build_batch, split_batches

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

batch_specs = st.lists(
    st.tuples(st.integers(1, 5), st.integers(0, 60)),  # (records, value size)
    min_size=1,
    max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    specs=batch_specs,
    segment_bytes=st.sampled_from([500, 1000, 5000]),
    interval=st.sampled_from([0, 100, 4096]),
    data=st.data(),
)
def test_reads_return_the_batches_containing_the_offset(
    tmp_path_factory, mock_time, specs, segment_bytes, interval, data
):
    config = LogConfig.from_props(
        {"segment.bytes": str(segment_bytes), "index.interval.bytes": str(interval)}
    )
    lg = Log(str(tmp_path_factory.mktemp("p") / "t-0"), config, mock_time)
    expected: list[tuple[int, int, bytes]] = []  # (base, last, bytes after the offset field)
    for n, size in specs:
        batch = build_batch([b"v" * size] * n)
        info = lg.append_as_leader(batch)
        expected.append((info.first_offset, info.last_offset, batch[16:]))
    leo = lg.log_end_offset
    assert leo == sum(n for n, _ in specs)

    def check(lg: Log) -> None:
        for _ in range(10):
            offset = data.draw(st.integers(0, leo - 1))
            max_bytes = data.draw(st.integers(0, 3000))
            result = split_batches(lg.read(offset, max_bytes).records)
            assert result, "min_one_message must return a batch"
            first = next(i for i, (b, last, _) in enumerate(expected) if b <= offset <= last)
            want = expected[first : first + len(result)]
            assert [(b, last, raw[16:]) for b, last, raw in result] == want
            assert len(result) == 1 or sum(len(r[2]) for r in result) <= max_bytes
            # everything read is from one segment, and we stop only at a segment end or at max_bytes
            if first + len(result) < len(expected):
                nxt = expected[first + len(result)]
                in_same_segment = (
                    lg.read(nxt[0], 1).segment_base_offset == lg.read(offset, 1).segment_base_offset
                )
                if in_same_segment:
                    assert sum(len(r[2]) for r in result) + len(nxt[2]) + 16 > max_bytes

    check(lg)
    lg.close()
    reopened = Log(lg.dir, config, mock_time, had_clean_shutdown=False)
    assert reopened.log_end_offset == leo
    check(reopened)
    reopened.close()


def test_flush_thread_alongside_appends(tmp_path, mock_time):
    lg = Log(str(tmp_path / "t-0"), LogConfig.from_props({"segment.bytes": "4000"}), mock_time)
    stop = threading.Event()
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                lg.flush()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for i in range(300):
            lg.append_as_leader(build_batch([b"x" * 100] * (1 + i % 3)))
            if i % 50 == 0:
                lg.update_high_watermark(lg.log_end_offset)
                lg.delete_records_before(lg.log_end_offset // 2)
                lg.delete_old_segments()
    finally:
        stop.set()
        t.join(20)
    assert not errors and not t.is_alive()
    lg.flush()
    assert lg.recovery_point == lg.log_end_offset
    lg.close()
