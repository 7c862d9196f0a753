"""Per-node connection state with exponential reconnect backoff and connection setup timeouts.

Kafka counterpart: ``org.apache.kafka.clients.ClusterConnectionStates`` (3.x). States:
``DISCONNECTED → CONNECTING → CHECKING_API_VERSIONS → READY``, plus ``AUTHENTICATION_FAILED``. After each
failed attempt the reconnect backoff grows ``reconnect.backoff.ms * 2^failures`` (±20 % jitter) up to
``reconnect.backoff.max.ms``; a successful connection resets it. A connection attempt that stays in
``CONNECTING`` longer than its setup timeout (``socket.connection.setup.timeout.ms``, doubling per failed
attempt up to ``.max.ms``, ±20 % jitter) is reported by :meth:`nodes_with_connection_setup_timeout`.

Not thread-safe: owned by the NetworkClient (I/O thread only).
"""

from __future__ import annotations

import enum
import random
from typing import Any

from strom.common.errors import IllegalStateError
from strom.network.exponential_backoff import ExponentialBackoff

__all__ = ["ConnectionState", "NodeConnectionState", "ClusterConnectionStates"]

RECONNECT_BACKOFF_EXP_BASE = 2
RECONNECT_BACKOFF_JITTER = 0.2
CONNECTION_SETUP_TIMEOUT_EXP_BASE = 2
CONNECTION_SETUP_TIMEOUT_JITTER = 0.2
LONG_MAX = 2**63 - 1


class ConnectionState(enum.Enum):
    DISCONNECTED = "DISCONNECTED"
    CONNECTING = "CONNECTING"
    CHECKING_API_VERSIONS = "CHECKING_API_VERSIONS"
    READY = "READY"
    AUTHENTICATION_FAILED = "AUTHENTICATION_FAILED"

    @property
    def is_disconnected(self) -> bool:
        return self in (ConnectionState.DISCONNECTED, ConnectionState.AUTHENTICATION_FAILED)

    @property
    def is_connected(self) -> bool:
        return self in (ConnectionState.CHECKING_API_VERSIONS, ConnectionState.READY)


AUTH_FAILED = ConnectionState.AUTHENTICATION_FAILED


class NodeConnectionState:
    """One node's state (Kafka's ``ClusterConnectionStates.NodeConnectionState``)."""

    __slots__ = ("state", "last_connect_attempt_ms", "failed_attempts", "failed_connect_attempts",
                 "reconnect_backoff_ms", "connection_setup_timeout_ms", "throttle_until_time_ms", "host",
                 "authentication_exception")

    def __init__(self, state: ConnectionState, last_connect_attempt_ms: int, reconnect_backoff_ms: int,
                 connection_setup_timeout_ms: int, host: str) -> None:
        self.state = state
        self.last_connect_attempt_ms = last_connect_attempt_ms
        self.failed_attempts = 0
        self.failed_connect_attempts = 0
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.connection_setup_timeout_ms = connection_setup_timeout_ms
        self.throttle_until_time_ms = 0
        self.host = host
        self.authentication_exception: BaseException | None = None

    def __repr__(self) -> str:
        return (f"NodeState({self.state.name}, {self.last_connect_attempt_ms}, {self.failed_attempts}, "
                f"{self.connection_setup_timeout_ms})")


