"""Group membership: coordinator discovery, JoinGroup/SyncGroup, heartbeats and LeaveGroup.

Kafka counterpart: ``org.apache.kafka.clients.consumer.internals.AbstractCoordinator`` (classic protocol).

State machine (``MemberState``)::

    UNJOINED --JoinGroup sent--> PREPARING_REBALANCE --JoinGroup ok--> COMPLETING_REBALANCE
        --SyncGroup ok--> STABLE --(REBALANCE_IN_PROGRESS, metadata change, ...)--> rejoin
    any state --UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION / FENCED / LeaveGroup--> UNJOINED (generation reset)

The member id comes from the coordinator (``MEMBER_ID_REQUIRED`` on the first JoinGroup, KIP-394); a static
member (``group.instance.id``, KIP-345) sends its instance id and never sends LeaveGroup. The coordinator
node gets its own connection (node id ``2**31 - 1 - broker id``, as Kafka does) so heartbeats and commits do
not queue behind long-polling fetches. Subclasses supply the protocol: ``metadata()``, ``on_join_prepare``,
``perform_assignment``, ``on_join_complete``.

Heartbeats (Kafka's ``sendHeartbeatRequest`` + ``HeartbeatResponseHandler``, ``pollHeartbeat``,
``timeToNextHeartbeat``) are methods of the coordinator, as in Kafka: they read and reset its generation and
state; the timing is :class:`~strom.consumer.internals.heartbeat.Heartbeat`, the sending thread
:class:`~strom.consumer.internals.heartbeat.HeartbeatThread`.

Threading: the public methods run on the consumer's thread; the :class:`HeartbeatThread` shares the state.
Both hold ``self.lock`` (re-entrant; ``self.cond`` wakes the heartbeat thread) while touching it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from strom.common import error_codes as ec
from strom.common.error_codes import ErrorCode
from strom.common.errors import KafkaError, for_code
from strom.common.structs import Node
from strom.common.time import Time
from strom.consumer.internals.consumer_network_client import ConsumerNetworkClient
from strom.consumer.internals.coordinator_metrics import CoordinatorMetrics
from strom.consumer.internals.group_state import NO_GENERATION, Generation, MemberState
from strom.consumer.internals.heartbeat import Heartbeat, HeartbeatThread
from strom.consumer.internals.request_future import (
    RequestFuture,
    coordinator_not_available,
    no_brokers_available,
)
from strom.consumer.internals.timer import Timer
from strom.metrics import Metrics
from strom.protocol.messages import (
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
)

__all__ = ["AbstractCoordinator", "GroupRebalanceConfig", "Generation", "MemberState", "JOIN_GROUP_TIMEOUT_LAPSE_MS"]

log = logging.getLogger(__name__)

JOIN_GROUP_TIMEOUT_LAPSE_MS = 5000
# Highest group API versions sent: the ones librdkafka itself uses. Later versions add nothing the classic
# consumer needs (v6+/v4+ are the flexible encodings, then reason / protocol echo fields), and librdkafka's mock
# cluster advertises but mishandles them (JoinGroup v6 and SyncGroup v4 close the connection, LeaveGroup v3+
# answers are malformed) — see tests/interop/test_consumer_librdkafka_mock.py.
JOIN_GROUP_MAX_VERSION = 5
SYNC_GROUP_MAX_VERSION = 3
LEAVE_GROUP_MAX_VERSION = 2
_RETRY_JOIN = (ec.UnknownMemberIdError, ec.RebalanceInProgressError, ec.IllegalGenerationError,
               ec.MemberIdRequiredError)


@dataclass(frozen=True, slots=True)
class GroupRebalanceConfig:
    """Kafka's ``GroupRebalanceConfig``."""

    group_id: str
    group_instance_id: str | None = None
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 300_000
    heartbeat_interval_ms: int = 3000
    retry_backoff_ms: int = 100
    request_timeout_ms: int = 30_000
    leave_group_on_close: bool = True


