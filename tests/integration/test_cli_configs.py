"""`strom configs` (kafka-configs.sh) against a broker subprocess."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from strom.broker_process import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

CLI = [sys.executable, "-m", "strom.cli.main"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("cli-configs") / "data",
                      overrides={"log.segment.bytes": "536870912"})
    b.start()
    assert strom("topics", "--bootstrap-server", b.bootstrap, "--create", "--topic", "sanguo").returncode == 0
    yield b
    b.stop()
    b.cleanup()


def strom(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def configs(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return strom("configs", "--bootstrap-server", broker.bootstrap, *args)


def test_topic_configs_round_trip(broker: BrokerProcess) -> None:
    empty = configs(broker, "--entity-type", "topics", "--entity-name", "sanguo", "--describe")
    assert (empty.returncode, empty.stdout) == (0, "Dynamic configs for topic sanguo are:\n")

    altered = configs(broker, "--entity-type", "topics", "--entity-name", "sanguo", "--alter", "--add-config",
                      "retention.ms=86400000,cleanup.policy=[compact,delete]")
    assert (altered.returncode, altered.stdout) == (0, "Completed updating config for topic sanguo.\n")
    described = configs(broker, "--topic", "sanguo", "--describe")
    assert described.stdout.splitlines() == [
        "Dynamic configs for topic sanguo are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  retention.ms=86400000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=86400000, "
        "DEFAULT_CONFIG:log.retention.ms=604800000}"]
    # the topic describe line shows overrides and broker-level settings, not defaults
    topic_line = strom("topics", "--bootstrap-server", broker.bootstrap, "--describe", "--topic", "sanguo")
    configs_field = topic_line.stdout.splitlines()[0].split("\tConfigs: ")[1]
    assert configs_field.split(",")[:2] == ["cleanup.policy=compact", "delete"]
    assert "retention.ms=86400000" in configs_field and "segment.bytes=536870912" in configs_field

    everything = configs(broker, "--topic", "sanguo", "--describe", "--all")
    lines = everything.stdout.splitlines()
    assert lines[0] == "All configs for topic sanguo are:"
    assert ("  segment.bytes=536870912 sensitive=false synonyms={STATIC_BROKER_CONFIG:log.segment.bytes=536870912, "
            "DEFAULT_CONFIG:log.segment.bytes=1073741824}") in lines
    assert any(line.startswith("  max.message.bytes=") and "DEFAULT_CONFIG" in line for line in lines)

    removed = configs(broker, "--topic", "sanguo", "--alter", "--delete-config", "retention.ms")
    assert removed.returncode == 0
    left = configs(broker, "--topic", "sanguo", "--describe").stdout.splitlines()
    assert [line.split("=")[0].strip() for line in left[1:]] == ["cleanup.policy"]

    all_topics = configs(broker, "--entity-type", "topics", "--describe")
    assert "Dynamic configs for topic sanguo are:" in all_topics.stdout.splitlines()


def test_topic_config_errors(broker: BrokerProcess) -> None:
    invalid = configs(broker, "--topic", "sanguo", "--alter", "--delete-config", "not.set")
    assert (invalid.returncode, invalid.stderr.strip()) == (
        1, "Error while executing config command: Invalid config(s): not.set")
    bad_value = configs(broker, "--topic", "sanguo", "--alter", "--add-config", "retention.ms=soon")
    assert bad_value.returncode == 1
    assert bad_value.stderr.startswith("Error while executing config command: INVALID_CONFIG: ")
    assert "retention.ms" in bad_value.stderr and len(bad_value.stderr.strip().splitlines()) == 1
    unknown = configs(broker, "--topic", "nosuch", "--describe")
    assert (unknown.returncode, unknown.stderr.strip()) == (
        1, "Error while executing config command: UNKNOWN_TOPIC_OR_PARTITION: Topic nosuch does not exist.")


def test_broker_configs_describe_and_alter(broker: BrokerProcess) -> None:
    dynamic = configs(broker, "--entity-type", "brokers", "--entity-name", "1", "--describe")
    assert (dynamic.returncode, dynamic.stdout) == (0, "Dynamic configs for broker 1 are:\n")
    everything = configs(broker, "--broker", "1", "--describe", "--all").stdout.splitlines()
    assert everything[0] == "All configs for broker 1 are:"
    assert ("  log.segment.bytes=536870912 sensitive=false synonyms={STATIC_BROKER_CONFIG:log.segment.bytes="
            "536870912, DEFAULT_CONFIG:log.segment.bytes=1073741824}") in everything
    assert "  broker.rack=null sensitive=false synonyms={}" in everything  # no value anywhere, as Kafka prints it
    listing = configs(broker, "--entity-type", "brokers", "--describe")
    assert listing.stdout.splitlines() == ["Dynamic configs for broker 1 are:",
                                           "Default configs for brokers in the cluster are:"]
    # dynamic broker configs: this broker's own level, then the cluster-wide default
    done = configs(broker, "--broker", "1", "--alter", "--add-config", "log.retention.ms=86400000")
    assert (done.returncode, done.stdout.strip()) == (0, "Completed updating config for broker 1.")
    assert configs(broker, "--broker", "1", "--describe").stdout.splitlines() == [
        "Dynamic configs for broker 1 are:",
        "  log.retention.ms=86400000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=86400000, "
        "DEFAULT_CONFIG:log.retention.hours=168}"]
    done = configs(broker, "--broker-defaults", "--alter", "--add-config", "log.retention.ms=3600000")
    assert (done.returncode, done.stdout.strip()) == (0, "Completed updating default config for brokers in the "
                                                         "cluster.")
    assert configs(broker, "--broker-defaults", "--describe").stdout.splitlines() == [
        "Default configs for brokers in the cluster are:",
        "  log.retention.ms=3600000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=3600000, "
        "DEFAULT_CONFIG:log.retention.hours=168}"]
    for target in (["--broker", "1"], ["--broker-defaults"]):
        assert configs(broker, *target, "--alter", "--delete-config", "log.retention.ms").returncode == 0
        unset = configs(broker, *target, "--alter", "--delete-config", "log.retention.ms")
        assert (unset.returncode, unset.stderr.strip()) == (
            1, "Error while executing config command: Invalid config(s): log.retention.ms")
    assert configs(broker, "--broker", "1", "--describe").stdout == "Dynamic configs for broker 1 are:\n"
    for target, name in ((["--entity-type", "brokers", "--entity-name", "1"], "1"), (["--broker-defaults"], "")):
        refused = configs(broker, *target, "--alter", "--add-config", "log.dirs=/elsewhere")
        assert refused.returncode == 1
        assert refused.stderr.strip().splitlines() == [
            "Error while executing config command: INVALID_REQUEST: Invalid config value for resource "
            f"ConfigResource(type=BROKER, name='{name}'): Cannot update these configs dynamically: Set(log.dirs)"]
        assert refused.stdout == ""
    wrong_id = configs(broker, "--broker", "7", "--describe")
    assert (wrong_id.returncode, wrong_id.stderr.strip()) == (
        1, "Error while executing config command: Broker 7 is not in the cluster (broker ids: 1)")


def _read_one(broker: BrokerProcess) -> None:
    """A strom consumer's fetch (it opens a fetch session, which the broker logs at DEBUG on strom.server)."""
    from strom.common.structs import TopicPartition
    from strom.consumer import KafkaConsumer

    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, key_deserializer="bytes", value_deserializer="bytes")
    try:
        c.assign([TopicPartition("sanguo", 0)])
        c.seek(TopicPartition("sanguo", 0), 0)
        c.poll(timeout_ms=1500)
    finally:
        c.close()


