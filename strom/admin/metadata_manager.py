"""The admin client's view of the cluster: brokers, controller, cluster id.

Kafka counterpart: ``org.apache.kafka.clients.admin.internals.AdminMetadataManager`` (and its
``AdminMetadataUpdater``). Unlike the producer's metadata, the admin client fetches metadata itself, as an
ordinary call (brokers only, no topics) sent to the least loaded node when :meth:`metadata_fetch_delay_ms`
reaches 0; the NetworkClient's updater hooks therefore never send anything — they only report the known nodes
and request a refresh on a disconnect. States: QUIESCENT → (request_update) UPDATE_REQUESTED →
(transition_to_update_pending) UPDATE_PENDING → (update / update_failed) QUIESCENT / UPDATE_REQUESTED.
Until the first successful update the cluster is the bootstrap one (node ids -1, -2, ...) and
:meth:`is_ready` is false: calls that need the controller or a specific broker wait.

Thread-safety: I/O thread only (the admin client's ``AdminClientRunnable``).
"""

from __future__ import annotations

import logging
from typing import Any

from strom.common.structs import Node
from strom.network.cluster import Cluster
from strom.security.sasl import AuthenticationError

__all__ = ["AdminMetadataManager"]

log = logging.getLogger(__name__)
LONG_MAX = 2**63 - 1

QUIESCENT, UPDATE_REQUESTED, UPDATE_PENDING = "QUIESCENT", "UPDATE_REQUESTED", "UPDATE_PENDING"


class AdminMetadataManager:
    """Kafka's ``AdminMetadataManager``. I/O thread only."""

    def __init__(self, refresh_backoff_ms: int, metadata_expire_ms: int) -> None:
        self.refresh_backoff_ms = refresh_backoff_ms
        self.metadata_expire_ms = metadata_expire_ms
        self.state = QUIESCENT
        self.last_metadata_update_ms: int | None = None  # None: never (so the first fetch is due at once)
        self.last_metadata_fetch_attempt_ms: int | None = None
        self.fatal_exception: BaseException | None = None
        self._cluster = Cluster.empty()

    # ----------------------------------------------------------------- the NetworkClient's MetadataUpdater

    def fetch_nodes(self) -> list[Node]:
        return list(self._cluster.nodes)

    def is_update_due(self, now: int) -> bool:
        return False

    def maybe_update(self, now: int) -> int:
        return LONG_MAX

    def handle_server_disconnect(self, now: int, node_id: Any, exception: BaseException | None) -> None:
        if exception is not None:
            self.update_failed(exception)
        self.request_update()

    def handle_failed_request(self, now: int, exception: BaseException | None) -> None:
        pass

    def handle_successful_response(self, header: Any, now: int, response: Any) -> None:
        pass

    def close(self) -> None:
        pass

    # MockClient's view of a metadata object (it refreshes nothing for us: we update ourselves).
    def fetch(self) -> Cluster:
        return self._cluster

    def update_requested(self) -> bool:
        return False

    # ------------------------------------------------------------------------------------------ state

    def is_ready(self) -> bool:
        """True once real metadata (not just bootstrap addresses) has been received."""
        return self.fatal_exception is None and bool(self._cluster.nodes) and \
            not self._cluster.is_bootstrap_configured

    @property
    def cluster(self) -> Cluster:
        return self._cluster

    def controller(self) -> Node | None:
        return self._cluster.controller

    def node_by_id(self, node_id: int) -> Node | None:
        return self._cluster.node_by_id(node_id)

    def request_update(self) -> None:
        if self.state == QUIESCENT:
            self.state = UPDATE_REQUESTED
            log.debug("Requesting metadata update.")

    def clear_controller(self) -> None:
        c = self._cluster
        if c.controller is not None:
            self._cluster = Cluster(c.cluster_id, c.nodes, (), controller=None,
                                    is_bootstrap_configured=c.is_bootstrap_configured)

    def metadata_fetch_delay_ms(self, now: int) -> int:
        """How long until a metadata call should be made (0 = now)."""
        if self.state == QUIESCENT:
            # Refresh when the metadata expires, but never sooner than the backoff allows.
            return max(self._delay_before_next_attempt_ms(now),
                       self._delay_before_next_expire_ms(now))
        if self.state == UPDATE_REQUESTED:
            return self._delay_before_next_attempt_ms(now)
        return LONG_MAX

    def _delay_before_next_expire_ms(self, now: int) -> int:
        if self.last_metadata_update_ms is None:
            return 0
        return max(0, self.last_metadata_update_ms + self.metadata_expire_ms - now)

    def _delay_before_next_attempt_ms(self, now: int) -> int:
        if self.last_metadata_fetch_attempt_ms is None:
            return 0
        return max(0, self.last_metadata_fetch_attempt_ms + self.refresh_backoff_ms - now)

    def transition_to_update_pending(self, now: int) -> None:
        self.state = UPDATE_PENDING
        self.last_metadata_fetch_attempt_ms = now

    def update_failed(self, exception: BaseException) -> None:
        """A metadata call failed: retry after the backoff; an authentication failure is fatal (every call
        fails with it until metadata is fetched again), as in Kafka."""
        log.debug("Metadata update failed: %s", exception)
        self.state = UPDATE_REQUESTED
        if isinstance(exception, AuthenticationError):
            self.fatal_exception = exception

    def bootstrap(self, addresses: list[tuple[str, int]]) -> None:
        self._cluster = Cluster.bootstrap(addresses)

    def update(self, cluster: Cluster, now: int) -> None:
        if cluster.is_bootstrap_configured:
            log.debug("Setting bootstrap cluster metadata %s.", cluster)
        else:
            log.debug("Updating cluster metadata to %s", cluster)
            self.last_metadata_update_ms = now
        self.state = QUIESCENT
        self.fatal_exception = None
        if cluster.nodes:
            self._cluster = cluster
