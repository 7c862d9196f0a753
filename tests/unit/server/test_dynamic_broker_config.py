"""DynamicBrokerConfig: the levels' precedence, what may change at runtime, stored values that are not valid,
who is told of a change, the standalone store; and the two components reconfigured in place (the log cleaner's
threads, the connection limits)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from strom.common.errors import ConfigError
from strom.server.broker_config import BrokerConfig
from strom.server.connection_quotas import ConnectionQuotas
from strom.server.dynamic_broker_config import (
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    STATIC_BROKER_CONFIG,
    DynamicBrokerConfig,
    FileDynamicConfigStore,
)
from strom.storage.log_cleaner import CleanerConfig, LogCleaner

HOUR_MS = 3_600_000


def dynamic(**static: str) -> DynamicBrokerConfig:
    return DynamicBrokerConfig(BrokerConfig({"node.id": "1", **{k.replace("_", "."): v for k, v in static.items()}}))


def test_per_broker_over_default_over_static_and_a_dynamic_key_hides_its_static_synonyms() -> None:
    dc = dynamic(log_retention_hours="5")
    assert dc.log_config.retention_ms == 5 * HOUR_MS
    dc.update("", {"log.retention.ms": "1000"})
    assert dc.log_config.retention_ms == 1000
    assert dc.levels("log.retention.ms") == [("log.retention.ms", "1000", DYNAMIC_DEFAULT_BROKER_CONFIG),
                                             ("log.retention.hours", "5", STATIC_BROKER_CONFIG)]
    dc.update("1", {"log.retention.ms": "2000"})
    assert (dc.log_config.retention_ms, dc.source("log.retention.ms")) == (2000, DYNAMIC_BROKER_CONFIG)
    dc.update("1", {})
    assert (dc.log_config.retention_ms, dc.source("log.retention.ms")) == (1000, DYNAMIC_DEFAULT_BROKER_CONFIG)
    dc.update("", {})
    assert dc.log_config.retention_ms == 5 * HOUR_MS


def test_another_brokers_level_is_not_this_brokers() -> None:
    dc = dynamic()
    assert dc.update("2", {"message.max.bytes": "1000"}) == frozenset()
    assert dc.log_config.max_message_bytes == 1048588


def test_only_dynamic_keys_and_valid_values_are_accepted() -> None:
    dc = dynamic()
    with pytest.raises(ConfigError, match=r"^Cannot update these configs dynamically: Set\(broker.id, log.dirs\)$"):
        dc.validate("1", {"log.dirs": "/x", "broker.id": "3", "log.retention.ms": "1"})
    with pytest.raises(ConfigError, match="log.retention.ms"):
        dc.validate("", {"log.retention.ms": "soon"})
    with pytest.raises(ConfigError, match="log.cleaner.threads"):
        dc.validate("1", {"log.cleaner.threads": "-1"})
    with pytest.raises(ConfigError, match="num.io.threads"):
        dc.validate("1", {"num.io.threads": "0"})
    with pytest.raises(ConfigError, match="max.connections.per.ip.overrides"):
        dc.validate("1", {"max.connections.per.ip.overrides": "host-without-limit"})
    # a per-broker value is checked together with the defaults it sits over (and the other way round)
    dc.update("", {"log.cleaner.dedupe.buffer.size": "48"})
    with pytest.raises(ConfigError, match="log.cleaner.dedupe.buffer.size"):
        dc.validate("1", {"log.cleaner.threads": "4"})
    dc.validate("1", {"log.cleaner.threads": "2"})


def test_stored_values_that_are_not_valid_are_left_out() -> None:
    dc = dynamic()
    changed = dc.update("1", {"log.retention.ms": "soon", "message.max.bytes": "2000", "log.dirs": "/x"})
    assert changed == frozenset({"message.max.bytes"})
    assert dc.broker_configs == {"message.max.bytes": "2000"}
    assert dc.log_config.max_message_bytes == 2000


def test_reconfigurables_hear_of_their_own_keys_when_they_change() -> None:
    dc = dynamic()
    heard: list[tuple[str, frozenset[str], int]] = []
    dc.add_reconfigurable({"message.max.bytes", "log.retention.ms"},
                          lambda d, keys: heard.append(("log", keys, d.log_config.max_message_bytes)))
    dc.add_reconfigurable({"max.connections"}, lambda d, keys: heard.append(("socket", keys, 0)))
    dc.update("", {"message.max.bytes": "5000", "log.cleaner.backoff.ms": "10"})
    assert heard == [("log", frozenset({"message.max.bytes"}), 5000)]
    dc.update("1", {"message.max.bytes": "5000"})  # the same value at a higher level: nothing changed
    dc.update("", {"message.max.bytes": "5000", "log.cleaner.backoff.ms": "10"})
    assert len(heard) == 1
    dc.update("1", {"max.connections": "10"})
    assert heard[-1] == ("socket", frozenset({"max.connections"}), 0)
    dc.update("1", {})  # per-broker message.max.bytes (5000) and max.connections go: only the latter changed
    assert heard[-1] == ("socket", frozenset({"max.connections"}), 0)
    assert dc.current["max.connections"] == 2**31 - 1


def test_describe_lists_the_cleaner_and_thread_keys_with_their_sources() -> None:
    dc = dynamic(log_cleaner_threads="2")
    dc.update("1", {"num.io.threads": "16"})
    rows = {n: (v, src) for n, v, src in dc.describe()}
    assert rows["log.cleaner.threads"] == ("2", STATIC_BROKER_CONFIG)
    assert rows["num.io.threads"] == ("16", DYNAMIC_BROKER_CONFIG)
    assert rows["log.cleaner.backoff.ms"] == ("15000", 5)
    assert dc.default_value("log.cleaner.threads") == "1"


def test_file_store_round_trip_and_a_damaged_file(tmp_path: Path) -> None:
    store = FileDynamicConfigStore(tmp_path)
    assert store.read("") == {}
    store.write("", {"log.retention.ms": "1"})
    store.write("1", {"message.max.bytes": "2"})
    store.write("", {})
    assert (store.read(""), store.read("1")) == ({}, {"message.max.bytes": "2"})
    assert json.loads(store.path.read_text())["entities"] == {"1": {"message.max.bytes": "2"}}
    store.path.write_text("{not json")
    with pytest.raises(OSError, match="cannot read dynamic broker configs"):
        store.read("1")


def test_log_cleaner_restarts_its_threads_with_new_settings(tmp_path: Path) -> None:
    cleaner = LogCleaner(CleanerConfig(num_threads=1, backoff_ms=60_000), [str(tmp_path)], lambda: [],
                         worker_processes=False)

    def threads() -> list[str]:
        return sorted(t.name for t in threading.enumerate() if t.name.startswith("strom-log-cleaner-")
                      and t in cleaner._threads)

    cleaner.reconfigure(CleanerConfig(num_threads=3))  # not started: stays stopped
    assert threads() == []
    cleaner.startup()
    assert threads() == ["strom-log-cleaner-0", "strom-log-cleaner-1", "strom-log-cleaner-2"]
    cleaner.reconfigure(CleanerConfig(num_threads=2, max_io_bytes_per_second=1000.0, backoff_ms=60_000))
    assert threads() == ["strom-log-cleaner-0", "strom-log-cleaner-1"]
    assert cleaner.throttler.desired_rate == 1000.0
    cleaner.shutdown()
    assert threads() == []
    cleaner.reconfigure(CleanerConfig(num_threads=1))  # shut down: stays down
    assert threads() == []


def test_connection_limits_change_and_a_raised_limit_resumes_waiting_listeners() -> None:
    quotas = ConnectionQuotas(max_connections=1)
    assert quotas.try_acquire("10.0.0.1")
    assert quotas.at_broker_limit()
    resumed: list[bool] = []
    quotas.wait_for_slot(lambda: resumed.append(True))
    quotas.reconfigure(BrokerConfig({"max.connections": "5", "max.connections.per.ip": "1",
                                     "max.connections.per.ip.overrides": "10.0.0.2:3",
                                     "max.connection.creation.rate": "7"}))
    assert resumed == [True]
    assert not quotas.try_acquire("10.0.0.1")  # per ip: 1
    assert quotas.try_acquire("10.0.0.2") and quotas.try_acquire("10.0.0.2")
    assert quotas.broker_connection_rate == 7.0


def test_tls_keys_only_per_broker_with_a_listener_prefix_and_passwords_are_sensitive() -> None:
    from strom.server.dynamic_broker_config import is_sensitive, listener_ssl_config

    assert listener_ssl_config("listener.name.sasl_ssl.ssl.keystore.location") == "SASL_SSL"
    assert listener_ssl_config("listener.name.ssl.ssl.client.auth") is None  # not reconfigurable in Kafka either
    DynamicBrokerConfig.check_names(["listener.name.ssl.ssl.truststore.location"], per_broker=True)
    with pytest.raises(ConfigError, match=r"^Cannot update these configs dynamically: Set\(listener.name.ssl.ssl"
                                          r".client.auth\)$"):
        DynamicBrokerConfig.check_names(["listener.name.ssl.ssl.client.auth"])
    with pytest.raises(ConfigError, match=r"only per-listener using the listener prefix: Set\(ssl.key.password\)"):
        DynamicBrokerConfig.check_names(["ssl.key.password"])
    with pytest.raises(ConfigError, match=r"broker id must be specified: Set\(listener.name.ssl.ssl.keystore.type\)"):
        DynamicBrokerConfig.check_names(["listener.name.ssl.ssl.keystore.type"], per_broker=False)
    assert is_sensitive("listener.name.ssl.ssl.keystore.password") and is_sensitive("ssl.keystore.key")
    assert not is_sensitive("listener.name.ssl.ssl.keystore.location")
    dc = dynamic(listeners="PLAINTEXT://127.0.0.1:9092")
    with pytest.raises(ConfigError, match="Listener SSL is not a TLS listener of this broker"):
        dc.validate("1", {"listener.name.ssl.ssl.keystore.location": "/nowhere.pem"})
    # a stored per-listener value at the default level is left out
    assert dc.update("", {"listener.name.ssl.ssl.keystore.location": "/x.pem"}) == frozenset()
