"""`strom broker` as a user runs it: properties files, overrides, bad keys, signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from strom.broker_process import BrokerProcess, free_port
from strom.testing.raw_client import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_unknown_key_is_one_line_and_exit_2(tmp_path) -> None:  # type: ignore[no-untyped-def]
    props = tmp_path / "server.properties"
    props.write_text("# a Kafka file\nnode.id=3\nnum.network.threads=3\nlog.segmnt.bytes=1000\n")
    out = _run("broker", "--config", str(props))
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == ["Error: Unknown configuration log.segmnt.bytes"]


def test_invalid_value_and_bad_override(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = _run("broker", "--override", "num.partitions=many", "--override", f"log.dirs={tmp_path}")
    assert out.returncode == 2
    assert "num.partitions" in out.stderr and "Traceback" not in out.stderr
    out = _run("broker", "--override", "num.partitions")
    assert out.returncode == 2 and "KEY=VALUE" in out.stderr
    out = _run("broker", "--config", str(tmp_path / "missing.properties"))
    assert out.returncode == 2 and "missing.properties" in out.stderr


def test_kafka_style_properties_file_and_sigint(tmp_path) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    props = tmp_path / "server.properties"
    props.write_text(
        "process.roles=broker,controller\n"
        "node.id=7\n"
        f"listeners=PLAINTEXT://127.0.0.1:{port}\n"
        f"log.dirs={tmp_path / 'data'}\n"
        "num.partitions=4\n"
        "log.retention.hours=1\n"
        "socket.send.buffer.bytes=102400\n"
    )
    proc = subprocess.Popen([sys.executable, "-m", "strom.cli.main", "broker", str(props)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert f"strom broker 7 ready on 127.0.0.1:{port}" in line
        from strom.protocol.messages.metadata import MetadataRequest

        with RawClient(f"127.0.0.1:{port}") as c:
            md = c.request(3, 9, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="auto")]))
            assert md.brokers[0].node_id == 7
            assert len(md.topics[0].partitions) == 4  # num.partitions applies to auto-created topics
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists() or (tmp_path / "data" / "topics.json").exists()


def test_port_in_use_is_a_clear_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with BrokerProcess(data_dir=tmp_path / "a") as b:
        out = _run("broker", "--override", f"listeners=PLAINTEXT://127.0.0.1:{b.port}",
                   "--override", f"log.dirs={tmp_path / 'b'}")
        assert out.returncode == 1
        assert "Cannot start the broker" in out.stderr and "Traceback" not in out.stderr


def test_sigterm_during_load_exits_cleanly(tmp_path) -> None:  # type: ignore[no-untyped-def]
    b = BrokerProcess(data_dir=tmp_path / "d").start()
    try:
        import confluent_kafka as ck

        p = ck.Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 1})
        for i in range(20_000):
            p.produce("busy", value=b"x" * 100)
            if i % 1000 == 0:
                p.poll(0)
        time.sleep(0.05)
        assert b.stop() == 0
    finally:
        b.cleanup()
