"""`strom console-producer` / `strom console-consumer` (Kafka's console tools) against a broker subprocess."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from strom.broker_process import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

CLI = [sys.executable, "-m", "strom.cli.main"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("cli-console") / "data",
                      overrides={"group.initial.rebalance.delay.ms": "0", "auto.create.topics.enable": "false"})
    b.start()
    yield b
    b.stop()
    b.cleanup()


def strom(*args: str, input: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, input=input, timeout=timeout,
                          stdin=None if input is not None else subprocess.DEVNULL)


def create(broker: BrokerProcess, topic: str, partitions: int = 1) -> None:
    out = strom("topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", topic, "--partitions",
                str(partitions))
    assert out.returncode == 0, out.stderr


def produce(broker: BrokerProcess, topic: str, text: str, *extra: str) -> None:
    out = strom("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic, *extra, input=text)
    assert (out.returncode, out.stderr) == (0, ""), out.stderr


def consume(broker: BrokerProcess, topic: str, *extra: str) -> subprocess.CompletedProcess[str]:
    out = strom("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic, *extra)
    assert out.returncode == 0, out.stderr
    return out


def test_keys_and_print_properties(broker: BrokerProcess) -> None:
    create(broker, "keyed")
    # the spelling: several properties after one --property (Kafka's repeated flag works too)
    produce(broker, "keyed", "k1:v1\nk2:v2\n:empty-key\nk4:\n", "--property", "parse.key=true", "key.separator=:")
    out = consume(broker, "keyed", "--from-beginning", "--max-messages", "4", "--property", "print.key=true",
                  "print.timestamp=true", "print.partition=true", "--property", "print.offset=true")
    lines = out.stdout.splitlines()
    assert len(lines) == 4
    for offset, (line, (key, value)) in enumerate(zip(lines, [("k1", "v1"), ("k2", "v2"), ("", "empty-key"),
                                                              ("k4", "")], strict=True)):
        m = re.fullmatch(r"CreateTime:(\d+)\tPartition:0\tOffset:(\d+)\t(.*)\t(.*)", line)
        assert m is not None, line
        assert (int(m.group(2)), m.group(3), m.group(4)) == (offset, key, value)
    assert out.stderr.strip().splitlines()[-1] == "Processed a total of 4 messages"
    sep = consume(broker, "keyed", "--from-beginning", "--max-messages", "1", "--property", "print.key=true",
                  "--property", "key.separator= => ", "--property", "print.value=true")
    assert sep.stdout == "k1 => v1\n"


def test_headers_and_null_marker(broker: BrokerProcess) -> None:
    create(broker, "headers")
    produce(broker, "headers", "h1:a,h2:b\tkey\tvalue\n\tNULL\tNULL\n", "--property", "parse.headers=true",
            "--property", "parse.key=true", "--property", "null.marker=NULL")
    out = consume(broker, "headers", "--from-beginning", "--max-messages", "2", "--property", "print.headers=true",
                  "--property", "print.key=true")
    assert out.stdout.splitlines() == ["h1:a,h2:b\tkey\tvalue", "NO_HEADERS\tnull\tnull"]


def test_partition_and_offset(broker: BrokerProcess) -> None:
    create(broker, "offsets")
    produce(broker, "offsets", "".join(f"m{i}\n" for i in range(5)))
    assert consume(broker, "offsets", "--partition", "0", "--offset", "2", "--max-messages", "2").stdout == "m2\nm3\n"
    assert consume(broker, "offsets", "--partition", "0", "--offset", "earliest",
                   "--max-messages", "1").stdout == "m0\n"
    assert consume(broker, "offsets", "--partition", "0", "--from-beginning",
                   "--max-messages", "1").stdout == "m0\n"
    latest = consume(broker, "offsets", "--partition", "0", "--timeout-ms", "500")
    assert latest.stdout == "" and latest.stderr.strip().endswith("Processed a total of 0 messages")
    missing = strom("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", "offsets",
                    "--partition", "3")
    assert missing.returncode == 1
    assert missing.stderr.strip() == ("Error: Partition 3 of topic 'offsets' does not exist (the topic has 1 "
                                      "partition)")


def test_group_commits_exactly_what_was_printed(broker: BrokerProcess) -> None:
    create(broker, "grouped", 2)
    produce(broker, "grouped", "".join(f"r{i}\n" for i in range(10)))
    first = consume(broker, "grouped", "--group", "cg", "--from-beginning", "--max-messages", "4")
    rest = consume(broker, "grouped", "--group", "cg", "--timeout-ms", "1500")
    assert len(first.stdout.splitlines()) == 4
    assert sorted(first.stdout.splitlines() + rest.stdout.splitlines()) == sorted(f"r{i}" for i in range(10))
    assert rest.stderr.strip().endswith("Processed a total of 6 messages")


def test_compression_acks_and_producer_properties(broker: BrokerProcess) -> None:
    create(broker, "codecs")
    sent = []
    for i, codec in enumerate(["none", "gzip", "snappy", "lz4", "zstd"]):
        sent.append(f"{codec}-{i}")
        produce(broker, "codecs", sent[-1] + "\n", "--compression-codec", codec)
    produce(broker, "codecs", "default-gzip\n", "--compression-codec")
    produce(broker, "codecs", "acks1\n", "--request-required-acks", "1", "--sync")
    produce(broker, "codecs", "acks0\n", "--request-required-acks", "0", "--producer-property", "linger.ms=0")
    produce(broker, "codecs", "acksall\n", "--producer-property", "acks=all", "--timeout", "5")
    out = consume(broker, "codecs", "--from-beginning", "--max-messages", "9")
    assert out.stdout.splitlines() == [*sent, "default-gzip", "acks1", "acks0", "acksall"]
    bad = strom("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", "codecs",
                "--producer-property", "lingr.ms=5", input="x\n")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "Error: Invalid producer configuration: Unknown configuration 'lingr.ms' (did you mean 'linger.ms'?)"]


def test_producer_config_file(broker: BrokerProcess, tmp_path) -> None:  # type: ignore[no-untyped-def]
    create(broker, "fromfile")
    config = tmp_path / "producer.properties"
    config.write_text(f"bootstrap.servers={broker.bootstrap}\nacks=1\ncompression.type=lz4\nlinger.ms=1\n")
    out = strom("console-producer", "--producer.config", str(config), "--topic", "fromfile", input="a\nb\n")
    assert (out.returncode, out.stderr) == (0, "")
    consumer_config = tmp_path / "consumer.properties"
    consumer_config.write_text(f"bootstrap.servers={broker.bootstrap}\nmax.poll.records=1\n")
    got = strom("console-consumer", "--consumer.config", str(consumer_config), "--topic", "fromfile",
                "--from-beginning", "--max-messages", "2")
    assert got.stdout == "a\nb\n"


def test_unknown_topic_is_one_line(broker: BrokerProcess) -> None:
    for command in ("console-producer", "console-consumer"):
        out = strom(command, "--bootstrap-server", broker.bootstrap, "--topic", "nosuch", input="x\n")
        assert out.returncode == 1
        assert out.stderr.strip().splitlines() == ["Error: Topic 'nosuch' does not exist"]


def test_ctrl_c_stops_the_producer_and_keeps_what_was_sent(broker: BrokerProcess) -> None:
    create(broker, "interrupted")
    producer = subprocess.Popen([*CLI, "console-producer", "--bootstrap-server", broker.bootstrap, "--topic",
                                 "interrupted"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        assert producer.stdin is not None
        producer.stdin.write("one\ntwo\n")
        producer.stdin.flush()
        got = consume(broker, "interrupted", "--from-beginning", "--max-messages", "2", "--timeout-ms", "20000")
        assert got.stdout == "one\ntwo\n"
        producer.send_signal(signal.SIGINT)
        _out, err = producer.communicate(timeout=20)
    finally:
        if producer.poll() is None:
            producer.kill()
    assert producer.returncode == 0 and err == ""


def test_consumer_sigterm_and_include_pattern(broker: BrokerProcess) -> None:
    create(broker, "pattern-a")
    create(broker, "pattern-b")
    produce(broker, "pattern-a", "from-a\n")
    produce(broker, "pattern-b", "from-b\n")
    consumer = subprocess.Popen([*CLI, "console-consumer", "--bootstrap-server", broker.bootstrap, "--include",
                                 "pattern-.*", "--from-beginning"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    try:
        assert consumer.stdout is not None
        lines = sorted(consumer.stdout.readline().strip() for _ in range(2))
        consumer.send_signal(signal.SIGTERM)
        _out, err = consumer.communicate(timeout=20)
    finally:
        if consumer.poll() is None:
            consumer.kill()
    assert lines == ["from-a", "from-b"]
    assert consumer.returncode == 0
    assert err.strip().splitlines()[-1] == "Processed a total of 2 messages"
