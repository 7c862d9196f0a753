"""A scripted :class:`~strom.network.kafka_client.KafkaClient` for deterministic client tests.

Kafka counterpart: ``org.apache.kafka.clients.MockClient`` (+ ``RequestTestUtils.metadataUpdateWith``).
Nothing touches a socket: ``send`` records the request (or answers it at once with a response prepared by
:meth:`MockClient.prepare_response`), :meth:`MockClient.respond` answers the oldest pending request, ``poll``
hands out the queued responses (running their callbacks) and applies metadata updates when the metadata asks for
one (honouring the refresh backoff, like the real client). Nodes connect on the first ``ready`` unless blacked out (:meth:`MockClient.blackout`) or disconnected;
requests older than their timeout complete as timed-out disconnects, as in the real client.

Thread-safety: like the real client, one I/O thread (``wakeup`` is thread-safe); tests usually drive it from
the test thread with a :class:`~strom.testing.mock_time.MockTime`.
"""

from __future__ import annotations

import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from strom.common.error_codes import UnsupportedVersionError
from strom.common.errors import IllegalStateError
from strom.common.structs import Node
from strom.common.time import Time
from strom.network.api_versions import NodeApiVersions
from strom.network.client_request import ClientRequest, ClientResponse, RequestCompletionHandler
from strom.network.cluster import Cluster
from strom.protocol.messages import MetadataResponse

__all__ = ["MockClient", "metadata_update_with", "metadata_response_for"]

RequestMatcher = Callable[[Any], bool]


def metadata_update_with(num_nodes: int, topic_partition_counts: Mapping[str, int], *,
                         cluster_id: str = "kafka-cluster", topic_errors: Mapping[str, int] | None = None,
                         leader_for: Callable[[str, int], int | None] | None = None, leader_epoch: int = 0,
                         topic_ids: Mapping[str, uuid.UUID] | None = None, host: str = "localhost",
                         base_port: int = 1969) -> Any:
    """A MetadataResponse with brokers ``0..num_nodes-1`` and topics with the given partition counts, leaders
    assigned round-robin unless ``leader_for(topic, partition)`` says otherwise (``None`` = no leader).
    Kafka's ``RequestTestUtils.metadataUpdateWith``."""
    brokers = [MetadataResponse.MetadataResponseBroker(node_id=i, host=host, port=base_port + i, rack=None)
               for i in range(num_nodes)]
    topics = []
    i = 0
    for topic, count in topic_partition_counts.items():
        partitions = []
        for p in range(count):
            leader = leader_for(topic, p) if leader_for is not None else (i % num_nodes if num_nodes else None)
            i += 1
            leader_id = -1 if leader is None else leader
            replicas = [leader_id] if leader is not None else []
            partitions.append(MetadataResponse.MetadataResponsePartition(
                error_code=0 if leader is not None else 5, partition_index=p, leader_id=leader_id,
                leader_epoch=leader_epoch, replica_nodes=replicas, isr_nodes=replicas, offline_replicas=[]))
        topics.append(MetadataResponse.MetadataResponseTopic(
            error_code=0, name=topic, topic_id=(topic_ids or {}).get(topic) or uuid.uuid4(), is_internal=False,
            partitions=partitions))
    for topic, code in (topic_errors or {}).items():
        topics.append(MetadataResponse.MetadataResponseTopic(error_code=code, name=topic, partitions=[]))
    return MetadataResponse(brokers=brokers, cluster_id=cluster_id, controller_id=0 if num_nodes else -1,
                            topics=topics)


