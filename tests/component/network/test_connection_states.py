"""ClusterConnectionStates and InFlightRequests (Kafka's ``ClusterConnectionStatesTest`` /
``InFlightRequestsTest``)."""

from __future__ import annotations

import random

import pytest

from strom.common.errors import IllegalStateError
from strom.network.connection_states import ClusterConnectionStates
from strom.network.exponential_backoff import ExponentialBackoff
from strom.network.in_flight_requests import InFlightRequests

pytestmark = [pytest.mark.component, pytest.mark.timeout(30)]


def test_reconnect_backoff_grows_exponentially_with_jitter_up_to_max() -> None:
    """§18 item 74: after each failure the node may reconnect only after reconnect.backoff.ms * 2^failures
    (±20 % jitter), capped at reconnect.backoff.max.ms; a ready connection resets it."""
    states = ClusterConnectionStates(50, 1000, rng=random.Random(1))
    now = 0
    backoffs = []
    for failures in range(8):
        assert states.can_connect("n", now)
        states.connecting("n", now, "h")
        assert not states.can_connect("n", now)
        states.disconnected("n", now)
        backoff = states.reconnect_backoff_ms("n")
        backoffs.append(backoff)
        expected = min(50 * 2**failures, 1000)
        assert expected * 0.8 <= backoff <= min(expected * 1.2, 1000)
        assert not states.can_connect("n", now + backoff - 1)
        assert states.connection_delay("n", now) == backoff
        now += backoff
    assert backoffs[-1] == 1000 or backoffs[-1] >= 800
    states.connecting("n", now, "h")
    states.checking_api_versions("n")
    states.ready("n")
    states.disconnected("n", now)
    assert 40 <= states.reconnect_backoff_ms("n") <= 60


def test_state_machine_and_queries() -> None:
    """§10.1 / §18 items 73, 74: DISCONNECTED → CONNECTING → CHECKING_API_VERSIONS → READY; connected while checking or ready; the
    connection delay is "forever" while connecting/connected."""
    states = ClusterConnectionStates(50, 50)
    assert states.can_connect("n", 0) and not states.is_connected("n")
    states.connecting("n", 0, "h")
    assert states.is_connecting("n") and states.connection_delay("n", 0) == 2**63 - 1
    states.checking_api_versions("n")
    assert states.is_connected("n") and states.is_preparing_connection("n") and not states.is_ready("n", 0)
    states.ready("n")
    assert states.is_ready("n", 0) and states.has_ready_nodes(0)
    states.throttle("n", 100)
    assert not states.is_ready("n", 50) and states.poll_delay_ms("n", 50) == 50
    assert states.is_ready("n", 100)
    states.remove("n")
    assert "n" not in states
    with pytest.raises(IllegalStateError):
        states.connection_state("n")


def test_connection_setup_timeout_grows_on_failed_connects() -> None:
    """§10.1: the setup timeout doubles (±20 %) per failed connection attempt up to the max; it is reported by
    nodes_with_connection_setup_timeout."""
    states = ClusterConnectionStates(0, 0, 1000, 8000, rng=random.Random(3))
    states.connecting("n", 0, "h")
    first = states.connection_setup_timeout_ms("n")
    assert 800 <= first <= 1200
    assert states.nodes_with_connection_setup_timeout(first) == []
    assert states.nodes_with_connection_setup_timeout(first + 1) == ["n"]
    states.disconnected("n", first + 1)
    assert 1600 <= states.connection_setup_timeout_ms("n") <= 2400
    states.connecting("n", 5000, "h")
    states.disconnected("n", 5000)
    assert 3200 <= states.connection_setup_timeout_ms("n") <= 4800
    states.connecting("n", 9000, "h")
    states.checking_api_versions("n")
    assert 800 <= states.connection_setup_timeout_ms("n") <= 1200


def test_authentication_failed_while_connecting_leaves_the_connecting_set() -> None:
    """A connection refused authentication before it was reported complete is no longer connecting: the setup
    timeout check must not look at it (it raised IllegalStateError, a node not in connecting state)."""
    states = ClusterConnectionStates(50, 1000, 1000, 8000, rng=random.Random(5))
    states.connecting("n", 0, "h")
    states.authentication_failed("n", 10, RuntimeError("refused"))
    assert not states.is_connecting("n")
    assert states.nodes_with_connection_setup_timeout(10_000) == []
    assert states.is_auth_failed("n") and states.connection_delay("n", 10) > 0


def test_exponential_backoff_without_growth() -> None:
    """§18 item 74: a max equal to the base means no growth; zero jitter gives exact powers of two."""
    assert ExponentialBackoff(100, 2, 100, 0.2).backoff(10) == 100
    assert ExponentialBackoff(100, 2, 1000, 0.0).backoff(2) == 400


class _Req:
    def __init__(self, destination: str, send_time_ms: int = 0, timeout: int = 100, completed: bool = True) -> None:
        self.destination = destination
        self.send_time_ms = send_time_ms
        self.request_timeout_ms = timeout
        self.send = type("S", (), {"completed": lambda _s, c=completed: c})()


def test_in_flight_requests_fifo_and_limits() -> None:
    """§18 items 78, 79: FIFO completion per node, at most max in flight, and the previous request must be
    fully written before another may start."""
    ifr = InFlightRequests(2)
    a, b = _Req("n"), _Req("n")
    assert ifr.can_send_more("n")
    ifr.add(a)
    assert ifr.can_send_more("n")
    ifr.add(b)
    assert not ifr.can_send_more("n") and ifr.count() == 2 and ifr.count("n") == 2
    assert ifr.complete_next("n") is a
    assert ifr.last_sent("n") is b
    assert ifr.complete_last_sent("n") is b
    assert ifr.is_empty()
    ifr.add(_Req("m", completed=False))
    assert not ifr.can_send_more("m")
    with pytest.raises(IllegalStateError):
        ifr.complete_next("x")


def test_in_flight_requests_timeouts_and_clear() -> None:
    """§18 item 86: nodes with a request older than its timeout are reported; clear_all empties a node."""
    ifr = InFlightRequests(5)
    ifr.add(_Req("a", send_time_ms=0, timeout=100))
    ifr.add(_Req("b", send_time_ms=50, timeout=100))
    assert ifr.nodes_with_timed_out_requests(100) == []
    assert ifr.nodes_with_timed_out_requests(101) == ["a"]
    assert len(ifr.clear_all("a")) == 1 and ifr.count() == 1
    assert ifr.clear_all("zzz") == []
