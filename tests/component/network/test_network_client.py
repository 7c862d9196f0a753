"""NetworkClient component tests over a scripted selector and MockTime (Kafka's ``NetworkClientTest``)."""

from __future__ import annotations

import logging

import pytest

from strom.common.errors import IllegalStateError
from strom.network.connection_states import ConnectionState
from strom.protocol.messages import MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse
from strom.testing.mock_client import metadata_update_with

from .client_support import API_VERSIONS, METADATA, PRODUCE, ClientHarness, api_versions_response, make_client

pytestmark = [pytest.mark.component, pytest.mark.timeout(60)]


def _produce(acks: int = 1) -> ProduceRequest:
    return ProduceRequest(acks=acks, timeout_ms=1000, topic_data=[])


def test_ready_connects_then_negotiates_api_versions() -> None:
    """§18 item 73: ready() on a never-connected node starts a connection and returns False; after the
    connection completes the client fetches ApiVersions (v3) and only then is the node ready."""
    h = make_client()
    node = h.node(0)
    assert not h.client.ready(node, h.now)
    assert h.client.connection_states.is_connecting(0)
    h.poll()
    assert h.client.connection_states.connection_state(0) is ConnectionState.CHECKING_API_VERSIONS
    assert not h.client.is_ready(node, h.now)
    request = h.selector.unanswered(0, API_VERSIONS)[0]
    assert request.header.api_version == 3
    assert request.body.client_software_name == "strom"
    h.selector.respond(request, api_versions_response())
    responses = h.poll()
    assert responses == []  # §18 item 83: consumed internally
    assert h.client.ready(node, h.now)
    assert h.client.api_versions.get(0) is not None


def test_api_versions_fallback_parses_librdkafka_mock_body() -> None:
    """§9.2 / §10.3 ApiVersions negotiation: UNSUPPORTED_VERSION with librdkafka's nonstandard body
    (``0023 01 0012 0000 0002 00 00000000``) makes the client retry with v2; then per-API versions are the
    highest both sides support."""
    h = make_client()
    node = h.node(0)
    h.client.ready(node, h.now)
    h.poll()
    first = h.selector.unanswered(0, API_VERSIONS)[0]
    h.selector.respond(first, raw_body=bytes.fromhex("0023010012000000020000000000"))
    h.poll()
    second = h.selector.unanswered(0, API_VERSIONS)[0]
    assert second.header.api_version == 2
    h.selector.respond(second, api_versions_response({PRODUCE: (0, 7), METADATA: (0, 13), API_VERSIONS: (0, 2)}))
    h.poll()
    assert h.client.ready(node, h.now)
    h.client.send(h.client.new_client_request(0, _produce(), h.now, True), h.now)
    assert h.selector.requests[-1].header.api_version == 7
    assert h.client.api_versions.get(0).latest_usable_version(METADATA) == 12  # capped by strom's codecs


def test_api_versions_fallback_standard_v0_body() -> None:
    """§9.2: ApiVersions fallback with a Kafka broker's v0 error body naming ApiVersions 0..1."""
    h = make_client()
    h.client.ready(h.node(0), h.now)
    h.poll()
    first = h.selector.unanswered(0, API_VERSIONS)[0]
    h.selector.respond(first, api_versions_response({API_VERSIONS: (0, 1)}, error=35), version=0)
    h.poll()
    assert h.selector.unanswered(0, API_VERSIONS)[0].header.api_version == 1


def test_api_versions_other_error_disconnects() -> None:
    """§10.3: an ApiVersions error other than UNSUPPORTED_VERSION closes the connection."""
    h = make_client()
    h.client.ready(h.node(0), h.now)
    h.poll()
    h.selector.respond(h.selector.unanswered(0, API_VERSIONS)[0], api_versions_response({}, error=-1))
    h.poll()
    assert 0 in h.selector.closed_connections
    assert h.client.connection_states.is_disconnected(0)


def test_send_to_not_ready_node_raises() -> None:
    """§18 item 76: sending to a node that is not ready raises "Attempt to send a request to node <id> which
    is not ready."."""
    h = make_client()
    request = h.client.new_client_request(1, _produce(), h.now, True)
    with pytest.raises(IllegalStateError, match=r"^Attempt to send a request to node 1 which is not ready\.$"):
        h.client.send(request, h.now)


