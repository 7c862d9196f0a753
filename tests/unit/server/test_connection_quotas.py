"""ConnectionQuotas bookkeeping and max.connections.per.ip.overrides parsing (Kafka's ConnectionQuotas)."""

from __future__ import annotations

import pytest

from strom.common.errors import ConfigError
from strom.server.connection_quotas import ConnectionQuotas, parse_max_connections_per_ip_overrides


def test_per_ip_limits_overrides_and_release() -> None:
    q = ConnectionQuotas(max_connections=3, max_connections_per_ip=1, overrides={"10.0.0.2": 2})
    assert q.try_acquire("10.0.0.1") and not q.try_acquire("10.0.0.1")
    assert q.try_acquire("10.0.0.2") and q.try_acquire("10.0.0.2") and not q.try_acquire("10.0.0.2")
    assert q.total == 3 and q.at_broker_limit()
    resumed: list[int] = []
    q.wait_for_slot(lambda: resumed.append(1))
    q.release("10.0.0.2")
    assert resumed == [1] and not q.at_broker_limit() and q.count("10.0.0.2") == 1
    q.release("10.0.0.1")
    assert q.try_acquire("10.0.0.1")


def test_overrides_parsing() -> None:
    parsed = parse_max_connections_per_ip_overrides("127.0.0.1:5, localhost:7 ,[::1]:2")
    assert parsed["127.0.0.1"] == 7  # localhost resolves to it; the later entry wins, as in a map
    assert parsed["::1"] == 2 and parsed["localhost"] == 7
    assert parse_max_connections_per_ip_overrides("") == {}
    for bad, message in (("127.0.0.1", "expected host:count"), ("127.0.0.1:x", "not a number"),
                         ("127.0.0.1:-1", "at least 0"), ("no-such-host.invalid:3", "cannot resolve")):
        with pytest.raises(ConfigError, match=message):
            parse_max_connections_per_ip_overrides(bad)


def test_connection_creation_rate_per_ip() -> None:
    """KIP-612: 2 connections per second over 2 windows of 1 s for 10.0.0.9 (a specific quota) and 100 for every
    other address (the default IP quota). The third connection within a second is throttled for the time that
    brings the rate back to 2 (at most one window) and not counted; once the burst's window has rolled out of the
    two the rate covers, the address may connect again."""
    from strom.testing.mock_time import MockTime

    time = MockTime()
    rates = {"10.0.0.9": 2.0, "<default>": 100.0}
    q = ConnectionQuotas(connection_rate=lambda ip: rates.get(ip, rates["<default>"]), quota_window_num=2,
                         quota_window_size_seconds=1, time=time)
    assert [q.record_ip_connection("10.0.0.9") for _ in range(2)] == [0, 0]
    assert q.record_ip_connection("10.0.0.9") == 500  # (3 - 2) / 2 per second over the 1 s window
    assert q.record_ip_connection("10.0.0.9") == 500  # the refused attempt was not counted
    assert [q.record_ip_connection("10.0.0.1") for _ in range(5)] == [0] * 5  # other addresses: the default
    time.sleep(2000)
    assert q.record_ip_connection("10.0.0.9") == 0
    rates["10.0.0.9"] = 1000.0  # a raised quota applies to the live sensor at once
    assert [q.record_ip_connection("10.0.0.9") for _ in range(5)] == [0] * 5
    assert ConnectionQuotas().record_ip_connection("10.0.0.9") == 0  # no quota: nothing measured


def test_broker_and_listener_connection_creation_rates() -> None:
    """max.connection.creation.rate (all listeners but the inter-broker one) and a listener's own rate: every
    connection is counted, and the throttle is the longer of the two waits (at most one quota window)."""
    from strom.testing.mock_time import MockTime

    time = MockTime()
    q = ConnectionQuotas(quota_window_num=2, quota_window_size_seconds=1, time=time)
    q.broker_connection_rate = 2.0
    q.listener_connection_rates["EXTERNAL"] = 1.0
    assert [q.record_listener_connection("INTERNAL") for _ in range(2)] == [0, 0]
    assert q.record_listener_connection("INTERNAL") == 500  # the broker's 2 per second
    assert q.record_listener_connection("REPLICATION", inter_broker=True) == 0  # exempt from the broker's rate
    assert q.record_listener_connection("EXTERNAL") == 1000  # the broker's: 4 per second now (bounded: 1 window)
    time.sleep(2000)
    assert q.record_listener_connection("EXTERNAL") == 0
    assert q.record_listener_connection("EXTERNAL") == 1000  # its own 1 per second, while the broker's 2 holds
    assert q.record_listener_connection("INTERNAL") == 500  # the broker's: 3 per second