def metadata_response_for(cluster: Cluster) -> Any:
    """A MetadataResponse describing ``cluster`` (re-applying the current metadata)."""
    brokers = [MetadataResponse.MetadataResponseBroker(node_id=n.node_id, host=n.host, port=n.port, rack=n.rack)
               for n in cluster.nodes]
    topics = []
    for topic in sorted(cluster.topics()):
        partitions = [MetadataResponse.MetadataResponsePartition(
            error_code=0 if p.leader is not None else 5, partition_index=p.partition,
            leader_id=p.leader.node_id if p.leader is not None else -1,
            leader_epoch=p.leader_epoch if p.leader_epoch is not None else -1,
            replica_nodes=[n.node_id for n in p.replicas], isr_nodes=[n.node_id for n in p.in_sync_replicas],
            offline_replicas=[]) for p in cluster.partition_infos_for_topic(topic)]
        topics.append(MetadataResponse.MetadataResponseTopic(
            error_code=0, name=topic, topic_id=cluster.topic_id(topic) or uuid.UUID(int=0), partitions=partitions))
    for topic in sorted(cluster.invalid_topics):
        topics.append(MetadataResponse.MetadataResponseTopic(error_code=17, name=topic, partitions=[]))
    for topic in sorted(cluster.unauthorized_topics):
        topics.append(MetadataResponse.MetadataResponseTopic(error_code=29, name=topic, partitions=[]))
    controller = cluster.controller.node_id if cluster.controller is not None else -1
    return MetadataResponse(brokers=brokers, cluster_id=cluster.cluster_id, controller_id=controller, topics=topics)


def _with_unknown_topics(response: Any, asked: Any) -> Any:
    """Like a broker without auto-creation: topics asked for but absent get UNKNOWN_TOPIC_OR_PARTITION."""
    if not asked:
        return response
    known = {t.name for t in response.topics}
    missing = [MetadataResponse.MetadataResponseTopic(error_code=3, name=t.name, partitions=[])
               for t in asked if t.name not in known]
    if not missing:
        return response
    return MetadataResponse(brokers=response.brokers, cluster_id=response.cluster_id,
                            controller_id=response.controller_id, topics=list(response.topics) + missing)


class _FutureResponse:
    __slots__ = ("node", "matcher", "response", "disconnected", "is_unsupported")

    def __init__(self, node: Node | None, matcher: RequestMatcher | None, response: Any, disconnected: bool,
                 is_unsupported: bool) -> None:
        self.node = node
        self.matcher = matcher
        self.response = response
        self.disconnected = disconnected
        self.is_unsupported = is_unsupported


class _ConnectionState:
    """Kafka's ``MockClient.ConnectionState``."""

    __slots__ = ("connected", "backing_off_until", "throttled_until")

    def __init__(self) -> None:
        self.connected = False
        self.backing_off_until = 0
        self.throttled_until = 0

    def ready(self, now: int) -> bool:
        if not self.connected and now >= self.backing_off_until:
            self.connected = True
        return self.connected and now >= self.throttled_until

    def is_ready(self, now: int) -> bool:
        return self.connected and now >= self.throttled_until

    def poll_delay_ms(self, now: int) -> int:
        if self.connected:
            return max(0, self.throttled_until - now)
        return max(0, self.backing_off_until - now)