def test_in_flight_limit_and_one_send_at_a_time() -> None:
    """§18 item 78 (and §10.2 ext): at most max.in.flight un-answered requests per connection, and a new one
    only once the previous request has been completely written."""
    h = make_client(max_in_flight=2)
    node = h.node(0)
    h.connect(node)
    h.selector.hold_sends = True
    h.client.send(h.client.new_client_request(0, _produce(), h.now, True), h.now)
    assert not h.client.is_ready(node, h.now)  # still being written
    h.selector.hold_sends = False
    h.poll()
    assert h.client.is_ready(node, h.now)
    h.client.send(h.client.new_client_request(0, _produce(), h.now, True), h.now)
    h.poll()
    assert h.client.in_flight_request_count(0) == 2
    assert not h.client.is_ready(node, h.now)
    h.selector.respond(h.selector.unanswered(0, PRODUCE)[0], ProduceResponse())
    h.poll()
    assert h.client.is_ready(node, h.now)


def test_responses_matched_fifo_and_correlation_mismatch_disconnects() -> None:
    """§18 item 79: responses complete the oldest in-flight request of the node; a response whose correlation
    id does not match closes the connection and fails the in-flight requests as disconnected."""
    h = make_client()
    h.connect(h.node(0))
    done: list[tuple[int, bool]] = []
    for _ in range(3):
        h.client.send(h.client.new_client_request(0, _produce(), h.now, True,
                                                  callback=lambda r: done.append(
                                                      (r.request_header.correlation_id, r.disconnected))), h.now)
        h.poll()
    first, second, third = h.selector.unanswered(0, PRODUCE)
    h.selector.respond(first, ProduceResponse())
    h.poll()
    assert done == [(first.header.correlation_id, False)]
    h.selector.respond(second, ProduceResponse(), correlation_id=999)
    h.poll()
    assert [d for _, d in done[1:]] == [True, True]
    assert 0 in h.selector.closed_connections
    assert h.metadata.update_requested()


def test_acks_zero_completes_on_send() -> None:
    """§18 item 66: a request that expects no response completes when its send completes."""
    h = make_client()
    h.connect(h.node(0))
    h.client.send(h.client.new_client_request(0, _produce(acks=0), h.now, False), h.now)
    responses = h.poll()
    assert len(responses) == 1 and responses[0].response_body is None and not responses[0].disconnected
    assert h.client.in_flight_request_count() == 0


def test_completion_order_within_one_poll() -> None:
    """§18 item 84: one poll delivers completed sends, then receives, then disconnections, then timed-out
    requests."""
    h = make_client(request_timeout_ms=1000)
    for i in range(3):
        h.connect(h.node(i))
    order: list[str] = []
    h.client.send(h.client.new_client_request(2, _produce(), h.now, True, callback=lambda r: order.append(
        "timeout")), h.now)
    h.poll()
    h.time.sleep(600)
    h.client.send(h.client.new_client_request(0, _produce(), h.now, True, callback=lambda r: order.append(
        "receive")), h.now)
    h.client.send(h.client.new_client_request(1, _produce(), h.now, True, callback=lambda r: order.append(
        "disconnect")), h.now)
    h.poll()
    h.selector.respond(h.selector.unanswered(0, PRODUCE)[0], ProduceResponse())
    h.selector.server_disconnect(1)
    h.client.send(h.client.new_client_request(0, _produce(acks=0), h.now, False, callback=lambda r: order.append(
        "send")), h.now)
    h.time.sleep(500)
    h.poll()
    assert order == ["send", "receive", "disconnect", "timeout"]


def test_callback_exception_is_logged_and_others_complete(caplog: pytest.LogCaptureFixture) -> None:
    """§18 item 85: an exception thrown by a completion callback is logged; other completions still run."""
    h = make_client()
    h.connect(h.node(0))
    h.connect(h.node(1))
    seen = []

    def bad(_r):  # type: ignore[no-untyped-def]
        raise RuntimeError("bug")

    h.client.send(h.client.new_client_request(0, _produce(acks=0), h.now, False, callback=bad), h.now)
    h.client.send(h.client.new_client_request(1, _produce(acks=0), h.now, False, callback=seen.append), h.now)
    with caplog.at_level(logging.ERROR):
        responses = h.poll()
    assert len(responses) == 2 and len(seen) == 1
    assert "Uncaught error in request completion" in caplog.text


