"""`strom dump-log` (kafka-dump-log.sh) on the segment and index files a real broker wrote."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from strom.admin import AdminClient, NewTopic
from strom.producer import KafkaProducer
from strom.testing.broker_process import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def dump(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", "dump-log", *args], capture_output=True,
                          text=True, timeout=60)


def test_segments_and_indexes_of_a_real_broker(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with BrokerProcess(data_dir=data, overrides={"log.index.interval.bytes": "1"}) as broker:
        with AdminClient({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.create_topics([NewTopic("dumped", 1, 1)]).all().result(30)
        with KafkaProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "compression.type": "gzip"},
                           key_serializer="str", value_serializer="str") as producer:
            for i in range(3):
                producer.send("dumped", key=f"k{i}", value=f"hello {i}", timestamp=1_700_000_000_000 + i).get(30)
        broker.stop()
    segment = data / "dumped-0" / "00000000000000000000.log"
    out = dump("--files", str(segment), "--print-data-log")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == [f"Dumping {segment}", "Log starting offset: 0"]
    batches = [ln for ln in lines if ln.startswith("baseOffset:")]
    assert len(batches) == 3  # one synchronous send per batch
    assert all("compresscodec: gzip" in b and "isvalid: true" in b and "count: 1" in b for b in batches)
    assert "CreateTime: 1700000000001" in batches[1] and "position: 0 " in batches[0]
    records = [ln for ln in lines if ln.startswith("| offset:")]
    assert records[2].startswith("| offset: 2 CreateTime: 1700000000002 keySize: 2 valueSize: 7")
    assert records[2].endswith("key: k2 payload: hello 2")
    deep = dump("--files", str(segment), "--deep-iteration").stdout
    assert "| offset: 1 " in deep and "payload" not in deep
    index = dump("--files", f"{segment.with_suffix('.index')},{segment.with_suffix('.timeindex')}").stdout
    assert "offset: 2 position: " in index and "timestamp: 1700000000002 offset: 2" in index

    # a torn tail is reported, not raised; a corrupted batch is isvalid: false
    raw = bytearray(segment.read_bytes())
    raw[-3] ^= 0xFF
    torn = tmp_path / "00000000000000000000.log"
    torn.write_bytes(bytes(raw) + b"\x00\x00\x00")
    lines = dump("--files", str(torn)).stdout.splitlines()
    assert lines[-2].endswith("isvalid: false")
    assert lines[-1] == "Found 3 invalid bytes at the end of 00000000000000000000.log"
    torn.write_bytes(bytes(raw) + raw[:40])  # a batch header whose batch is cut short
    assert dump("--files", str(torn)).stdout.splitlines()[-1] == (
        f"Found 40 invalid bytes at the end of 00000000000000000000.log (a torn batch at position {len(raw)})")


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    out = dump("--files", str(tmp_path / "missing.log"))
    assert out.returncode == 1 and out.stderr.startswith("Error: Cannot read")
    out = dump("--files", str(tmp_path / "notes.txt"))
    assert out.returncode == 2 and out.stderr.strip().endswith("not a .log, .index or .timeindex file")
