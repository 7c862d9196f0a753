"""NetworkClient test harness over the MockSelector and MockTime."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from strom.common.structs import Node
from strom.network.api_versions import CLIENT_VERSIONS
from strom.network.metadata import Metadata
from strom.network.network_client import NetworkClient
from strom.protocol.messages import ApiVersionsResponse
from strom.testing.mock_client import metadata_update_with
from strom.testing.mock_time import MockTime

from .mock_selector import MockSelector

API_VERSIONS = 18
METADATA = 3
PRODUCE = 0


@dataclass
class ClientHarness:
    time: MockTime
    selector: MockSelector
    metadata: Metadata
    client: NetworkClient

    @property
    def now(self) -> int:
        return self.time.milliseconds()

    def node(self, i: int = 0) -> Node:
        return self.metadata.fetch().node_by_id(i)  # type: ignore[return-value]

    def poll(self, timeout_ms: int = 0) -> list[Any]:
        return self.client.poll(timeout_ms, self.now)

    def connect(self, node: Node, versions: dict[int, tuple[int, int]] | None = None) -> None:
        """Connect and finish the ApiVersions exchange."""
        assert not self.client.ready(node, self.now)
        self.poll()  # connection completes, ApiVersions request goes out
        request = self.selector.unanswered(node.node_id, API_VERSIONS)[-1]
        self.selector.respond(request, api_versions_response(versions))
        self.poll()
        assert self.client.is_ready(node, self.now)


def api_versions_response(versions: dict[int, tuple[int, int]] | None = None, error: int = 0) -> Any:
    supported = dict(CLIENT_VERSIONS) if versions is None else versions
    return ApiVersionsResponse(error_code=error, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in
        sorted(supported.items())])


def make_client(*, nodes: int = 3, max_in_flight: int = 5, request_timeout_ms: int = 30_000,
                reconnect_backoff_ms: int = 50, reconnect_backoff_max_ms: int = 1000,
                setup_timeout_ms: int = 10_000, setup_timeout_max_ms: int = 30_000, refresh_backoff_ms: int = 100,
                metadata_max_age_ms: int = 300_000, discover: bool = True) -> ClientHarness:
    time = MockTime()
    selector = MockSelector(time)
    metadata = Metadata(refresh_backoff_ms, metadata_max_age_ms, time)
    metadata.update(metadata.request_version, metadata_update_with(nodes, {}), False, time.milliseconds())
    client = NetworkClient(selector, metadata, "test-client", max_in_flight, reconnect_backoff_ms,  # type: ignore[arg-type]
                           reconnect_backoff_max_ms, -1, -1, request_timeout_ms, setup_timeout_ms,
                           setup_timeout_max_ms, time, discover, rng=random.Random(7))
    return ClientHarness(time, selector, metadata, client)
