"""`strom topics` (kafka-topics.sh) and the user's notes, run as subprocesses against a broker subprocess."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from strom.broker_process import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

CLI = [sys.executable, "-m", "strom.cli.main"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("cli-topics") / "data",
                      overrides={"group.initial.rebalance.delay.ms": "0"})
    b.start()
    yield b
    b.stop()
    b.cleanup()


def strom(*args: str, input: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, input=input, timeout=timeout,
                          stdin=None if input is not None else subprocess.DEVNULL)


def parse_describe(text: str) -> list[dict[str, str]]:
    """Parse kafka-topics --describe output as tools do: tab-separated ``Key: value`` fields; a partition line
    starts with a tab."""
    out = []
    for line in text.splitlines():
        fields = line.lstrip("\t").split("\t")
        entry = {"_kind": "partition" if line.startswith("\t") else "topic"}
        for field in fields:
            key, sep, value = field.partition(": ")
            if not sep:
                key, value = field.rstrip(":"), ""
            entry[key] = value
        out.append(entry)
    return out


def test_the_users_notes(broker: BrokerProcess) -> None:
    """The command lines of the user's notes, with `kafka-topics.sh` etc. replaced by `strom topics` etc."""
    bs = broker.bootstrap
    listed = strom("topics", "--bootstrap-server", bs, "--list")
    assert listed.returncode == 0 and "sanguo" not in listed.stdout.split()

    # the note's exact line asks for 3 replicas: one broker cannot, and says so in one line; nothing is created
    three = strom("topics", "--bootstrap-server", bs, "--topic", "sanguo", "--create", "--partitions", "1",
                  "--replication-factor", "3")
    assert three.returncode == 1
    assert three.stderr.strip().splitlines() == [
        "Error while executing topic command : Unable to replicate the partition 3 time(s): The target replication "
        "factor of 3 cannot be reached because only 1 broker(s) are registered."]
    assert "sanguo" not in strom("topics", "--bootstrap-server", bs, "--list").stdout.split()

    created = strom("topics", "--bootstrap-server", bs, "--topic", "sanguo", "--create", "--partitions", "1",
                    "--replication-factor", "1")
    assert (created.returncode, created.stdout, created.stderr) == (0, "Created topic sanguo.\n", "")
    assert "sanguo" in strom("topics", "--bootstrap-server", bs, "--list").stdout.splitlines()

    described = strom("topics", "--bootstrap-server", bs, "--topic", "sanguo", "--describe")
    assert described.returncode == 0, described.stderr
    topic, partition = parse_describe(described.stdout)
    assert topic["_kind"] == "topic" and topic["Topic"] == "sanguo"
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", topic["TopicId"])
    assert (topic["PartitionCount"], topic["ReplicationFactor"], topic["Configs"]) == ("1", "1", "")
    assert list(topic) == ["_kind", "Topic", "TopicId", "PartitionCount", "ReplicationFactor", "Configs"]
    assert partition == {"_kind": "partition", "Topic": "sanguo", "Partition": "0", "Leader": "1", "Replicas": "1",
                         "Isr": "1"}
    assert described.stdout.splitlines()[1] == "\tTopic: sanguo\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1"

    altered = strom("topics", "--bootstrap-server", bs, "--topic", "sanguo", "--alter", "--partitions", "3")
    assert (altered.returncode, altered.stderr) == (0, "")
    lines = parse_describe(strom("topics", "--bootstrap-server", bs, "--topic", "sanguo", "--describe").stdout)
    assert lines[0]["PartitionCount"] == "3"
    assert [p["Partition"] for p in lines[1:]] == ["0", "1", "2"]
    assert lines[0]["TopicId"] == topic["TopicId"]

    produced = strom("console-producer", "--bootstrap-server", bs, "--topic", "sanguo",
                     input="刘备\n关羽\n张飞\n")
    assert (produced.returncode, produced.stderr) == (0, "")

    # --from-beginning reads the history; it keeps running until Ctrl-C, then reports the count like Kafka
    consumer = subprocess.Popen([*CLI, "console-consumer", "--bootstrap-server", bs, "--topic", "sanguo",
                                 "--from-beginning"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert consumer.stdout is not None
        got = [consumer.stdout.readline().rstrip("\n") for _ in range(3)]
        assert sorted(got) == sorted(["刘备", "关羽", "张飞"])
        consumer.send_signal(signal.SIGINT)
        out, err = consumer.communicate(timeout=20)
    finally:
        if consumer.poll() is None:
            consumer.kill()
    assert consumer.returncode == 0
    assert out == ""
    assert err.strip().splitlines()[-1] == "Processed a total of 3 messages"


def test_create_options_and_describe_all(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    made = strom("topics", "--bootstrap-server", bs, "--create", "--topic", "with_config", "--partitions", "2",
                 "--config", "retention.ms=3600000", "--config", "cleanup.policy=compact")
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines() == [
        "WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') could collide. "
        "To avoid issues it is best to use either, but not both.", "Created topic with_config."]
    again = strom("topics", "--bootstrap-server", bs, "--create", "--topic", "with_config")
    assert again.returncode == 1
    assert again.stderr.strip() == "Error while executing topic command : Topic 'with_config' already exists."
    quiet = strom("topics", "--bootstrap-server", bs, "--create", "--topic", "with_config", "--if-not-exists")
    assert (quiet.returncode, quiet.stderr) == (0, "")
    assert "Created" not in quiet.stdout  # only Kafka's name-collision warning
    assert strom("topics", "--bootstrap-server", bs, "--create", "--topic", "assigned",
                 "--replica-assignment", "1,1").returncode == 0

    lines = parse_describe(strom("topics", "--bootstrap-server", bs, "--describe").stdout)
    by_topic = {d["Topic"]: d for d in lines if d["_kind"] == "topic"}
    assert by_topic["with_config"]["Configs"] == "cleanup.policy=compact,retention.ms=3600000"
    assert by_topic["with_config"]["PartitionCount"] == "2"
    assert by_topic["assigned"]["PartitionCount"] == "2"
    overrides = parse_describe(strom("topics", "--bootstrap-server", bs, "--describe", "--exclude-internal",
                                     "--topics-with-overrides").stdout)
    assert {d["Topic"] for d in overrides if d["_kind"] == "topic"} == {"with_config"}
    assert strom("topics", "--bootstrap-server", bs, "--describe", "--unavailable-partitions").stdout == ""
    # --topic is a regular expression for --describe / --list
    listed = strom("topics", "--bootstrap-server", bs, "--list", "--topic", "with.*").stdout.split()
    assert listed == ["with_config"]

    bad = strom("topics", "--bootstrap-server", bs, "--create", "--topic", "bad", "--config", "retention.ms=abc")
    assert bad.returncode == 1
    assert bad.stderr.startswith("Error while executing topic command : Invalid value")
    zero = strom("topics", "--bootstrap-server", bs, "--create", "--topic", "zero", "--partitions", "0")
    assert zero.stderr.strip() == "Error while executing topic command : The partitions must be greater than 0"


def test_alter_refuses_to_shrink_and_delete(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    assert strom("topics", "--bootstrap-server", bs, "--create", "--topic", "shrink", "--partitions", "3").returncode == 0
    shrink = strom("topics", "--bootstrap-server", bs, "--alter", "--topic", "shrink", "--partitions", "1")
    assert shrink.returncode == 1
    assert shrink.stderr.strip().splitlines() == [
        "Error while executing topic command : Topic currently has 3 partitions, which is higher than the requested 1."]
    same = strom("topics", "--bootstrap-server", bs, "--alter", "--topic", "shrink", "--partitions", "3")
    assert same.stderr.strip() == "Error while executing topic command : Topic already has 3 partitions."
    missing = strom("topics", "--bootstrap-server", bs, "--alter", "--topic", "nosuch", "--partitions", "3")
    assert (missing.returncode, missing.stderr.strip()) == (
        1, "Error while executing topic command : Topic 'nosuch' does not exist as expected")
    assert strom("topics", "--bootstrap-server", bs, "--alter", "--topic", "nosuch", "--partitions", "3",
                 "--if-exists").returncode == 0
    described = strom("topics", "--bootstrap-server", bs, "--describe", "--topic", "nosuch")
    assert described.returncode == 1 and "does not exist as expected" in described.stderr

    deleted = strom("topics", "--bootstrap-server", bs, "--delete", "--topic", "shrink")
    assert (deleted.returncode, deleted.stdout, deleted.stderr) == (0, "", "")
    deadline = time.monotonic() + 10
    while "shrink" in strom("topics", "--bootstrap-server", bs, "--list").stdout.split():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    again = strom("topics", "--bootstrap-server", bs, "--delete", "--topic", "shrink")
    assert again.returncode == 1 and "does not exist as expected" in again.stderr


def test_internal_topics_are_listed_and_protected(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    # a group makes the broker create __consumer_offsets
    strom("topics", "--bootstrap-server", bs, "--create", "--topic", "for-groups")
    run = strom("console-consumer", "--bootstrap-server", bs, "--topic", "for-groups", "--group", "g",
                "--timeout-ms", "500")
    assert run.returncode == 0, run.stderr
    names = strom("topics", "--bootstrap-server", bs, "--list").stdout.split()
    assert "__consumer_offsets" in names
    assert "__consumer_offsets" not in strom("topics", "--bootstrap-server", bs, "--list",
                                             "--exclude-internal").stdout.split()
    deleted = strom("topics", "--bootstrap-server", bs, "--delete", "--topic", "__consumer_offsets")
    assert deleted.returncode == 1
    assert "is a kafka internal topic and is not allowed to be marked for deletion" in deleted.stderr


def test_command_config_and_bad_values(broker: BrokerProcess, tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "admin.properties"
    config.write_text(f"# admin settings\nbootstrap.servers={broker.bootstrap}\nrequest.timeout.ms=5000\n")
    listed = strom("topics", "--command-config", str(config), "--list")
    assert listed.returncode == 0, listed.stderr
    wrong = tmp_path / "wrong.properties"
    wrong.write_text("request.timeot.ms=5\n")
    bad = strom("topics", "--bootstrap-server", broker.bootstrap, "--command-config", str(wrong), "--list")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "Error: Invalid client configuration: Unknown configuration 'request.timeot.ms' "
        "(did you mean 'request.timeout.ms'?)"]
    missing = strom("topics", "--bootstrap-server", broker.bootstrap, "--command-config", str(tmp_path / "no"),
                    "--list")
    assert missing.returncode == 2 and missing.stderr.startswith("Error: Cannot read config file")
    verbose = strom("--verbose", "topics", "--bootstrap-server", "127.0.0.1:1", "--list")
    assert verbose.returncode != 0 and "Traceback" in verbose.stderr
