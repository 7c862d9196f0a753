"""The client's request/response engine over one :class:`~strom.network.selector.Selector`.

Kafka counterpart: ``org.apache.kafka.clients.NetworkClient`` (3.x; SPEC §10). ``ready(node)`` starts a
non-blocking connection when allowed (reconnect backoff, ``ClusterConnectionStates``); a new connection first
negotiates versions with ApiVersions (v3, falling back to what an ``UNSUPPORTED_VERSION`` answer names) and
becomes READY when the answer arrives. ``send`` encodes a request at the highest version both sides support
and queues it (at most ``max.in.flight.requests.per.connection`` un-answered per node). ``poll`` is the only
blocking call: it lets the metadata updater send a MetadataRequest when due, does the I/O, then completes, in
order, sends that expect no response (acks=0), received responses (matched FIFO by correlation id; metadata and
ApiVersions responses are consumed internally), disconnections (in-flight requests fail with a disconnect
flag, metadata refresh requested), connection setup timeouts and request timeouts (``request.timeout.ms`` →
the connection is closed), running each response's callback; a failing callback is logged and the rest run.

Threading: I/O thread only, except :meth:`wakeup` and :meth:`initiate_close`.
"""

from __future__ import annotations

import logging
import random
import socket
from typing import Any

from strom.common.error_codes import ErrorCode
from strom.common.errors import IllegalStateError, ProtocolError
from strom.common.structs import Node
from strom.common.time import SYSTEM_TIME, Time
from strom.network.api_versions import (
    API_VERSIONS_REQUEST_VERSION,
    ApiVersions,
    NodeApiVersions,
)
from strom.network.client_request import (
    ClientRequest,
    ClientResponse,
    InFlightRequest,
    RequestCompletionHandler,
)
from strom.network.connection_states import ClusterConnectionStates
from strom.network.errors import DisconnectError
from strom.network.in_flight_requests import InFlightRequests
from strom.network.kafka_channel import ChannelState
from strom.network.metadata import Metadata
from strom.network.metadata_updater import DefaultMetadataUpdater
from strom.network.network_receive import NetworkSend
from strom.network.selector import Selector
from strom.network.telemetry_sender import ClientTelemetrySender
from strom.protocol.api_keys import ApiKey
from strom.protocol.connection import decode_response_frame, encode_request_frame
from strom.protocol.headers import RequestHeader
from strom.protocol.messages import ApiVersionsRequest

__all__ = ["NetworkClient", "CLIENT_SOFTWARE_NAME", "CLIENT_SOFTWARE_VERSION"]

log = logging.getLogger(__name__)

CLIENT_SOFTWARE_NAME = "strom"
CLIENT_SOFTWARE_VERSION = "0.1.0"
_METADATA = int(ApiKey.METADATA)
_API_VERSIONS = int(ApiKey.API_VERSIONS)
_TELEMETRY = (int(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS), int(ApiKey.PUSH_TELEMETRY))
# KIP-219: from these versions on the client, not the broker, delays requests after a throttle.
_CLIENT_THROTTLE_FROM = {0: 6, 1: 8, 3: 6, 18: 2, 22: 1}


