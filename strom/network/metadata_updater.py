"""Keeps :class:`~strom.network.metadata.Metadata` fresh from inside the NetworkClient.

Kafka counterpart: ``NetworkClient.DefaultMetadataUpdater`` (SPEC §4.5). When an update is due (forced or
``metadata.max.age.ms``, never sooner than ``retry.backoff.ms`` after the previous attempt) and no metadata
request is in flight, it sends a MetadataRequest to the least loaded node — connecting to one first if
needed. At most one metadata request is in flight; while it is, the next one waits up to
``request.timeout.ms``. Metadata responses are consumed here and never reach the client's callers. When no
node is available it retries after ``reconnect.backoff.ms``, unless ``metadata.recovery.strategy=rebootstrap``
(KIP-899): then, with no connection ready either, it starts again from the bootstrap servers.

Threading: I/O thread only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from strom.common.errors import error_class
from strom.common.structs import Node
from strom.network.metadata import Metadata

if TYPE_CHECKING:
    from strom.network.network_client import NetworkClient

__all__ = ["DefaultMetadataUpdater"]

log = logging.getLogger(__name__)
LONG_MAX = 2**63 - 1


class DefaultMetadataUpdater:
    """Kafka's ``DefaultMetadataUpdater``. I/O thread only."""

    def __init__(self, metadata: Metadata) -> None:
        self.metadata = metadata
        self.client: NetworkClient | None = None
        self._in_progress: tuple[int, bool] | None = None  # (request version, partial update)

    def bind(self, client: NetworkClient) -> None:
        self.client = client

    def fetch_nodes(self) -> list[Node]:
        return self.metadata.fetch().nodes

    def has_fetch_in_progress(self) -> bool:
        return self._in_progress is not None

    def is_update_due(self, now: int) -> bool:
        return self._in_progress is None and self.metadata.time_to_next_update(now) == 0

    def maybe_update(self, now: int) -> int:
        """Send a metadata request if one is due; returns how long until this needs another look."""
        client = self.client
        assert client is not None
        time_to_next_update = self.metadata.time_to_next_update(now)
        wait_for_fetch = client.default_request_timeout_ms if self._in_progress is not None else 0
        metadata_timeout = max(time_to_next_update, wait_for_fetch)
        if metadata_timeout > 0:
            return metadata_timeout
        node = client.least_loaded_node(now)
        if node is None and self.metadata.can_rebootstrap and not client.has_ready_nodes(now):
            # KIP-899: no broker we know of can be reached; the bootstrap servers may lead to the others
            self.metadata.rebootstrap()
            node = client.least_loaded_node(now)
        if node is None:
            log.debug("%sGive up sending metadata request since no node is available", client.log_context)
            return client.reconnect_backoff_ms
        return self._maybe_update_node(now, node)

    def _maybe_update_node(self, now: int, node: Node) -> int:
        client = self.client
        assert client is not None
        node_id = node.node_id
        if client.can_send_request(node_id, now):
            request, request_version, is_partial = self.metadata.new_metadata_request_and_version(now)
            log.debug("%sSending metadata request %s to node %s", client.log_context, request, node)
            client.send_internal(client.new_client_request(node_id, request, now, True, min_version=1), now)
            self._in_progress = (request_version, is_partial)
            return client.default_request_timeout_ms
        if client.is_any_node_connecting():
            # Wait for the connection underway instead of opening more (Kafka: "connect timeout").
            return client.reconnect_backoff_ms
        if client.connection_states.can_connect(node_id, now):
            log.debug("%sInitialize connection to node %s for sending metadata request", client.log_context, node)
            client.initiate_connect(node, now)
            return client.reconnect_backoff_ms
        return LONG_MAX  # connected but busy, or connecting: a network event will wake us

    def handle_server_disconnect(self, now: int, node_id: Any, exception: BaseException | None) -> None:
        cluster = self.metadata.fetch()
        if cluster.is_bootstrap_configured:
            node = cluster.node_by_id(node_id)
            if node is not None:
                log.warning("Bootstrap broker %s:%d (id: %d) disconnected", node.host, node.port, node.node_id)
        if self.is_update_due(now):
            self.handle_failed_request(now, None)
        if exception is not None:
            self.metadata.fatal_error(exception)
        self.metadata.request_update()  # the disconnect may come from stale metadata

    def handle_failed_request(self, now: int, exception: BaseException | None) -> None:
        if exception is not None:
            self.metadata.fatal_error(exception)
        self.metadata.failed_update(now)
        self._in_progress = None

    def handle_successful_response(self, header: Any, now: int, response: Any) -> None:
        errors = {t.name: error_class(t.error_code).name for t in response.topics if t.error_code}
        if errors:
            log.warning("Error while fetching metadata with correlation id %d : %s", header.correlation_id, errors)
        in_progress = self._in_progress or (self.metadata.request_version, False)
        if not response.brokers:
            log.debug("Ignoring empty metadata response with correlation id %d.", header.correlation_id)
            self.metadata.failed_update(now)
        else:
            self.metadata.update(in_progress[0], response, in_progress[1], now)
        self._in_progress = None

    def close(self) -> None:
        self.metadata.close()
