"""ConnectionQuotas bookkeeping and max.connections.per.ip.overrides parsing (Kafka's ConnectionQuotas)."""

from __future__ import annotations

import pytest

from strom.common.errors import ConfigError
from strom.server.socket_server import ConnectionQuotas, parse_max_connections_per_ip_overrides


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