class MockClient:
    """Kafka's ``MockClient``: a fake network client with scripted responses."""

    def __init__(self, time: Time, metadata: Any = None, *, max_real_poll_ms: int = 0) -> None:
        """``max_real_poll_ms`` > 0 makes an idle ``poll`` wait up to that many real milliseconds (or until
        ``wakeup``), so a producer's I/O thread running over a MockClient does not spin."""
        self.time = time
        self.metadata = metadata
        self.max_real_poll_ms = max_real_poll_ms
        self._wakeup_event = threading.Event()
        self.node_api_versions = NodeApiVersions.create()
        self.requests: deque[ClientRequest] = deque()
        self._future_responses: deque[_FutureResponse] = deque()
        self._responses: deque[ClientResponse] = deque()
        self._metadata_updates: deque[tuple[Any, bool]] = deque()
        self.default_metadata_response: Any = None
        """When set, answers every metadata update that has no prepared response (a standing cluster)."""
        self._states: dict[Any, _ConnectionState] = {}
        self._correlation = 0
        self._active = True
        self.wakeups = 0
        self.polls = 0
        self.closed = False
        self._lock = threading.Lock()

    # -------------------------------------------------------------------------------- connections

    def _state(self, node_id: Any) -> _ConnectionState:
        state = self._states.get(node_id)
        if state is None:
            state = self._states[node_id] = _ConnectionState()
        return state

    def is_ready(self, node: Node, now: int) -> bool:
        return self._state(node.node_id).is_ready(now)

    def ready(self, node: Node, now: int) -> bool:
        return self._state(node.node_id).ready(now)

    def connection_delay(self, node: Node, now: int) -> int:
        return self._state(node.node_id).poll_delay_ms(now)

    def poll_delay_ms(self, node: Node, now: int) -> int:
        return self._state(node.node_id).poll_delay_ms(now)

    def connection_failed(self, node: Node) -> bool:
        state = self._state(node.node_id)
        return not state.connected and state.backing_off_until > self.time.milliseconds()

    def authentication_exception(self, node: Node) -> BaseException | None:
        return None

    def blackout(self, node: Node, duration_ms: int) -> None:
        """Disconnect ``node`` and refuse to reconnect for ``duration_ms``."""
        state = self._state(node.node_id)
        state.connected = False
        state.backing_off_until = self.time.milliseconds() + duration_ms

    def throttle(self, node: Node, duration_ms: int) -> None:
        self._state(node.node_id).throttled_until = self.time.milliseconds() + duration_ms

    def disconnect(self, node_id: Any, allow_immediate_reconnect: bool = True) -> None:
        """Fail every pending request to ``node_id`` as disconnected (delivered by the next poll)."""
        now = self.time.milliseconds()
        for request in list(self.requests):
            if request.destination == node_id:
                self.requests.remove(request)
                self._responses.append(ClientResponse(
                    request.make_header(request.max_version), request.callback, request.destination,
                    request.created_time_ms, now, True, None, None, None))
        state = self._state(node_id)
        state.connected = False
        if not allow_immediate_reconnect:
            state.backing_off_until = now + 1

    def close_node(self, node_id: Any) -> None:
        self.disconnect(node_id)
        self._states.pop(node_id, None)

    def least_loaded_node(self, now: int) -> Node | None:
        if self.metadata is None:
            return None
        for node in self.metadata.fetch().nodes:
            if self._state(node.node_id).backing_off_until <= now:
                return node
        return None

    def has_ready_nodes(self, now: int) -> bool:
        return any(s.is_ready(now) for s in self._states.values())

    # ---------------------------------------------------------------------------------- requests

    def new_client_request(self, node_id: Any, request: Any, created_time_ms: int, expect_response: bool,
                           request_timeout_ms: int | None = None, callback: RequestCompletionHandler | None = None,
                           *, min_version: int | None = None, max_version: int | None = None) -> ClientRequest:
        with self._lock:
            cid = self._correlation
            self._correlation += 1
        return ClientRequest(node_id, request, cid, "mock-client", created_time_ms, expect_response,
                             30_000 if request_timeout_ms is None else request_timeout_ms, callback,
                             min_version=min_version, max_version=max_version)

    def _version(self, request: ClientRequest) -> int:
        return self.node_api_versions.latest_usable_version(request.api_key, request.min_version,
                                                            request.max_version)

    def send(self, request: ClientRequest, now: int) -> None:
        if not self._state(request.destination).is_ready(now):
            raise IllegalStateError(f"Cannot send {request} since the destination is not ready")
        try:
            self._version(request)
        except UnsupportedVersionError as e:  # like NetworkClient: completed at the next poll, never sent
            self._responses.append(ClientResponse(
                request.make_header(request.max_version), request.callback, request.destination,
                request.created_time_ms, self.time.milliseconds(), False, e, None, None))
            return
        for future in list(self._future_responses):
            if future.node is not None and future.node.node_id != request.destination:
                continue
            version_mismatch = None
            try:
                version = self._version(request)
            except UnsupportedVersionError as e:
                version, version_mismatch = request.max_version, e
            if future.is_unsupported:
                version_mismatch = UnsupportedVersionError("Api " + str(request.api_key) + " is not supported")
            elif future.matcher is not None and not future.matcher(request.request):
                raise IllegalStateError(f"Request matcher did not match next-in-line request {request.request!r} "
                                        f"with prepared response {future.response!r}")
            self._future_responses.remove(future)
            self._responses.append(ClientResponse(
                request.make_header(version), request.callback, request.destination, request.created_time_ms,
                self.time.milliseconds(), future.disconnected, version_mismatch, None,
                None if version_mismatch is not None else future.response))
            return
        if not request.expect_response:  # acks=0: complete on send
            self._responses.append(ClientResponse(
                request.make_header(self._version(request)), request.callback, request.destination,
                request.created_time_ms, self.time.milliseconds(), False, None, None, None))
            return
        self.requests.append(request)

    def poll(self, timeout_ms: int, now: int) -> list[ClientResponse]:
        self.polls += 1
        self._check_timeout_of_pending_requests(now)
        metadata = self.metadata
        if (metadata is not None and metadata.update_requested() and metadata.time_to_next_update(now) == 0
                and self.least_loaded_node(now) is not None):
            request = metadata.new_metadata_request_and_version(now)
            if self._metadata_updates:
                response, partial = self._metadata_updates.popleft()
            else:
                standing = self.default_metadata_response
                response = standing if standing is not None else metadata_response_for(metadata.fetch())
                response = _with_unknown_topics(response, request.request.topics)
                partial = request.is_partial_update
            if response.brokers:
                metadata.update(request.request_version, response, partial, self.time.milliseconds())
            else:
                metadata.failed_update(self.time.milliseconds())
        if self.max_real_poll_ms and timeout_ms > 0 and not self._responses:
            self._wakeup_event.wait(min(timeout_ms, self.max_real_poll_ms) / 1000.0)
            self._wakeup_event.clear()
        out: list[ClientResponse] = []
        while self._responses:
            response = self._responses.popleft()
            response.on_complete()
            out.append(response)
        return out

    def _check_timeout_of_pending_requests(self, now: int) -> None:
        for request in list(self.requests):
            if now - request.created_time_ms > request.request_timeout_ms:
                self.requests.remove(request)
                self._responses.append(ClientResponse(
                    request.make_header(request.max_version), request.callback, request.destination,
                    request.created_time_ms, now, True, None, None, None, timed_out=True))

    # ------------------------------------------------------------------------------- scripting

    def respond(self, response: Any, disconnected: bool = False) -> None:
        """Answer the oldest pending request."""
        if not self.requests:
            raise IllegalStateError(f"No requests pending for inbound response {response!r}")
        self.respond_to_request(self.requests[0], response, disconnected)

    def respond_from(self, response: Any, node: Node, disconnected: bool = False) -> None:
        """Answer the oldest pending request to ``node``."""
        for request in self.requests:
            if request.destination == node.node_id:
                self.respond_to_request(request, response, disconnected)
                return
        raise IllegalStateError(f"No requests pending for node {node.node_id}")

    def respond_to_request(self, request: ClientRequest, response: Any, disconnected: bool = False) -> None:
        self.requests.remove(request)
        self._responses.append(ClientResponse(
            request.make_header(self._version(request)), request.callback, request.destination,
            request.created_time_ms, self.time.milliseconds(), disconnected, None, None,
            None if disconnected else response))

    def prepare_response(self, response: Any, matcher: RequestMatcher | None = None, *, node: Node | None = None,
                         disconnected: bool = False, is_unsupported: bool = False) -> None:
        """Answer the next matching request as soon as it is sent (delivered by the following poll)."""
        self._future_responses.append(_FutureResponse(node, matcher, response, disconnected, is_unsupported))

    def prepare_metadata_update(self, response: Any, partial: bool = False) -> None:
        """Applied by the poll after the metadata next requests an update."""
        self._metadata_updates.append((response, partial))

    def update_metadata(self, response: Any) -> None:
        """Apply a metadata response now."""
        assert self.metadata is not None
        self.metadata.update(self.metadata.request_version, response, False, self.time.milliseconds())

    def has_pending_responses(self) -> bool:
        return bool(self._responses) or bool(self._future_responses)

    def requests_of(self, request_type: type) -> list[ClientRequest]:
        return [r for r in self.requests if isinstance(r.request, request_type)]

    # ------------------------------------------------------------------------------ KafkaClient

    def in_flight_request_count(self, node_id: Any = None) -> int:
        if node_id is None:
            return len(self.requests)
        return sum(1 for r in self.requests if r.destination == node_id)

    def has_in_flight_requests(self, node_id: Any = None) -> bool:
        return self.in_flight_request_count(node_id) > 0

    def wakeup(self) -> None:
        with self._lock:
            self.wakeups += 1
        self._wakeup_event.set()

    def initiate_close(self) -> None:
        self._active = False

    def active(self) -> bool:
        return self._active

    def close(self) -> None:
        self._active = False
        self.closed = True
        if self.metadata is not None:
            self.metadata.close()

    @staticmethod
    def node_ids(nodes: Iterable[Node]) -> list[Any]:
        return [n.node_id for n in nodes]
