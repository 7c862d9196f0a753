"""The consumer's thread-safe wrapper over the shared :class:`~strom.network.network_client.NetworkClient`.

Kafka counterpart: ``org.apache.kafka.clients.consumer.internals.ConsumerNetworkClient``.

``send`` queues a request (any thread) and returns a :class:`RequestFuture`; requests go out from ``poll``
once the node is ready (the NetworkClient connects and negotiates versions first). ``poll`` does the I/O under
one lock, then completes futures *outside* the lock on the polling thread (so completion handlers may take
the coordinator lock without a lock-order inversion: coordinator lock → client lock is the only order).
Unsent requests fail with a disconnect when their node's connection failed and with a timeout after
``request.timeout.ms``. ``wakeup`` (any thread) makes the next blocking ``poll`` raise
:class:`~strom.consumer.errors.WakeupError` (unless wakeups are disabled, as for the heartbeat thread and
close). A blocking poll never sleeps longer than ``max_poll_timeout_ms`` (the heartbeat interval), so the
heartbeat thread is not starved.

Thread-safety: thread-safe (the caller's thread and the heartbeat thread share it).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from strom.common.errors import KafkaTimeoutError
from strom.common.structs import Node
from strom.common.time import Time
from strom.consumer.errors import WakeupError
from strom.consumer.internals.request_future import RequestFuture
from strom.consumer.internals.timer import Timer
from strom.network.errors import DisconnectError

__all__ = ["ConsumerNetworkClient"]

log = logging.getLogger(__name__)


class _Unsent:
    __slots__ = ("node", "request", "future", "created_ms", "timeout_ms", "min_version", "max_version")

    def __init__(self, node: Node, request: Any, future: RequestFuture, created_ms: int, timeout_ms: int,
                 min_version: int | None, max_version: int | None) -> None:
        self.node = node
        self.request = request
        self.future = future
        self.created_ms = created_ms
        self.timeout_ms = timeout_ms
        self.min_version = min_version
        self.max_version = max_version


class ConsumerNetworkClient:
    """Kafka's ``ConsumerNetworkClient`` (see the module docstring). Thread-safe."""

    def __init__(self, client: Any, metadata: Any, time: Time, retry_backoff_ms: int, request_timeout_ms: int,
                 max_poll_timeout_ms: int) -> None:
        self.client = client
        self.metadata = metadata
        self.time = time
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.max_poll_timeout_ms = max(1, max_poll_timeout_ms)
        self._lock = threading.RLock()
        self._unsent: dict[Any, deque[_Unsent]] = {}
        self._unsent_lock = threading.Lock()
        self._pending_completion: deque[tuple[RequestFuture, Any, BaseException | None]] = deque()
        self._pending_disconnects: deque[Any] = deque()
        self._wakeup = False
        self._wakeup_disabled = 0
        self._polling = 0  # polls under way (holding _lock: one thread, perhaps re-entered)
        self._closed = False

    # ------------------------------------------------------------------------------------- sending

    def send(self, node: Node, request: Any, *, timeout_ms: int | None = None, min_version: int | None = None,
             max_version: int | None = None) -> RequestFuture:
        """Queue ``request`` (a generated message object) for ``node``; the future gets the response body."""
        future = RequestFuture()
        unsent = _Unsent(node, request, future, self.time.milliseconds(),
                         self.request_timeout_ms if timeout_ms is None else timeout_ms, min_version, max_version)
        with self._unsent_lock:
            self._unsent.setdefault(node.node_id, deque()).append(unsent)
        if self._polling:  # a poll in another thread (the heartbeat's or the caller's) picks the request up now
            self.client.wakeup()
        return future

    def _completion_handler(self, future: RequestFuture) -> Callable[[Any], None]:
        def on_complete(response: Any) -> None:
            if response.version_mismatch is not None:
                self._pending_completion.append((future, None, response.version_mismatch))
            elif response.disconnected:
                cause = (KafkaTimeoutError("The request timed out") if response.timed_out else
                         DisconnectError(f"Disconnected from node {response.destination}"))
                self._pending_completion.append((future, None, cause))
            else:
                self._pending_completion.append((future, response.response_body, None))
        return on_complete

    def _try_send(self, now: int) -> bool:
        sent = False
        with self._unsent_lock:
            nodes = [q for q in self._unsent.values() if q]
        for queue in nodes:
            while queue:
                item = queue[0]
                if not self.client.ready(item.node, now):
                    break
                queue.popleft()
                request = self.client.new_client_request(
                    item.node.node_id, item.request, item.created_ms, True, item.timeout_ms,
                    self._completion_handler(item.future), min_version=item.min_version, max_version=item.max_version)
                self.client.send(request, now)
                sent = True
        return sent

    # --------------------------------------------------------------------------------------- polling

    def poll(self, timeout_ms: int, poll_condition: Callable[[], bool] | None = None,
             disable_wakeup: bool = False) -> None:
        """One round of I/O, blocking up to ``timeout_ms`` unless ``poll_condition()`` says not to."""
        self._fire_pending_completed()
        with self._lock:
            # Counted before the unsent requests are taken: a send() that still reads 0 here queued its request
            # before this poll looks, so no wakeup is needed (Kafka wakes the selector on every send).
            self._polling += 1
            try:
                self._poll_locked(timeout_ms, poll_condition, disable_wakeup)
            finally:
                self._polling -= 1
        self._fire_pending_completed()
        self.metadata.maybe_throw_any_exception()

    def _poll_locked(self, timeout_ms: int, poll_condition: Callable[[], bool] | None, disable_wakeup: bool) -> None:
        now = self.time.milliseconds()
        self._handle_pending_disconnects(now)
        self._try_send(now)
        if poll_condition is None or poll_condition():
            poll_timeout = min(max(0, timeout_ms), self.max_poll_timeout_ms)
            if self.client.in_flight_request_count() == 0 and not self._has_unsent():
                poll_timeout = min(poll_timeout, self.retry_backoff_ms)
            self.client.poll(poll_timeout, now)
        else:
            self.client.poll(0, now)
        now = self.time.milliseconds()
        self._check_disconnects(now)
        if not disable_wakeup:
            self._maybe_trigger_wakeup()
        self._try_send(now)
        self._fail_expired_requests(now)

    def poll_timer(self, timer: Timer, poll_condition: Callable[[], bool] | None = None,
                   disable_wakeup: bool = False) -> None:
        self.poll(timer.remaining_ms(), poll_condition, disable_wakeup)
        timer.update()

    def poll_future(self, future: RequestFuture, timer: Timer, disable_wakeup: bool = False) -> bool:
        """Poll until ``future`` completes or ``timer`` expires; returns whether it completed."""
        while not future.is_done():
            self.poll(timer.remaining_ms(), lambda: not future.is_done(), disable_wakeup)
            timer.update()
            if timer.is_expired():
                break
        return future.is_done()

    def poll_no_wakeup(self) -> None:
        """Non-blocking I/O that never raises a wakeup (heartbeat thread)."""
        self.poll(0, disable_wakeup=True)

    def transmit_sends(self) -> None:
        """Push queued requests out without waiting (pipelining after a fetch returned records)."""
        with self._lock:
            now = self.time.milliseconds()
            if self._try_send(now):
                self.client.poll(0, now)
        self._fire_pending_completed()

    def await_metadata_update(self, timer: Timer) -> bool:
        """Request a metadata update and poll until it arrives or ``timer`` expires."""
        version = self.metadata.request_update()
        while True:
            self.poll(timer.remaining_ms())
            timer.update()
            if self.metadata.update_version > version or timer.is_expired():
                break
        return self.metadata.update_version > version

    def await_pending_requests(self, node: Node, timer: Timer) -> bool:
        while self.has_pending_requests(node) and timer.not_expired():
            self.poll(timer.remaining_ms(), disable_wakeup=True)
            timer.update()
        return not self.has_pending_requests(node)

    def _fire_pending_completed(self) -> None:
        pending = self._pending_completion
        while pending:
            try:
                future, value, exc = pending.popleft()
            except IndexError:
                break
            if exc is None:
                future.complete(value)
            else:
                future.raise_(exc)

    def _has_unsent(self) -> bool:
        return any(self._unsent.values())

    def _check_disconnects(self, now: int) -> None:
        with self._unsent_lock:
            queues = [(q[0].node, q) for q in self._unsent.values() if q]
        for node, queue in queues:
            if self.client.connection_failed(node):
                exc = self.client.authentication_exception(node) or DisconnectError(
                    f"Cannot connect to node {node.node_id} ({node.host}:{node.port})")
                while queue:
                    self._pending_completion.append((queue.popleft().future, None, exc))

    def _fail_expired_requests(self, now: int) -> None:
        with self._unsent_lock:
            queues = list(self._unsent.values())
        for queue in queues:
            while queue and now - queue[0].created_ms >= queue[0].timeout_ms:
                item = queue.popleft()
                self._pending_completion.append((item.future, None, KafkaTimeoutError(
                    f"Failed to send request after {item.timeout_ms} ms.")))

    def _handle_pending_disconnects(self, now: int) -> None:
        while self._pending_disconnects:
            node = self._pending_disconnects.popleft()
            self._fail_unsent(node, DisconnectError(f"Disconnected from node {node.node_id}"))
            self.client.disconnect(node.node_id)

    def _fail_unsent(self, node: Node, exc: BaseException) -> None:
        with self._unsent_lock:
            queue = self._unsent.get(node.node_id)
        while queue:
            self._pending_completion.append((queue.popleft().future, None, exc))

    def disconnect_async(self, node: Node) -> None:
        self._pending_disconnects.append(node)
        self.client.wakeup()

    # ------------------------------------------------------------------------------------- queries

    def least_loaded_node(self) -> Node | None:
        with self._lock:
            return self.client.least_loaded_node(self.time.milliseconds())

    def has_ready_nodes(self, now: int) -> bool:
        with self._lock:
            return self.client.has_ready_nodes(now)

    def is_unavailable(self, node: Node) -> bool:
        """The connection failed and the reconnect backoff has not elapsed yet."""
        with self._lock:
            now = self.time.milliseconds()
            return self.client.connection_failed(node) and self.client.connection_delay(node, now) > 0

    def try_connect(self, node: Node) -> None:
        with self._lock:
            self.client.ready(node, self.time.milliseconds())

    def pending_request_count(self, node: Node | None = None) -> int:
        with self._unsent_lock:
            if node is None:
                unsent = sum(len(q) for q in self._unsent.values())
            else:
                unsent = len(self._unsent.get(node.node_id, ()))
        with self._lock:
            return unsent + self.client.in_flight_request_count(None if node is None else node.node_id)

    def has_pending_requests(self, node: Node | None = None) -> bool:
        return self.pending_request_count(node) > 0

    # -------------------------------------------------------------------------------------- wakeup

    def wakeup(self) -> None:
        """Thread-safe: the next (or current) blocking poll raises :class:`WakeupError`."""
        self._wakeup = True
        self.client.wakeup()

    def _maybe_trigger_wakeup(self) -> None:
        if self._wakeup and not self._wakeup_disabled:
            self._wakeup = False
            raise WakeupError("Consumer was woken up by wakeup()")

    def maybe_trigger_wakeup(self) -> None:
        with self._lock:
            self._maybe_trigger_wakeup()

    def disable_wakeups(self) -> None:
        with self._lock:
            self._wakeup_disabled += 1

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.client.close()