def test_request_timeout_disconnects_and_requests_metadata() -> None:
    """§18 items 26, 86: a request unanswered for request.timeout.ms closes its connection, completes as a
    timed-out disconnect and requests a metadata update."""
    h = make_client(request_timeout_ms=1000)
    h.connect(h.node(0))
    h.client.send(h.client.new_client_request(0, _produce(), h.now, True), h.now)
    h.poll()
    h.time.sleep(1001)
    responses = h.poll()
    assert len(responses) == 1 and responses[0].disconnected and responses[0].timed_out
    assert 0 in h.selector.closed_connections
    assert h.metadata.update_requested()
    assert h.client.connection_states.is_disconnected(0)


def test_server_disconnect_fails_in_flight_and_requests_metadata() -> None:
    """§18 item 26: a lost connection completes its in-flight requests with the disconnect flag, forgets
    the node's API versions and requests a metadata update."""
    h = make_client()
    h.connect(h.node(0))
    h.client.send(h.client.new_client_request(0, _produce(), h.now, True), h.now)
    h.poll()
    h.selector.server_disconnect(0)
    responses = h.poll()
    assert [r.disconnected for r in responses] == [True]
    assert h.client.api_versions.get(0) is None
    assert h.metadata.update_requested()


def test_failed_connect_marks_node_disconnected_and_requests_metadata() -> None:
    """§18 item 75: a connection that fails to initiate marks the node disconnected and requests a
    metadata update; reconnecting waits for the backoff."""
    h = make_client()
    h.selector.connect_error = OSError("Can't resolve address")
    assert not h.client.ready(h.node(0), h.now)
    assert h.client.connection_states.is_disconnected(0)
    assert h.metadata.update_requested()
    assert not h.client.connection_states.can_connect(0, h.now)


def test_connection_setup_timeout_disconnects() -> None:
    """§10.1: a connection still CONNECTING after socket.connection.setup.timeout.ms (±20 %) is closed."""
    h = make_client(setup_timeout_ms=1000, setup_timeout_max_ms=4000)
    h.selector.hold_connects = True
    h.client.ready(h.node(0), h.now)
    h.poll()
    assert h.client.connection_states.is_connecting(0)
    h.time.sleep(1250)
    h.poll()
    assert h.client.connection_states.is_disconnected(0)
    assert 0 in h.selector.closed_connections
    assert h.client.connection_states.connection_setup_timeout_ms(0) >= 1600  # doubled (±20 %)


def test_one_metadata_request_in_flight_to_least_loaded_node() -> None:
    """§18 items 27, 28, 29: a due update sends one MetadataRequest to the least loaded node; while it is
    outstanding no other is sent (the poll waits up to request.timeout.ms) and every node is not ready."""
    h = make_client(request_timeout_ms=5000)
    h.connect(h.node(0))
    h.connect(h.node(1))
    h.client.send(h.client.new_client_request(0, _produce(), h.now, True), h.now)
    h.poll()
    h.time.sleep(100)
    h.metadata.request_update()
    assert not h.client.is_ready(h.node(0), h.now)  # item 29
    h.poll()
    sent = h.selector.unanswered(api_key=METADATA)
    assert len(sent) == 1 and sent[0].destination == 1  # node 1 has no in-flight requests
    h.metadata.request_update()
    h.poll(10_000)
    assert len(h.selector.unanswered(api_key=METADATA)) == 1
    assert h.selector.poll_timeouts[-1] <= 5000
    h.selector.respond(sent[0], metadata_update_with(3, {"t": 1}))
    version = h.metadata.update_version
    assert h.poll() == []  # item 83
    assert h.metadata.update_version == version + 1


def test_metadata_empty_brokers_is_failed_update() -> None:
    """§18 item 24: a metadata response with no brokers is a failed update (no version bump, backoff)."""
    h = make_client()
    h.connect(h.node(0))
    h.time.sleep(200)
    h.metadata.request_update()
    h.poll()
    version = h.metadata.update_version
    h.selector.respond(h.selector.unanswered(api_key=METADATA)[0], MetadataResponse(brokers=[], topics=[]))
    h.poll()
    assert h.metadata.update_version == version
    assert h.metadata.time_to_next_update(h.now) == 100