class ClusterConnectionStates:
    """Connection state of every node the client knows. I/O thread only."""

    def __init__(self, reconnect_backoff_ms: int, reconnect_backoff_max_ms: int,
                 connection_setup_timeout_ms: int = 10_000, connection_setup_timeout_max_ms: int = 30_000,
                 rng: random.Random | None = None) -> None:
        self.reconnect_backoff = ExponentialBackoff(reconnect_backoff_ms, RECONNECT_BACKOFF_EXP_BASE,
                                                    reconnect_backoff_max_ms, RECONNECT_BACKOFF_JITTER, rng)
        self.connection_setup_timeout = ExponentialBackoff(
            connection_setup_timeout_ms, CONNECTION_SETUP_TIMEOUT_EXP_BASE, connection_setup_timeout_max_ms,
            CONNECTION_SETUP_TIMEOUT_JITTER, rng)
        self._node_state: dict[Any, NodeConnectionState] = {}
        self._connecting: set[Any] = set()

    # ------------------------------------------------------------------------------------- queries

    def can_connect(self, id: Any, now: int) -> bool:
        """Never tried, or disconnected for at least the current reconnect backoff."""
        state = self._node_state.get(id)
        if state is None:
            return True
        return state.state.is_disconnected and now - state.last_connect_attempt_ms >= state.reconnect_backoff_ms

    def is_blacked_out(self, id: Any, now: int) -> bool:
        state = self._node_state.get(id)
        return (state is not None and state.state.is_disconnected
                and now - state.last_connect_attempt_ms < state.reconnect_backoff_ms)

    def connection_delay(self, id: Any, now: int) -> int:
        """How long until a connection to ``id`` may be attempted: the rest of the backoff when
        disconnected, "forever" when connecting or connected (a network event will wake us)."""
        state = self._node_state.get(id)
        if state is None:
            return 0
        if state.state.is_disconnected:
            return max(state.reconnect_backoff_ms - (now - state.last_connect_attempt_ms), 0)
        return LONG_MAX

    def is_connecting(self, id: Any) -> bool:
        state = self._node_state.get(id)
        return state is not None and state.state is ConnectionState.CONNECTING

    def is_preparing_connection(self, id: Any) -> bool:
        state = self._node_state.get(id)
        return state is not None and state.state is ConnectionState.CHECKING_API_VERSIONS

    def is_ready(self, id: Any, now: int) -> bool:
        state = self._node_state.get(id)
        return (state is not None and state.state is ConnectionState.READY
                and state.throttle_until_time_ms <= now)

    def has_ready_nodes(self, now: int) -> bool:
        return any(s.state is ConnectionState.READY and s.throttle_until_time_ms <= now
                   for s in self._node_state.values())

    def is_connected(self, id: Any) -> bool:
        state = self._node_state.get(id)
        return state is not None and state.state.is_connected

    def is_disconnected(self, id: Any) -> bool:
        state = self._node_state.get(id)
        return state is not None and state.state.is_disconnected

    def is_auth_failed(self, id: Any) -> bool:
        state = self._node_state.get(id)
        return state is not None and state.state is AUTH_FAILED

    def authentication_exception(self, id: Any) -> BaseException | None:
        state = self._node_state.get(id)
        return state.authentication_exception if state is not None else None

    def connection_state(self, id: Any) -> ConnectionState:
        return self._node_state_or_fail(id).state

    def last_connect_attempt_ms(self, id: Any) -> int:
        state = self._node_state.get(id)
        return 0 if state is None else state.last_connect_attempt_ms

    def reconnect_backoff_ms(self, id: Any) -> int:
        return self._node_state_or_fail(id).reconnect_backoff_ms

    def connection_setup_timeout_ms(self, id: Any) -> int:
        return self._node_state_or_fail(id).connection_setup_timeout_ms

    def is_connection_setup_timeout(self, id: Any, now: int) -> bool:
        state = self._node_state_or_fail(id)
        if state.state is not ConnectionState.CONNECTING:
            raise IllegalStateError(f"Node {id} is not in connecting state")
        return now - state.last_connect_attempt_ms > state.connection_setup_timeout_ms

    def nodes_with_connection_setup_timeout(self, now: int) -> list[Any]:
        return [id for id in self._connecting if self.is_connection_setup_timeout(id, now)]

    def throttle_delay_ms(self, id: Any, now: int) -> int:
        state = self._node_state.get(id)
        if state is None or state.throttle_until_time_ms <= now:
            return 0
        return state.throttle_until_time_ms - now

    def poll_delay_ms(self, id: Any, now: int) -> int:
        """Kafka's ``pollDelayMs``: the throttle delay of a connected node, else the connection delay."""
        throttle = self.throttle_delay_ms(id, now)
        if self.is_connected(id) and throttle > 0:
            return throttle
        return self.connection_delay(id, now)

    # ---------------------------------------------------------------------------------- transitions

    def connecting(self, id: Any, now: int, host: str = "") -> None:
        state = self._node_state.get(id)
        if state is not None and state.host == host:
            state.last_connect_attempt_ms = now
            state.state = ConnectionState.CONNECTING
            self._connecting.add(id)
            return
        self._node_state[id] = NodeConnectionState(
            ConnectionState.CONNECTING, now, self.reconnect_backoff.backoff(0),
            self.connection_setup_timeout.backoff(0), host)
        self._connecting.add(id)

    def disconnected(self, id: Any, now: int) -> None:
        state = self._node_state_or_fail(id)
        state.last_connect_attempt_ms = now
        state.reconnect_backoff_ms = self.reconnect_backoff.backoff(state.failed_attempts)
        state.failed_attempts += 1
        if state.state is ConnectionState.CONNECTING:
            state.failed_connect_attempts += 1
            state.connection_setup_timeout_ms = self.connection_setup_timeout.backoff(state.failed_connect_attempts)
            self._connecting.discard(id)
        else:
            state.failed_connect_attempts = 0
            state.connection_setup_timeout_ms = self.connection_setup_timeout.backoff(0)
        state.state = ConnectionState.DISCONNECTED

    def checking_api_versions(self, id: Any) -> None:
        state = self._node_state_or_fail(id)
        state.state = ConnectionState.CHECKING_API_VERSIONS
        state.failed_connect_attempts = 0
        state.connection_setup_timeout_ms = self.connection_setup_timeout.backoff(0)
        self._connecting.discard(id)

    def ready(self, id: Any) -> None:
        state = self._node_state_or_fail(id)
        state.state = ConnectionState.READY
        state.authentication_exception = None
        state.failed_attempts = 0
        state.reconnect_backoff_ms = self.reconnect_backoff.backoff(0)
        state.failed_connect_attempts = 0
        state.connection_setup_timeout_ms = self.connection_setup_timeout.backoff(0)
        self._connecting.discard(id)

    def authentication_failed(self, id: Any, now: int, exception: BaseException) -> None:
        state = self._node_state_or_fail(id)
        state.authentication_exception = exception
        state.state = AUTH_FAILED
        self._connecting.discard(id)  # it may fail before its connection was reported complete
        state.last_connect_attempt_ms = now
        state.reconnect_backoff_ms = self.reconnect_backoff.backoff(state.failed_attempts)
        state.failed_attempts += 1

    def throttle(self, id: Any, throttle_until_time_ms: int) -> None:
        state = self._node_state.get(id)
        if state is not None and state.throttle_until_time_ms < throttle_until_time_ms:
            state.throttle_until_time_ms = throttle_until_time_ms

    def remove(self, id: Any) -> None:
        self._node_state.pop(id, None)
        self._connecting.discard(id)

    def _node_state_or_fail(self, id: Any) -> NodeConnectionState:
        state = self._node_state.get(id)
        if state is None:
            raise IllegalStateError(f"No entry found for connection {id}")
        return state

    def __contains__(self, id: Any) -> bool:
        return id in self._node_state
