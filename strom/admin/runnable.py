"""The admin client's I/O thread: assigns calls to brokers, sends them, handles answers and timeouts.

Kafka counterpart: ``KafkaAdminClient.AdminClientRunnable`` (thread ``kafka-admin-client-thread | <client.id>``).
One loop iteration (:meth:`run_once`): move newly submitted calls to ``pending``; time out calls past their
deadline (pending: "Timed out waiting for a node assignment", chosen but unsent: "Timed out waiting to send
the call", in flight: "Timed out waiting for a response"); choose a broker for each pending call whose backoff
has passed (its :class:`~strom.admin.calls.NodeProvider`); start a metadata call when the metadata manager
wants one; send every call whose broker is ready; ``client.poll``; move calls for brokers whose connection
failed back to ``pending``; complete calls from the responses (disconnect → retriable failure, version
mismatch → ``on_unsupported_version`` or failure).

Threading: everything here runs on the I/O thread except :meth:`submit`, :meth:`initiate_close` (thread-safe).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from strom.admin.calls import Call, LeastLoadedNodeProvider
from strom.admin.metadata_manager import AdminMetadataManager
from strom.common.error_codes import UnsupportedVersionError
from strom.common.errors import IllegalStateError, KafkaError, KafkaTimeoutError
from strom.common.structs import Node
from strom.common.time import Time
from strom.network.cluster import Cluster
from strom.network.errors import DisconnectError
from strom.network.exponential_backoff import ExponentialBackoff
from strom.network.kafka_client import KafkaClient
from strom.protocol.messages import MetadataRequest, MetadataResponse

__all__ = ["AdminClientRunnable", "cluster_from_metadata"]

log = logging.getLogger(__name__)
MAX_POLL_MS = 1_200_000


def cluster_from_metadata(body: Any) -> Cluster:
    """A brokers-only :class:`Cluster` from a MetadataResponse (controller -1 = unknown)."""
    nodes = [Node(b.node_id, b.host, b.port, b.rack) for b in body.brokers]
    by_id = {n.node_id: n for n in nodes}
    return Cluster(body.cluster_id, nodes, (), controller=by_id.get(body.controller_id))


class AdminClientRunnable:
    """Kafka's ``AdminClientRunnable``."""

    def __init__(self, client: KafkaClient, metadata_manager: AdminMetadataManager, time: Time,
                 request_timeout_ms: int, default_api_timeout_ms: int, retry_backoff_ms: int,
                 retry_backoff_max_ms: int, max_retries: int, log_context: str = "") -> None:
        self.client = client
        self.metadata_manager = metadata_manager
        self.time = time
        self.request_timeout_ms = request_timeout_ms
        self.default_api_timeout_ms = default_api_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff = ExponentialBackoff(retry_backoff_ms, 2, max(retry_backoff_ms, retry_backoff_max_ms),
                                                0.2)
        self.max_retries = max_retries
        self.log_context = log_context
        self._lock = threading.Lock()
        self._new_calls: list[Call] | None = []  # None once closed to new calls
        self.pending: list[Call] = []
        self._internal: list[Call] = []
        self.to_send: dict[Any, tuple[Node, list[Call]]] = {}
        self.in_flight: dict[int, Call] = {}
        self._hard_shutdown_ms: int | None = None
        self.unreachable: dict[str, int] = {}  # "host:port" -> failed connection attempts

    # -------------------------------------------------------------------------------- thread-safe entry

    def submit(self, call: Call) -> None:
        """Hand a call to the I/O thread (any thread)."""
        with self._lock:
            if self._new_calls is None:
                closed = True
            else:
                closed = False
                self._new_calls.append(call)
        if closed:
            call.handle_failure(KafkaTimeoutError("The AdminClient thread is not accepting new calls."))
        else:
            self.client.wakeup()

    def initiate_close(self, timeout_ms: int) -> None:
        """Stop accepting calls; the thread finishes the calls it has until ``timeout_ms`` passes."""
        with self._lock:
            deadline = self.time.hi_res_milliseconds() + max(0, timeout_ms)
            if self._hard_shutdown_ms is None or deadline < self._hard_shutdown_ms:
                self._hard_shutdown_ms = deadline
        self.client.wakeup()

    def internal_deadline(self, now: int) -> int:
        """The deadline of an internal call (a coordinator lookup)."""
        return now + self.default_api_timeout_ms

    def enqueue_internal(self, call: Call, now: int) -> None:
        """Add a call from the I/O thread itself (no wakeup needed)."""
        self._internal.append(call)

    def calc_deadline(self, timeout_ms: int | None) -> int:
        return self.time.hi_res_milliseconds() + (self.default_api_timeout_ms if timeout_ms is None else timeout_ms)

    # ----------------------------------------------------------------------------------------- loop

    def run(self) -> None:
        log.debug("%sThread starting", self.log_context)
        try:
            while self.run_once():
                pass
        except Exception:
            log.exception("%sUncaught error in the admin client thread", self.log_context)
        finally:
            self._fail_everything(KafkaTimeoutError("The AdminClient thread has exited."))
            try:
                self.client.close()
            except Exception:
                log.debug("%sError closing the network client", self.log_context, exc_info=True)
            log.debug("%sExiting AdminClientRunnable thread.", self.log_context)

    def run_once(self) -> bool:
        """One loop iteration; False when the thread should exit."""
        now = self.time.hi_res_milliseconds()
        self._drain_new_calls()
        shutdown = self._hard_shutdown_ms
        if shutdown is not None:
            if not self._has_work() or now >= shutdown:
                return False
        poll_timeout = self._time_out_calls(now)
        if shutdown is not None:
            poll_timeout = min(poll_timeout, shutdown - now)
        poll_timeout = min(poll_timeout, self._drain_pending(now))
        fetch_delay = self.metadata_manager.metadata_fetch_delay_ms(now)
        if fetch_delay == 0:
            self.metadata_manager.transition_to_update_pending(now)
            call = self._metadata_call(now)
            if not self._assign(call, now):
                self.pending.append(call)
        poll_timeout = min(poll_timeout, self._send_eligible(now))
        if fetch_delay > 0:
            poll_timeout = min(poll_timeout, fetch_delay)
        if self.pending:
            poll_timeout = min(poll_timeout, self.retry_backoff_ms)
        responses = self.client.poll(max(0, poll_timeout), self.time.milliseconds())
        self._unassign_failed_nodes()
        self._handle_responses(self.time.hi_res_milliseconds(), responses)
        return True

    def _has_work(self) -> bool:
        """True while calls made by the user (not metadata refreshes or lookups) are unfinished (Kafka's
        ``hasActiveExternalCalls``)."""
        calls = self.pending + self._internal + self._assigned_calls() + list(self.in_flight.values())
        return any(not c.internal for c in calls)

    def _drain_new_calls(self) -> None:
        with self._lock:
            calls = self._new_calls
            if calls is None:
                return
            if self._hard_shutdown_ms is not None:
                self._new_calls = None
            else:
                self._new_calls = []
        self.pending.extend(calls)

    # --------------------------------------------------------------------------------------- timeouts

    def _time_out_calls(self, now: int) -> int:
        """Fail calls past their deadline; returns the time until the next deadline."""
        next_timeout = MAX_POLL_MS

        def expired(call: Call, message: str) -> bool:
            nonlocal next_timeout
            if now >= call.deadline_ms:
                call.aborted = True
                call.handle_failure(KafkaTimeoutError(f"{message} Call: {call.name}{self._unreachable_hint()}"))
                return True
            next_timeout = min(next_timeout, call.deadline_ms - now)
            return False

        self.pending = [c for c in self.pending if not expired(c, "Timed out waiting for a node assignment.")]
        for node_id, (node, calls) in list(self.to_send.items()):
            self.to_send[node_id] = (node, [c for c in calls
                                            if not expired(c, "Timed out waiting to send the call.")])
        for cid, call in list(self.in_flight.items()):
            if expired(call, "Timed out waiting for a response."):
                del self.in_flight[cid]
        return next_timeout

    def _unreachable_hint(self) -> str:
        if not self.unreachable or self.metadata_manager.is_ready():
            return ""
        return f" (could not connect to {', '.join(sorted(self.unreachable))})"

    # -------------------------------------------------------------------------------- node assignment

    def _drain_pending(self, now: int) -> int:
        timeout = MAX_POLL_MS
        calls, self.pending = self.pending, []
        for call in calls:
            if now < call.next_allowed_try_ms:
                timeout = min(timeout, call.next_allowed_try_ms - now)
                self.pending.append(call)
            elif not self._assign(call, now):
                self.pending.append(call)
        while self._internal:  # calls a provider started meanwhile (coordinator lookups)
            internal, self._internal = self._internal, []
            for call in internal:
                if not self._assign(call, now):
                    self.pending.append(call)
        return timeout

    def _assigned_calls(self) -> list[Call]:
        return [c for _n, calls in self.to_send.values() for c in calls]

    def _assign(self, call: Call, now: int) -> bool:
        """Choose a broker for ``call``; True if the call left ``pending`` (assigned or failed)."""
        fatal = self.metadata_manager.fatal_exception
        if fatal is not None:  # authentication failed: every call fails with it
            self.fail(call, now, fatal)
            return True
        try:
            node = call.node_provider.provide(self, now)
        except Exception as e:
            self.fail(call, now, e)
            return True
        if node is None:
            return False
        call.cur_node = node
        entry = self.to_send.setdefault(node.node_id, (node, []))
        entry[1].append(call)
        return True

    def _unassign_failed_nodes(self) -> None:
        for node_id, (node, calls) in list(self.to_send.items()):
            if calls and self.client.connection_failed(node):
                key = f"{node.host}:{node.port}"
                self.unreachable[key] = self.unreachable.get(key, 0) + 1
                for call in calls:
                    call.cur_node = None
                    self.pending.append(call)
                del self.to_send[node_id]

    # ------------------------------------------------------------------------------------------ sending

    def _send_eligible(self, now: int) -> int:
        timeout = MAX_POLL_MS
        for node_id, (node, calls) in list(self.to_send.items()):
            if not calls:
                del self.to_send[node_id]
                continue
            if not self.client.ready(node, self.time.milliseconds()):
                timeout = min(timeout, max(1, self.client.poll_delay_ms(node, self.time.milliseconds())))
                continue
            self.unreachable.pop(f"{node.host}:{node.port}", None)
            while calls:
                if not self.client.ready(node, self.time.milliseconds()):
                    break
                call = calls.pop(0)
                request_timeout = max(0, min(self.request_timeout_ms, call.deadline_ms - now))
                try:
                    body = call.create_request(request_timeout)
                except Exception as e:
                    self.fail(call, now, e)
                    continue
                client_request = self.client.new_client_request(
                    node_id, body, self.time.milliseconds(), True, request_timeout,
                    min_version=call.min_version, max_version=call.max_version)
                self.client.send(client_request, self.time.milliseconds())
                self.in_flight[client_request.correlation_id] = call
        return timeout

    # -------------------------------------------------------------------------------------- responses

    def _handle_responses(self, now: int, responses: list[Any]) -> None:
        for response in responses:
            call = self.in_flight.pop(response.request_header.correlation_id, None)
            if call is None:
                continue  # timed out already
            if response.version_mismatch is not None:
                self.fail(call, now, response.version_mismatch)
            elif response.disconnected:
                node = call.cur_node
                self.metadata_manager.request_update()
                reason = "timing out" if getattr(response, "timed_out", False) else "being disconnected"
                self.fail(call, now, DisconnectError(
                    f"Cancelled {call.name} request with correlation id {response.request_header.correlation_id} "
                    f"due to node {node.node_id if node else response.destination} {reason}"))
            else:
                try:
                    call.on_response(response.response_body, response.request_header.api_version)
                except Exception as e:
                    self.fail(call, now, e)

    def fail(self, call: Call, now: int, error: BaseException) -> None:
        """Kafka's ``Call.fail``: retry a retriable failure with backoff while time is left, else fail."""
        call.cur_node = None
        if call.aborted:
            call.handle_failure(KafkaTimeoutError(f"Aborted due to timeout. Call: {call.name}"))
            return
        if isinstance(error, UnsupportedVersionError) and call.on_unsupported_version is not None:
            try:
                if call.on_unsupported_version(error):
                    log.debug("%s%s attempting protocol downgrade and then retry.", self.log_context, call)
                    self.pending.append(call)
                    return
            except Exception as e:
                error = e
        retry_after = getattr(error, "retry_after_ms", None)  # a broker's throttle time says when to come back
        call.next_allowed_try_ms = now + (retry_after if retry_after is not None else
                                          self.retry_backoff.backoff(call.tries))
        call.tries += 1
        if now >= call.deadline_ms:
            call.handle_failure(KafkaTimeoutError(f"{call.name} timed out after {call.tries} attempt(s): {error}"))
            return
        if not (isinstance(error, KafkaError) and error.retriable):
            log.debug("%s%s failed: %s", self.log_context, call, error)
            call.handle_failure(error)
            return
        if call.tries > self.max_retries:
            call.handle_failure(KafkaTimeoutError(f"{call.name} failed after {call.tries} attempt(s): {error}"))
            return
        log.debug("%s%s failed: %s. Beginning retry #%d", self.log_context, call, error, call.tries)
        self.pending.append(call)

    def _fail_everything(self, error: BaseException) -> None:
        with self._lock:
            new = self._new_calls or []
            self._new_calls = None
        calls = new + self.pending + self._internal + self._assigned_calls() + list(self.in_flight.values())
        self.pending, self._internal, self.to_send, self.in_flight = [], [], {}, {}
        for call in calls:
            call.handle_failure(error)

    # ---------------------------------------------------------------------------------------- metadata

    def _metadata_call(self, now: int) -> Call:
        mm = self.metadata_manager

        def request(_timeout_ms: int) -> Any:
            return MetadataRequest(topics=[], allow_auto_topic_creation=True)

        def response(body: MetadataResponse, _version: int) -> None:
            mm.update(cluster_from_metadata(body), self.time.hi_res_milliseconds())

        def failure(e: BaseException) -> None:
            mm.update_failed(e)

        return Call("fetchMetadata", now + self.default_api_timeout_ms, LeastLoadedNodeProvider(), request,
                    response, failure, min_version=1, internal=True)

    def check_running(self) -> None:
        with self._lock:
            if self._new_calls is None:
                raise IllegalStateError("The admin client is closed")