def test_least_loaded_node_without_nodes_available() -> None:
    """§18 item 28: with every node backing off the updater waits reconnect.backoff.ms."""
    h = make_client(nodes=1, reconnect_backoff_ms=50, reconnect_backoff_max_ms=50)
    h.selector.connect_error = OSError("down")
    h.client.ready(h.node(0), h.now)
    assert h.client.least_loaded_node(h.now) is None
    h.metadata.request_update()
    h.time.sleep(100)
    h.client.poll(10_000, h.now)  # connects (fails again), waits for the backoff
    assert h.selector.poll_timeouts[-1] == 50


def test_unsupported_api_is_aborted_without_io() -> None:
    """§9.2: a request whose API the node does not support completes with a version mismatch at the next
    poll, without touching the selector."""
    h = make_client()
    h.connect(h.node(0), {API_VERSIONS: (0, 3), METADATA: (0, 12)})
    request = h.client.new_client_request(0, _produce(), h.now, True)
    h.client.send(request, h.now)
    polls = len(h.selector.poll_timeouts)
    responses = h.poll()
    assert len(responses) == 1 and responses[0].version_mismatch is not None
    assert len(h.selector.poll_timeouts) == polls


def test_close_and_wakeup() -> None:
    """§18 item 89: wakeup reaches the selector; close closes selector and metadata."""
    h = make_client()
    h.client.wakeup()
    assert h.selector.wakeups == 1
    h.client.close()
    assert h.selector.closed and h.metadata.is_closed()
    assert not h.client.active()


def test_metadata_request_asks_for_all_topics_by_default() -> None:
    """§4.5: base Metadata asks for all topics (``topics=None``)."""
    h = make_client()
    h.connect(h.node(0))
    h.time.sleep(200)
    h.metadata.request_update()
    h.poll()
    request = h.selector.unanswered(api_key=METADATA)[0]
    assert isinstance(request.body, MetadataRequest) and request.body.topics is None


def _bootstrapped(strategy: str) -> ClientHarness:
    """A client bootstrapped from two addresses whose metadata then named a single broker (3, elsewhere): the
    others were down when that answer was given."""
    h = make_client(reconnect_backoff_ms=1000, reconnect_backoff_max_ms=1000)
    h.metadata.bootstrap([("localhost", 19092), ("127.0.0.1", 19093)], recovery_strategy=strategy)
    response = metadata_update_with(1, {"t": 1}, leader_for=lambda t, p: 3)
    response.brokers[0].node_id, response.brokers[0].port = 3, 19999
    h.metadata.update(h.metadata.request_version, response, False, h.now)
    assert [n.node_id for n in h.metadata.fetch().nodes] == [3]
    return h


@pytest.mark.parametrize("strategy", ["rebootstrap", "none"])
def test_no_reachable_broker_rebootstraps_only_when_configured(strategy: str) -> None:
    """KIP-899 (metadata.recovery.strategy): when the only broker the metadata names cannot be reached and a
    metadata update is due, ``rebootstrap`` starts again from bootstrap.servers and asks one of them; ``none``
    keeps waiting for the known broker."""
    h = _bootstrapped(strategy)
    h.selector.connect_error = OSError("Connection refused")
    assert not h.client.ready(h.metadata.fetch().node_by_id(3), h.now)  # in reconnect backoff now
    h.selector.connect_error = None
    assert h.metadata.update_requested()
    h.time.sleep(200)  # past the metadata refresh backoff (100 ms), within the reconnect backoff (1 s +-20 %)
    h.poll()
    nodes = [(n.node_id, n.port) for n in h.metadata.fetch().nodes]
    if strategy == "rebootstrap":
        assert nodes == [(-1, 19092), (-2, 19093)]
        h.poll()  # a bootstrap connection completes; the metadata request goes out on it after ApiVersions
        (connecting,) = [n for n in h.metadata.fetch().nodes if n.node_id in h.selector.ready]
        h.selector.respond(h.selector.unanswered(connecting.node_id, API_VERSIONS)[-1], api_versions_response())
        h.poll()
        h.poll()
        assert [r.destination for r in h.selector.unanswered(api_key=METADATA)] == [connecting.node_id]
    else:
        assert nodes == [(3, 19999)]
        assert h.selector.unanswered(api_key=METADATA) == []