class NetworkClient:
    """Kafka's ``NetworkClient``. I/O thread only (``wakeup`` / ``initiate_close`` are thread-safe)."""

    def __init__(
        self,
        selector: Selector,
        metadata: Metadata | DefaultMetadataUpdater | Any,
        client_id: str,
        max_in_flight_requests_per_connection: int = 5,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        socket_send_buffer: int = -1,
        socket_receive_buffer: int = -1,
        default_request_timeout_ms: int = 30_000,
        connection_setup_timeout_ms: int = 10_000,
        connection_setup_timeout_max_ms: int = 30_000,
        time: Time = SYSTEM_TIME,
        discover_broker_versions: bool = True,
        api_versions: ApiVersions | None = None,
        *,
        log_context: str = "",
        rng: random.Random | None = None,
        telemetry: ClientTelemetrySender | None = None,
    ) -> None:
        self.selector = selector
        # Per-node request latency goes to the selector's metrics (a test selector may have none).
        self._sensors = getattr(selector, "sensors", None)
        if isinstance(metadata, Metadata):
            metadata = DefaultMetadataUpdater(metadata)
        self.metadata_updater = metadata
        bind = getattr(metadata, "bind", None)
        if bind is not None:
            bind(self)
        self.client_id = client_id
        self.in_flight_requests = InFlightRequests(max_in_flight_requests_per_connection)
        self.connection_states = ClusterConnectionStates(reconnect_backoff_ms, reconnect_backoff_max_ms,
                                                         connection_setup_timeout_ms,
                                                         connection_setup_timeout_max_ms, rng)
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.socket_send_buffer = socket_send_buffer
        self.socket_receive_buffer = socket_receive_buffer
        self.default_request_timeout_ms = default_request_timeout_ms
        self.time = time
        self.discover_broker_versions = discover_broker_versions
        self.api_versions = api_versions if api_versions is not None else ApiVersions()
        self.log_context = log_context
        self._rng = rng or random.Random()
        self._correlation = 0
        self._nodes_needing_api_versions: dict[Any, int] = {}  # node -> ApiVersions request version
        self._aborted_sends: list[ClientResponse] = []
        self._state = "ACTIVE"
        self._addresses: dict[Any, tuple[Any, ...]] = {}
        # KIP-714: pushes the client's metrics when the cluster asks for them (None: enable.metrics.push=false)
        self.telemetry = telemetry
        if telemetry is not None:
            telemetry.bind(self)

    # ------------------------------------------------------------------------------ connection state

    def ready(self, node: Node, now: int) -> bool:
        """``True`` if a request can be sent to ``node`` now; otherwise start connecting when allowed."""
        if node.node_id is None or not node.host:
            raise ValueError(f"Cannot connect to empty node {node}")
        if self.is_ready(node, now):
            return True
        self._replace_if_session_ended(node.node_id)
        if self.connection_states.can_connect(node.node_id, now):
            self.initiate_connect(node, now)
        return False

    def is_ready(self, node: Node, now: int) -> bool:
        # While a metadata update is due, nothing else is ready: metadata requests go first.
        return not self.metadata_updater.is_update_due(now) and self.can_send_request(node.node_id, now)

    def can_send_request(self, node_id: Any, now: int) -> bool:
        return (self.connection_states.is_ready(node_id, now) and self.selector.is_channel_ready(node_id)
                and self.in_flight_requests.can_send_more(node_id))

    def can_send_beyond_in_flight_limit(self, node_id: Any, now: int) -> bool:
        """Whether a request that does not count against ``max.in.flight.requests.per.connection`` can go now (a
        ready connection whose last send is written): client telemetry, which a busy producer's requests would
        otherwise keep out for as long as it is busy."""
        return (self.connection_states.is_ready(node_id, now) and self.selector.is_channel_ready(node_id)
                and self.in_flight_requests.last_send_completed(node_id))

    def connection_delay(self, node: Node, now: int) -> int:
        return self.connection_states.connection_delay(node.node_id, now)

    def poll_delay_ms(self, node: Node, now: int) -> int:
        return self.connection_states.poll_delay_ms(node.node_id, now)

    def connection_failed(self, node: Node) -> bool:
        return self.connection_states.is_disconnected(node.node_id)

    def authentication_exception(self, node: Node) -> BaseException | None:
        return self.connection_states.authentication_exception(node.node_id)

    def is_any_node_connecting(self) -> bool:
        return any(self.connection_states.is_connecting(n.node_id) for n in self.metadata_updater.fetch_nodes())

    def has_ready_nodes(self, now: int) -> bool:
        return self.connection_states.has_ready_nodes(now)

    def initiate_connect(self, node: Node, now: int) -> None:
        node_id = node.node_id
        try:
            self.connection_states.connecting(node_id, now, node.host)
            family, address = self._resolve(node)
            log.debug("%sInitiating connection to node %s using address %s", self.log_context, node, address)
            self.selector.connect(node_id, address, self.socket_send_buffer, self.socket_receive_buffer, family,
                                  host=node.host)
        except OSError as e:
            log.warning("%sError connecting to node %s: %s", self.log_context, node, e)
            self.connection_states.disconnected(node_id, now)  # try again after the backoff
            self.metadata_updater.handle_server_disconnect(now, node_id, None)

    @staticmethod
    def _resolve(node: Node) -> tuple[int, tuple[Any, ...]]:
        infos = socket.getaddrinfo(node.host, node.port, type=socket.SOCK_STREAM)
        if not infos:
            raise OSError(f"Can't resolve address: {node.host}:{node.port}")
        family, _type, _proto, _canon, address = infos[0]
        return family, address

    def disconnect(self, node_id: Any) -> None:
        """Close the connection; in-flight requests complete as disconnected on the next poll."""
        if self.connection_states.is_disconnected(node_id):
            return
        log.info("%sClient requested disconnect from node %s", self.log_context, node_id)
        self.selector.close_connection(node_id)
        now = self.time.milliseconds()
        self._cancel_in_flight_requests(node_id, now, self._aborted_sends, False)
        if node_id in self.connection_states:
            self.connection_states.disconnected(node_id, now)

    def close_node(self, node_id: Any) -> None:
        """Kafka's ``close(nodeId)``: close and forget the node's state; in-flight requests are dropped."""
        log.info("%sClient requested connection close from node %s", self.log_context, node_id)
        self.selector.close_connection(node_id)
        self._cancel_in_flight_requests(node_id, self.time.milliseconds(), None, False)
        self.connection_states.remove(node_id)

    def least_loaded_node(self, now: int) -> Node | None:
        """A connected node with the fewest in-flight requests, else one connecting, else one we may
        connect to (the longest not tried); ``None`` if none."""
        nodes = self.metadata_updater.fetch_nodes()
        if not nodes:
            raise IllegalStateError("There are no nodes in the Kafka cluster")
        in_flight = 2**31
        found_ready = found_connecting = found_can_connect = None
        offset = self._rng.randrange(len(nodes))
        states = self.connection_states
        for i in range(len(nodes)):
            node = nodes[(offset + i) % len(nodes)]
            node_id = node.node_id
            if self.can_send_request(node_id, now):
                count = self.in_flight_requests.count(node_id)
                if count == 0:
                    return node
                if count < in_flight:
                    in_flight = count
                    found_ready = node
            elif states.is_preparing_connection(node_id) or states.is_connecting(node_id):
                found_connecting = node
            elif states.can_connect(node_id, now):
                if found_can_connect is None or (states.last_connect_attempt_ms(found_can_connect.node_id)
                                                 > states.last_connect_attempt_ms(node_id)):
                    found_can_connect = node
        return found_ready or found_connecting or found_can_connect

    # ------------------------------------------------------------------------------------ requests

    def new_client_request(self, node_id: Any, request: Any, created_time_ms: int, expect_response: bool,
                           request_timeout_ms: int | None = None, callback: RequestCompletionHandler | None = None,
                           *, min_version: int | None = None, max_version: int | None = None) -> ClientRequest:
        cid = self._correlation
        self._correlation = 0 if cid >= 0x7FFFFFFF else cid + 1
        return ClientRequest(node_id, request, cid, self.client_id, created_time_ms, expect_response,
                             self.default_request_timeout_ms if request_timeout_ms is None else request_timeout_ms,
                             callback, min_version=min_version, max_version=max_version)

    def send(self, request: ClientRequest, now: int) -> None:
        """Queue ``request``; raises :class:`IllegalStateError` if its node is not ready."""
        self._do_send(request, False, now)

    def send_internal(self, request: ClientRequest, now: int) -> None:
        self._do_send(request, True, now)

    def _do_send(self, request: ClientRequest, is_internal: bool, now: int, version: int | None = None) -> None:
        self._ensure_active()
        node_id = request.destination
        if not is_internal and not self.can_send_request(node_id, now):
            raise IllegalStateError(f"Attempt to send a request to node {node_id} which is not ready.")
        if version is None:
            info = self.api_versions.get(node_id)
            try:
                version = (request.max_version if info is None else
                           info.latest_usable_version(request.api_key, request.min_version, request.max_version))
            except Exception as e:  # UnsupportedVersionError: complete without touching the wire
                log.debug("%sVersion mismatch when attempting to send %s to %s", self.log_context, request, node_id)
                response = ClientResponse(request.make_header(request.max_version), request.callback, node_id,
                                          now, now, False, e, None, None)
                if not is_internal:
                    self._aborted_sends.append(response)
                elif request.api_key == _METADATA:
                    self.metadata_updater.handle_failed_request(now, e)
                elif request.api_key in _TELEMETRY and self.telemetry is not None:
                    self.telemetry.handle_failed_request(request.api_key, now)
                return
        header = request.make_header(version)
        out = encode_request_frame(RequestHeader(request.api_key, version, request.correlation_id, self.client_id),
                                   request.request)
        send = NetworkSend(node_id, out)
        self.in_flight_requests.add(InFlightRequest(request, header, is_internal, send, now))
        self.selector.send(send)

    # ---------------------------------------------------------------------------------------- poll

    def poll(self, timeout_ms: int, now: int) -> list[ClientResponse]:
        """Do network I/O for at most ``timeout_ms`` and return (after running their callbacks) the
        responses completed by it."""
        self._ensure_active()
        if self._aborted_sends:
            responses = self._aborted_sends
            self._aborted_sends = []
            self._complete_responses(responses)
            return responses
        metadata_timeout = self.metadata_updater.maybe_update(now)
        if self.telemetry is not None:
            metadata_timeout = min(metadata_timeout, self.telemetry.maybe_update(now))
        try:
            self.selector.poll(max(0, min(timeout_ms, metadata_timeout, self.default_request_timeout_ms)))
        except OSError:
            log.error("%sUnexpected error during I/O", self.log_context, exc_info=True)
        updated_now = self.time.milliseconds()
        responses: list[ClientResponse] = []
        self._handle_completed_sends(responses, updated_now)
        self._handle_completed_receives(responses, updated_now)
        self._handle_disconnections(responses, updated_now)
        self._handle_connections()
        self._handle_initiate_api_version_requests(updated_now)
        self._handle_timed_out_connections(responses, updated_now)
        self._handle_timed_out_requests(responses, updated_now)
        self._handle_expired_sessions(responses, updated_now)
        if self.telemetry is not None and self.telemetry.due(updated_now):
            self.telemetry.maybe_update(updated_now)  # (now, while the connection's last send is written)
        self._complete_responses(responses)
        return responses

    def _complete_responses(self, responses: list[ClientResponse]) -> None:
        for response in responses:
            try:
                response.on_complete()
            except Exception:
                log.error("%sUncaught error in request completion:", self.log_context, exc_info=True)

    def _handle_completed_sends(self, responses: list[ClientResponse], now: int) -> None:
        for send in self.selector.completed_sends:
            request = self.in_flight_requests.last_sent(send.destination)
            if not request.expect_response:
                self.in_flight_requests.complete_last_sent(send.destination)
                responses.append(request.completed(None, now))

    def _handle_completed_receives(self, responses: list[ClientResponse], now: int) -> None:
        for receive in self.selector.completed_receives:
            source = receive.source
            request = self.in_flight_requests.complete_next(source)
            try:
                body = self._parse_response(receive.payload(), request)
            except ProtocolError as e:
                log.error("%sCannot read a response from node %s (%s); disconnecting", self.log_context, source, e)
                if not request.is_internal:
                    responses.append(request.disconnected(now))
                self.selector.close_connection(source)
                self._process_disconnection(responses, source, now, ChannelState.LOCAL_CLOSE)
                continue
            finally:
                receive.release()
            throttle = getattr(body, "throttle_time_ms", 0)
            if throttle and request.header.api_version >= _CLIENT_THROTTLE_FROM.get(request.header.api_key, 1 << 15):
                self.connection_states.throttle(source, now + throttle)
            if request.is_internal and request.header.api_key == _METADATA:
                self.metadata_updater.handle_successful_response(request.header, now, body)
            elif request.is_internal and request.header.api_key == _API_VERSIONS:
                self._handle_api_versions_response(responses, request, now, body)
            elif request.is_internal and request.header.api_key in _TELEMETRY and self.telemetry is not None:
                self.telemetry.handle_response(request.header.api_key, body, now)
            else:
                responses.append(request.completed(body, now))
            if self._sensors is not None:
                self._sensors.record_latency(source, now - request.created_time_ms, now)

    def _parse_response(self, payload: memoryview, request: InFlightRequest) -> Any:
        header = request.header
        return decode_response_frame(payload, header.api_key, header.api_version, header.correlation_id)[1]

    def _handle_api_versions_response(self, responses: list[ClientResponse], request: InFlightRequest, now: int,
                                      body: Any) -> None:
        node = request.destination
        if body.error_code != ErrorCode.NONE:
            if request.header.api_version == 0 or body.error_code != ErrorCode.UNSUPPORTED_VERSION:
                log.warning("%sReceived error %d from node %s when making an ApiVersionsRequest with correlation "
                            "id %d. Disconnecting.", self.log_context, body.error_code, node,
                            request.header.correlation_id)
                self.selector.close_connection(node)
                self._process_disconnection(responses, node, now, ChannelState.LOCAL_CLOSE)
            else:
                max_version = 0
                for entry in body.api_keys:
                    if entry.api_key == _API_VERSIONS:
                        max_version = min(entry.max_version, request.header.api_version - 1)
                self._nodes_needing_api_versions[node] = max(0, max_version)
            return
        versions = NodeApiVersions.from_response(body)
        self.api_versions.update(node, versions)
        self.connection_states.ready(node)
        log.debug("%sNode %s has API versions: %s", self.log_context, node, versions)

    def _handle_disconnections(self, responses: list[ClientResponse], now: int) -> None:
        for node, state in self.selector.disconnected.items():
            self._process_disconnection(responses, node, now, state)

    def _process_disconnection(self, responses: list[ClientResponse] | None, node: Any, now: int,
                               state: ChannelState, timed_out: bool = False) -> None:
        auth_error = (self.selector.authentication_errors.get(node)
                      if state is ChannelState.AUTHENTICATION_FAILED else None)
        if node in self.connection_states:
            if auth_error is not None:
                self.connection_states.authentication_failed(node, now, auth_error)
            else:
                self.connection_states.disconnected(node, now)
        self.api_versions.remove(node)
        self._nodes_needing_api_versions.pop(node, None)
        if state is ChannelState.NOT_CONNECTED:
            log.warning("%sConnection to node %s (%s) could not be established. Node may not be available.",
                        self.log_context, node, self._describe(node))
        self._cancel_in_flight_requests(node, now, responses, timed_out, auth_error)
        self.metadata_updater.handle_server_disconnect(now, node, auth_error)

    def _describe(self, node_id: Any) -> str:
        for n in self.metadata_updater.fetch_nodes():
            if n.node_id == node_id:
                return f"{n.host}:{n.port}"
        return "unknown address"

    def _cancel_in_flight_requests(self, node: Any, now: int, responses: list[ClientResponse] | None,
                                   timed_out: bool, auth_error: BaseException | None = None) -> None:
        for request in self.in_flight_requests.clear_all(node):
            if not request.is_internal:
                if responses is not None:
                    responses.append(request.disconnected(now, auth_error, timed_out))
            elif request.header.api_key == _METADATA:
                self.metadata_updater.handle_failed_request(now, None)
            elif request.header.api_key in _TELEMETRY and self.telemetry is not None:
                self.telemetry.handle_failed_request(request.header.api_key, now)

    def _handle_connections(self) -> None:
        for node in self.selector.connected:
            if self.discover_broker_versions:
                self.connection_states.checking_api_versions(node)
                self._nodes_needing_api_versions[node] = API_VERSIONS_REQUEST_VERSION
                log.debug("%sCompleted connection to node %s. Fetching API versions.", self.log_context, node)
            else:
                self.connection_states.ready(node)
                log.debug("%sCompleted connection to node %s. Ready.", self.log_context, node)

    def _handle_initiate_api_version_requests(self, now: int) -> None:
        if not self._nodes_needing_api_versions:
            return
        for node, version in list(self._nodes_needing_api_versions.items()):
            if self.selector.is_channel_ready(node) and self.in_flight_requests.can_send_more(node):
                log.debug("%sInitiating API versions fetch from node %s.", self.log_context, node)
                request = ApiVersionsRequest(client_software_name=CLIENT_SOFTWARE_NAME,
                                             client_software_version=CLIENT_SOFTWARE_VERSION)
                client_request = self.new_client_request(node, request, now, True)
                del self._nodes_needing_api_versions[node]
                self._do_send(client_request, True, now, version)

    def _handle_timed_out_connections(self, responses: list[ClientResponse], now: int) -> None:
        for node in self.connection_states.nodes_with_connection_setup_timeout(now):
            self.selector.close_connection(node)
            log.info("%sDisconnecting from node %s due to socket connection setup timeout. The timeout value is "
                     "%d ms.", self.log_context, node, self.connection_states.connection_setup_timeout_ms(node))
            self._process_disconnection(responses, node, now, ChannelState.LOCAL_CLOSE, True)

    def _handle_expired_sessions(self, responses: list[ClientResponse], now: int) -> None:
        """KIP-368: once a connection's SASL session nears its end nothing new is sent on it; when its last
        response is in, it is closed so the next request reconnects and authenticates again."""
        for node in self.selector.expired_sessions():
            self._replace_if_session_ended(node)

    def _replace_if_session_ended(self, node: Any) -> None:
        if node in self.selector.expired_sessions() and not self.in_flight_requests.count(node):
            log.debug("%sReplacing the connection to node %s: its SASL session is ending", self.log_context, node)
            self.selector.close_connection(node)
            # Not a failure: no backoff, no metadata refresh; the next ready() connects at once.
            self.connection_states.remove(node)
            self.api_versions.remove(node)
            self._nodes_needing_api_versions.pop(node, None)

    def _handle_timed_out_requests(self, responses: list[ClientResponse], now: int) -> None:
        for node in self.in_flight_requests.nodes_with_timed_out_requests(now):
            self.selector.close_connection(node)
            log.info("%sDisconnecting from node %s due to request timeout.", self.log_context, node)
            self._process_disconnection(responses, node, now, ChannelState.LOCAL_CLOSE, True)

    # ------------------------------------------------------------------------------------- queries

    def in_flight_request_count(self, node_id: Any = None) -> int:
        return self.in_flight_requests.count(node_id)

    def has_in_flight_requests(self, node_id: Any = None) -> bool:
        return self.in_flight_requests.count(node_id) > 0

    # --------------------------------------------------------------------------------- life cycle

    def wakeup(self) -> None:
        """Interrupt a blocking :meth:`poll` (thread-safe)."""
        self.selector.wakeup()

    def initiate_close(self) -> None:
        if self._state == "ACTIVE":
            self._state = "CLOSING"
            self.wakeup()

    def active(self) -> bool:
        return self._state == "ACTIVE"

    def _ensure_active(self) -> None:
        if self._state != "ACTIVE":
            raise DisconnectError(f"NetworkClient is no longer active, state is {self._state}")

    def close(self) -> None:
        if self._state == "CLOSED":
            log.warning("%sAttempting to close NetworkClient that has already been closed.", self.log_context)
            return
        self._state = "CLOSED"
        self.selector.close()
        self.metadata_updater.close()