def test_broker_log_levels_at_runtime(broker: BrokerProcess) -> None:
    """Kafka's broker-loggers: every logger's level listed, one set to DEBUG makes the broker log at DEBUG from
    then on, deleting it makes it follow its parent again; unknown loggers and levels, and the root logger's
    removal, are refused with Kafka's messages."""
    listed = configs(broker, "--broker-logger", "1", "--describe").stdout.splitlines()
    assert listed[0] == "Dynamic configs for broker-logger 1 are:"
    assert "  root=INFO sensitive=false synonyms={}" in listed
    assert "  strom.server=INFO sensitive=false synonyms={}" in listed

    _read_one(broker)
    assert "Created fetch session" not in broker.read_log()
    done = configs(broker, "--entity-type", "broker-loggers", "--entity-name", "1", "--alter", "--add-config",
                   "strom.server=DEBUG")
    assert (done.returncode, done.stdout.strip()) == (0, "Completed updating config for broker-logger 1.")
    assert "  strom.server=DEBUG sensitive=false synonyms={}" in configs(
        broker, "--broker-logger", "1", "--describe").stdout.splitlines()
    _read_one(broker)
    assert broker.read_log().count("Created fetch session") == 1
    assert configs(broker, "--broker-logger", "1", "--alter", "--delete-config", "strom.server").returncode == 0
    assert "  strom.server=INFO sensitive=false synonyms={}" in configs(
        broker, "--broker-logger", "1", "--describe").stdout.splitlines()
    _read_one(broker)
    assert broker.read_log().count("Created fetch session") == 1

    for change, error in (
            (["--add-config", "nosuch.logger=DEBUG"], "INVALID_CONFIG: Logger nosuch.logger does not exist!"),
            (["--add-config", "strom.server=LOUD"], "INVALID_CONFIG: Cannot set the log level of strom.server to "
                                                    "LOUD as it is not a supported log level."),
            (["--delete-config", "root"], "INVALID_REQUEST: Removing the log level of the root logger is not "
                                          "allowed")):
        refused = configs(broker, "--broker-logger", "1", "--alter", *change)
        assert refused.returncode == 1
        assert refused.stderr.startswith(f"Error while executing config command: {error}"), refused.stderr
