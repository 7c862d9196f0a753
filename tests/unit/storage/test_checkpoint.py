"""OffsetCheckpointFile: Kafka's text format, atomic replacement, strict parsing."""

from __future__ import annotations

import os

import pytest

from strom.common.structs import TopicPartition
from strom.storage import fs
from strom.storage.checkpoint import CorruptCheckpointError, OffsetCheckpointFile

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def test_round_trip_and_format(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    cp = OffsetCheckpointFile(str(path))
    assert cp.read() == {}  # missing file
    data = {TopicPartition("a.b-c", 3): 42, TopicPartition("a.b-c", 0): 0, TopicPartition("z", 1): 2**40}
    cp.write(data)
    assert cp.read() == data
    assert path.read_text() == "0\n3\na.b-c 0 0\na.b-c 3 42\nz 1 1099511627776\n"
    cp.write({})
    assert cp.read() == {} and path.read_text() == "0\n0\n"
    assert not os.path.exists(str(path) + ".tmp")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "0\n",
        "1\n0\n",
        "x\n0\n",
        "0\nx\n",
        "0\n2\nt 0 1\n",
        "0\n1\nt 0\n",
        "0\n1\nt x 1\n",
        "0\n1\nt 0 1 2\n",
        "0\n0\nt 0 1\n",
    ],
)
def test_corrupt_files_raise(tmp_path, text):
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError) as exc:
        OffsetCheckpointFile(str(path)).read()
    assert str(path) in str(exc.value)


def test_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "cp"
    cp = OffsetCheckpointFile(str(path))
    old = {TopicPartition("t", 0): 1}
    cp.write(old)

    def crash(*_args: object) -> None:
        raise OSError("crash before rename")

    monkeypatch.setattr(fs.os, "replace", crash)
    with pytest.raises(OSError):
        cp.write({TopicPartition("t", 0): 99})
    monkeypatch.undo()
    assert cp.read() == old  # the old content survives a failure before the rename
    cp.write({TopicPartition("t", 0): 99})
    assert cp.read() == {TopicPartition("t", 0): 99}


def test_rejects_topic_with_space(tmp_path):
    with pytest.raises(ValueError):
        OffsetCheckpointFile(str(tmp_path / "cp")).write({TopicPartition("a b", 0): 1})