class AbstractCoordinator:
    """Kafka's ``AbstractCoordinator`` (see the module docstring)."""

    PROTOCOL_TYPE = "consumer"

    def __init__(self, config: GroupRebalanceConfig, client: ConsumerNetworkClient, time: Time,
                 client_id: str = "", metrics: Metrics | None = None) -> None:
        self.config = config
        self.client = client
        self.time = time
        self.client_id = client_id
        self.retry_backoff_ms = config.retry_backoff_ms
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.heartbeat = Heartbeat(time, config.session_timeout_ms, config.heartbeat_interval_ms,
                                   config.rebalance_timeout_ms, config.retry_backoff_ms)
        self.state = MemberState.UNJOINED
        self.generation = NO_GENERATION
        self.coordinator: Node | None = None
        self.rejoin_needed = True
        self.rejoin_reason = ""
        self.needs_join_prepare = True
        self.join_future: RequestFuture | None = None
        self.find_coordinator_future: RequestFuture | None = None
        self.heartbeat_thread: HeartbeatThread | None = None
        self.fatal_error: BaseException | None = None
        self.closed = False
        self.sensors = CoordinatorMetrics(metrics if metrics is not None else Metrics(time=time),
                                          self._num_assigned_partitions,
                                          lambda: self.heartbeat.last_heartbeat_send_ms)

    def _num_assigned_partitions(self) -> int:
        subscriptions = getattr(self, "subscriptions", None)
        return subscriptions.num_assigned_partitions() if subscriptions is not None else 0

    # ----------------------------------------------------------------------------- subclass protocol

    def metadata(self) -> list[tuple[str, bytes]]:
        raise NotImplementedError

    def on_join_prepare(self, timer: Timer, generation: int, member_id: str) -> bool:
        raise NotImplementedError

    def perform_assignment(self, leader_id: str, protocol: str, members: list[Any],
                           skip_assignment: bool) -> dict[str, bytes]:
        raise NotImplementedError

    def on_join_complete(self, generation: int, member_id: str, protocol: str, assignment: bytes) -> None:
        raise NotImplementedError

    def on_leave_prepare(self) -> None:
        pass

    def rejoin_needed_or_pending(self) -> bool:
        return self.rejoin_needed or self.join_future is not None

    # --------------------------------------------------------------------------------- coordinator

    def coordinator_unknown(self) -> bool:
        return self.check_and_get_coordinator() is None

    def check_and_get_coordinator(self) -> Node | None:
        with self.lock:
            if self.coordinator is not None and self.client.is_unavailable(self.coordinator):
                self.mark_coordinator_unknown("coordinator unavailable", disconnect=True)
            return self.coordinator

    def mark_coordinator_unknown(self, cause: str, disconnect: bool = False) -> None:
        with self.lock:
            if self.coordinator is not None:
                log.info("Group coordinator %s is unavailable or invalid due to cause: %s. isDisconnected: %s. "
                         "Rediscovery will be attempted.", self.coordinator, cause, disconnect)
                old, self.coordinator = self.coordinator, None
                if disconnect:
                    self.client.disconnect_async(old)

    def ensure_coordinator_ready(self, timer: Timer) -> bool:
        """Find the coordinator and connect to it; ``False`` when ``timer`` expired first."""
        with self.lock:
            while self.coordinator_unknown():
                if self.fatal_error is not None:
                    raise self.fatal_error
                future = self.lookup_coordinator()
                self.client.poll_future(future, timer)
                if not future.is_done():
                    return False
                if future.failed():
                    if not future.is_retriable():
                        raise future.exception
                    log.debug("Coordinator discovery failed (%s), refreshing metadata", future.exception)
                    self.client.await_metadata_update(timer)
                elif self.coordinator is not None and self.client.is_unavailable(self.coordinator):
                    self.mark_coordinator_unknown("coordinator unavailable")
                    timer.sleep(self.retry_backoff_ms)
                if timer.is_expired():
                    return not self.coordinator_unknown()
            return True

    def lookup_coordinator(self) -> RequestFuture:
        with self.lock:
            if self.find_coordinator_future is None:
                node = self.client.least_loaded_node()
                if node is None:
                    return no_brokers_available()
                future = self._send_find_coordinator_request(node)
                self.find_coordinator_future = future
                future.add_listener(lambda _v: self._clear_find_coordinator_future(future),
                                    lambda _e: self._clear_find_coordinator_future(future))
            return self.find_coordinator_future

    def _clear_find_coordinator_future(self, future: RequestFuture) -> None:
        with self.lock:
            if self.find_coordinator_future is future:
                self.find_coordinator_future = None

    def _send_find_coordinator_request(self, node: Node) -> RequestFuture:
        group_id = self.config.group_id
        request = FindCoordinatorRequest(key=group_id, key_type=0, coordinator_keys=[group_id])
        return self.client.send(node, request).compose(self._handle_find_coordinator)

    def _handle_find_coordinator(self, response: Any, future: RequestFuture) -> None:
        if response.coordinators:
            entry = response.coordinators[0]
            error, message, node_id, host, port = (entry.error_code, entry.error_message, entry.node_id,
                                                   entry.host, entry.port)
        else:
            error, message, node_id, host, port = (response.error_code, getattr(response, "error_message", None),
                                                   response.node_id, response.host, response.port)
        if error != ErrorCode.NONE:
            log.debug("Group coordinator lookup failed: %s", message)
            if error == ErrorCode.GROUP_AUTHORIZATION_FAILED:
                future.raise_(ec.GroupAuthorizationFailedError(f"Not authorized to access group: "
                                                               f"{self.config.group_id}"))
            else:
                future.raise_(for_code(error, message))
            return
        with self.lock:
            # a separate connection for coordinator requests (Kafka: Integer.MAX_VALUE - nodeId)
            self.coordinator = Node(2**31 - 1 - node_id, host, port)
            log.info("Discovered group coordinator %s:%d (id: %d rack: null)", host, port, self.coordinator.node_id)
            self.client.try_connect(self.coordinator)
            self.heartbeat.reset_session_timeout()
        future.complete(None)

    # ------------------------------------------------------------------------------------- joining

    def ensure_active_group(self, timer: Timer) -> bool:
        if not self.ensure_coordinator_ready(timer):
            return False
        self._start_heartbeat_thread_if_needed()
        return self.join_group_if_needed(timer)

    def _start_heartbeat_thread_if_needed(self) -> None:
        with self.lock:
            if self.heartbeat_thread is None:
                name = f"kafka-coordinator-heartbeat-thread | {self.config.group_id}"
                self.heartbeat_thread = HeartbeatThread(self, name)
                self.heartbeat_thread.start()

    def join_group_if_needed(self, timer: Timer) -> bool:
        """Run the JoinGroup/SyncGroup round trip until the member is STABLE; ``False`` on timeout."""
        while self.rejoin_needed_or_pending():
            if not self.ensure_coordinator_ready(timer):
                return False
            if self.needs_join_prepare:
                self.needs_join_prepare = False
                if not self.on_join_prepare(timer, self.generation.generation_id, self.generation.member_id):
                    self.needs_join_prepare = True
                    return False  # e.g. the commit before rebalancing did not finish in time
            future = self.initiate_join_group()
            self.client.poll_future(future, timer)
            if not future.is_done():
                return False
            if future.succeeded():
                with self.lock:
                    generation, state = self.generation, self.state
                if generation != NO_GENERATION and state is MemberState.STABLE:
                    self.on_join_complete(generation.generation_id, generation.member_id,
                                          generation.protocol_name or "", future.value)
                    self._reset_join_group_future()
                    self.needs_join_prepare = True
                else:
                    log.info("Generation data was cleared by heartbeat thread (state %s); rejoining", state)
                    self._reset_join_group_future()
            else:
                self._reset_join_group_future()
                exc = future.exception
                if isinstance(exc, _RETRY_JOIN):
                    continue
                if not future.is_retriable():
                    raise exc
                timer.sleep(self.retry_backoff_ms)
            if timer.is_expired():
                return not self.rejoin_needed_or_pending()
        return True

    def _reset_join_group_future(self) -> None:
        with self.lock:
            self.join_future = None

    def initiate_join_group(self) -> RequestFuture:
        with self.lock:
            if self.join_future is None:
                self.state = MemberState.PREPARING_REBALANCE
                self.sensors.rebalance_started(self.time.milliseconds())
                if self.heartbeat_thread is not None:
                    self.heartbeat_thread.disable()
                future = self._send_join_group_request()
                self.join_future = future
                future.add_listener(self._on_join_success, self._on_join_failure)
            return self.join_future

    def _on_join_success(self, _value: Any) -> None:
        with self.lock:
            if self.state is not MemberState.COMPLETING_REBALANCE:
                log.info("JoinGroup succeeded but the generation was reset meanwhile (state %s)", self.state)
                return
            log.info("Successfully joined group with generation %s", self.generation)
            self.state = MemberState.STABLE
            self.sensors.rebalance_succeeded(self.time.milliseconds())
            self.rejoin_needed = False
            if self.heartbeat_thread is not None:
                self.heartbeat_thread.enable()

    def _on_join_failure(self, exc: BaseException) -> None:
        self.sensors.rebalance_failed(self.time.milliseconds())
        with self.lock:
            if self.state is not MemberState.STABLE:
                self.state = MemberState.UNJOINED

    def _send_join_group_request(self) -> RequestFuture:
        if self.coordinator_unknown():
            return coordinator_not_available()
        assert self.coordinator is not None
        log.info("(Re-)joining group %s (reason: %s)", self.config.group_id, self.rejoin_reason)
        request = JoinGroupRequest(
            group_id=self.config.group_id, session_timeout_ms=self.config.session_timeout_ms,
            rebalance_timeout_ms=self.config.rebalance_timeout_ms, member_id=self.generation.member_id,
            group_instance_id=self.config.group_instance_id, protocol_type=self.PROTOCOL_TYPE,
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in self.metadata()],
            reason=self.rejoin_reason or None)
        self.rejoin_reason = ""
        timeout = max(self.config.request_timeout_ms, self.config.rebalance_timeout_ms + JOIN_GROUP_TIMEOUT_LAPSE_MS)
        sent_ms = self.time.milliseconds()
        return self.client.send(self.coordinator, request, timeout_ms=timeout,
                                min_version=5 if self.config.group_instance_id else 0,
                                max_version=JOIN_GROUP_MAX_VERSION).compose(
            lambda response, future: self._handle_join(response, future, sent_ms))

    def _handle_join(self, response: Any, future: RequestFuture, sent_ms: int | None = None) -> None:
        error = response.error_code
        if error == ErrorCode.NONE:
            if sent_ms is not None:
                now = self.time.milliseconds()
                self.sensors.join.record(now - sent_ms, now)
            if response.protocol_type is not None and response.protocol_type != self.PROTOCOL_TYPE:
                future.raise_(ec.InconsistentGroupProtocolError())
                return
            with self.lock:
                if self.state is not MemberState.PREPARING_REBALANCE:
                    future.raise_(KafkaError("The consumer left the group while the JoinGroup was in flight"))
                    return
                self.state = MemberState.COMPLETING_REBALANCE
                if self.heartbeat_thread is not None:
                    self.heartbeat_thread.enable()
                self.generation = Generation(response.generation_id, response.member_id, response.protocol_name)
                log.info("Successfully joined group with generation %s", self.generation)
            if response.leader == response.member_id:
                self._on_join_leader(response).chain(future)
            else:
                self._on_join_follower().chain(future)
            return
        exc = for_code(error)
        if error == ErrorCode.MEMBER_ID_REQUIRED:
            with self.lock:
                self.generation = Generation(NO_GENERATION.generation_id, response.member_id, None)
            self.request_rejoin("need to re-join with the given member-id")
        elif error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.GROUP_MAX_SIZE_REACHED, ErrorCode.ILLEGAL_GENERATION):
            self.reset_generation_on_response_error("JoinGroup", error)
        elif error in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR):
            self.mark_coordinator_unknown(exc.name)
        elif error == ErrorCode.REBALANCE_IN_PROGRESS:
            self.request_rejoin("rebalance in progress")
        elif error == ErrorCode.FENCED_INSTANCE_ID:
            log.error("JoinGroup failed: group.instance.id %s is fenced by another member",
                      self.config.group_instance_id)
            self.fatal_error = exc
        log.log(logging.DEBUG if error == ErrorCode.MEMBER_ID_REQUIRED else logging.INFO, "JoinGroup failed: %s", exc)
        future.raise_(exc)

    def _on_join_follower(self) -> RequestFuture:
        return self._send_sync_group_request([])

    def _on_join_leader(self, response: Any) -> RequestFuture:
        try:
            assignments = self.perform_assignment(response.leader, response.protocol_name or "", response.members,
                                                  bool(getattr(response, "skip_assignment", False)))
        except Exception as exc:
            return RequestFuture.failure(exc)
        return self._send_sync_group_request(
            [SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in assignments.items()])

    def _send_sync_group_request(self, assignments: list[Any]) -> RequestFuture:
        if self.coordinator_unknown():
            return coordinator_not_available()
        assert self.coordinator is not None
        generation = self.generation
        request = SyncGroupRequest(group_id=self.config.group_id, generation_id=generation.generation_id,
                                   member_id=generation.member_id, group_instance_id=self.config.group_instance_id,
                                   protocol_type=self.PROTOCOL_TYPE, protocol_name=generation.protocol_name,
                                   assignments=assignments)
        sent_ms = self.time.milliseconds()
        return self.client.send(self.coordinator, request, min_version=3 if self.config.group_instance_id else 0,
                                max_version=SYNC_GROUP_MAX_VERSION).compose(
            lambda response, future: self._handle_sync(response, future, sent_ms))

    def _handle_sync(self, response: Any, future: RequestFuture, sent_ms: int | None = None) -> None:
        error = response.error_code
        if error == ErrorCode.NONE:
            if sent_ms is not None:
                now = self.time.milliseconds()
                self.sensors.sync.record(now - sent_ms, now)
            if response.protocol_type is not None and response.protocol_type != self.PROTOCOL_TYPE:
                future.raise_(ec.InconsistentGroupProtocolError())
                return
            future.complete(bytes(response.assignment))
            return
        self.request_rejoin(f"SyncGroup failed: {for_code(error).name}")
        exc = for_code(error)
        if error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            self.reset_generation_on_response_error("SyncGroup", error)
        elif error in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR):
            self.mark_coordinator_unknown(exc.name)
        elif error == ErrorCode.FENCED_INSTANCE_ID:
            self.fatal_error = exc
        future.raise_(exc)

    # ------------------------------------------------------------------------------ generation state

    def request_rejoin(self, reason: str) -> None:
        with self.lock:
            self.rejoin_reason = reason
            self.rejoin_needed = True

    def generation_if_stable(self) -> Generation | None:
        with self.lock:
            return self.generation if self.state is MemberState.STABLE else None

    def rebalance_in_progress(self) -> bool:
        with self.lock:
            return self.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE)

    def reset_generation_on_response_error(self, api: str, error: int) -> None:
        log.info("Resetting generation after %s error %s", api, ec.ERROR_CLASSES[error].name)
        self.reset_state_and_generation(reset_member_id=error != ErrorCode.ILLEGAL_GENERATION)

    def reset_state_and_generation(self, reset_member_id: bool = True) -> None:
        with self.lock:
            self.state = MemberState.UNJOINED
            member_id = "" if reset_member_id else self.generation.member_id
            self.generation = Generation(NO_GENERATION.generation_id, member_id, None)
            self.rejoin_needed = True

    def has_generation_reset(self, generation: Generation) -> bool:
        return generation.generation_id == NO_GENERATION.generation_id

    # ------------------------------------------------------------------------------------ leaving

    def maybe_leave_group(self, reason: str) -> RequestFuture | None:
        """Send LeaveGroup (dynamic members only) and reset the generation."""
        future = None
        with self.lock:
            if (self.config.group_instance_id is None and self.config.leave_group_on_close
                    and not self.coordinator_unknown() and self.state is not MemberState.UNJOINED
                    and self.generation.has_member_id()):
                assert self.coordinator is not None
                log.info("Member %s sending LeaveGroup request to coordinator %s due to %s",
                         self.generation.member_id, self.coordinator, reason)
                request = LeaveGroupRequest(
                    group_id=self.config.group_id, member_id=self.generation.member_id,
                    members=[LeaveGroupRequest.MemberIdentity(member_id=self.generation.member_id, reason=reason)])
                future = self.client.send(self.coordinator, request, max_version=LEAVE_GROUP_MAX_VERSION)
            self.reset_state_and_generation()
        return future

    def close(self, timer: Timer) -> None:
        """Stop heartbeating, run ``on_leave_prepare``, leave the group and wait (bounded) for it."""
        thread = self.heartbeat_thread
        if thread is not None:
            thread.close()
        try:
            with self.lock:
                try:
                    self.on_leave_prepare()
                finally:
                    future = self.maybe_leave_group("the consumer is being closed")
            if future is not None:
                self.client.poll_future(future, timer, disable_wakeup=True)
        finally:
            self.closed = True
            if thread is not None and thread.ident is not None and thread is not threading.current_thread():
                thread.join(5)

    def send_heartbeat_request(self) -> RequestFuture:
        if self.coordinator is None:
            return coordinator_not_available()
        generation = self.generation
        request = HeartbeatRequest(group_id=self.config.group_id, generation_id=generation.generation_id,
                                   member_id=generation.member_id, group_instance_id=self.config.group_instance_id)
        sent_generation = generation
        sent_ms = self.time.milliseconds()
        return self.client.send(self.coordinator, request).compose(
            lambda response, future: self._handle_heartbeat(response, future, sent_generation, sent_ms))

    def _handle_heartbeat(self, response: Any, future: RequestFuture, sent: Generation,
                          sent_ms: int | None = None) -> None:
        if sent_ms is not None:  # heartbeat-response-time-max, heartbeat-rate (Kafka records every response)
            now = self.time.milliseconds()
            self.sensors.heartbeat.record(now - sent_ms, now)
        error = response.error_code
        if error == ErrorCode.NONE:
            future.complete(None)
            return
        exc = for_code(error)
        if error in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR):
            self.mark_coordinator_unknown(exc.name)
        elif error == ErrorCode.REBALANCE_IN_PROGRESS:
            with self.lock:
                if self.state is not MemberState.STABLE:
                    future.complete(None)  # already rebalancing: nothing to do
                    return
            self.request_rejoin("group is already rebalancing")
        elif error in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            with self.lock:
                unchanged = self.generation == sent
                if unchanged and self.state is not MemberState.COMPLETING_REBALANCE:
                    if error == ErrorCode.FENCED_INSTANCE_ID:
                        self.fatal_error = exc
                    self.reset_generation_on_response_error("Heartbeat", error)
        future.raise_(exc)

    def poll_heartbeat(self, now: int) -> None:
        """The application polled: reset the poll timer; surface a heartbeat-thread failure."""
        with self.lock:
            thread = self.heartbeat_thread
            if thread is not None and thread.failure is not None:
                failure, thread.failure = thread.failure, None
                if isinstance(failure, ec.FencedInstanceIdError):
                    self.fatal_error = failure
                raise failure
            if self.fatal_error is not None:
                raise self.fatal_error
            self.heartbeat.poll(now)

    def time_to_next_heartbeat(self, now: int) -> int:
        with self.lock:
            if self.state.has_not_joined_group():
                return 2**31 - 1
            return self.heartbeat.time_to_next_heartbeat(now)
