"""Request dispatch: decode the header and body, run the API's handler with its collaborators, frame the response.

Kafka counterpart: ``KafkaApis``. It is built with the broker's collaborators passed in explicitly
(:class:`ApiCollaborators`); each handler declares the ones it uses as keyword-only parameters and gets them
bound once, here, at start-up — an unknown parameter name stops the broker at start, not at the first request.
Event loop only.
"""

from __future__ import annotations

import functools
import inspect
import logging
import struct
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from strom.common.errors import ProtocolError
from strom.common.time import Time
from strom.protocol.api_keys import ApiKey
from strom.protocol.headers import decode_request_header, response_header_version
from strom.protocol.send import MultiSend, SendBuilder
from strom.server.apis import ApiSpec, BoundHandler, load_all
from strom.server.request_context import RequestContext
from strom.server.socket_server import ConnectionClosed, ConnectionContext

if TYPE_CHECKING:
    from strom.server.admin_manager import AdminManager
    from strom.server.broker_config import BrokerConfig
    from strom.server.coordinator.group_coordinator import GroupCoordinator
    from strom.server.dynamic_broker_config import DynamicBrokerConfig
    from strom.server.fetch_session import FetchManager
    from strom.server.metadata_cache import MetadataCache
    from strom.server.producer_id_manager import ProducerIdManager
    from strom.server.replica_manager import ReplicaManager

__all__ = ["ApiCollaborators", "KafkaApis"]

log = logging.getLogger("strom.server")
_RESP_V0 = struct.Struct(">ii")


@dataclass(slots=True)
class ApiCollaborators:
    """Everything a request handler may use; a handler names the fields it needs as keyword-only parameters."""

    config: BrokerConfig
    time: Time
    node_id: int
    metadata: MetadataCache
    replica_manager: ReplicaManager
    admin: AdminManager
    group_coordinator: GroupCoordinator
    producer_ids: ProducerIdManager
    dynamic_config: DynamicBrokerConfig  # the broker's current config with its dynamic levels, and log defaults
    controller: Any = None  # the KafkaController in cluster mode (answers controller APIs when active)
    authorizer: Any = None  # the Authorizer (authorizer.class.name), None: every request is allowed
    credentials: Any = None  # the SCRAM CredentialStore (data dir, or ZooKeeper in a cluster)
    txn_coordinator: Any = None  # the TransactionCoordinator (strom.server.coordinator.transaction_coordinator)
    metrics: Any = None  # the BrokerMetrics (strom.server.broker_metrics); None: nothing is measured
    quotas: Any = None  # the ClientQuotaManagers (produce / fetch byte rates, request time), None: no quotas
    fetch_manager: FetchManager | None = None  # the fetch session cache (KIP-227), None: no sessions are opened
    # client metrics subscriptions and telemetry pushes (KIP-714); None or not enabled: the APIs are not advertised
    client_metrics: Any = None
    supported_apis: dict[int, ApiSpec] = field(default_factory=dict)


class KafkaApis:
    def __init__(self, collaborators: ApiCollaborators, specs: dict[int, ApiSpec] | None = None) -> None:
        self.collaborators = collaborators
        self.specs = dict(specs if specs is not None else load_all())
        collaborators.supported_apis = self.specs
        available = {f.name for f in fields(ApiCollaborators)}
        self._handlers: dict[int, BoundHandler] = {}
        self._request_metrics = collaborators.metrics.requests if collaborators.metrics is not None else None
        for key, spec in self.specs.items():
            params = inspect.signature(spec.handler).parameters.values()
            wanted = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
            unknown = [n for n in wanted if n not in available]
            if unknown:
                raise TypeError(f"handler of {_api_name(key)} asks for unknown collaborator(s) {unknown}")
            self._handlers[key] = functools.partial(
                spec.handler, **{n: getattr(collaborators, n) for n in wanted})
            if collaborators.quotas is not None:  # request-time quotas (KIP-124) around every non-exempt handler
                self._handlers[key] = collaborators.quotas.wrap_handler(key, self._handlers[key])

    def handler(self, api_key: int) -> BoundHandler:
        return self._handlers[api_key]

    async def handle(self, conn: ConnectionContext, frame: memoryview, listener_name: str | None = None,
                     ) -> bytes | bytearray | MultiSend | None:
        try:
            header, body_offset = decode_request_header(frame)
        except ProtocolError as e:
            log.warning("closing connection %s: unreadable request header (%s)", conn.peer, e)
            raise ConnectionClosed() from None
        key, version = header.api_key, header.api_version
        spec = self.specs.get(key)
        if spec is None or not spec.min_version <= version <= spec.max_version:
            if key == ApiKey.API_VERSIONS and spec is not None:
                # KIP-511: answer an unsupported ApiVersions version with a v0 body carrying UNSUPPORTED_VERSION.
                from strom.server.apis.api_versions import unsupported_version_response

                return self.frame(header.correlation_id, 0, unsupported_version_response(spec), 0)
            log.warning("closing connection %s: unsupported %s v%d", conn.peer, _api_name(key), version)
            raise ConnectionClosed()
        try:
            request = spec.request_cls.decode(frame[body_offset:], version)
        except ProtocolError as e:
            log.warning("closing connection %s: malformed %s v%d request (%s)", conn.peer, _api_name(key), version, e)
            raise ConnectionClosed() from None
        ctx = RequestContext(key, version, header.correlation_id, header.client_id, conn, listener_name)
        if self._request_metrics is None:
            response = await self._handlers[key](ctx, request)
        else:  # RequestMetrics: times and error counts per API
            response = await self._request_metrics.timed(self._handlers[key], ctx, request, conn.received_ns)
        if response is None:
            return None
        return self.frame(header.correlation_id, response_header_version(key, version), response, version)

    @staticmethod
    def frame(correlation_id: int, header_version: int, response: object, version: int) -> bytearray | MultiSend:
        """Size + header + body in one buffer (Fetch bodies carry megabytes of records: copy them once only), or a
        :class:`MultiSend` when records are file regions (zero-copy Fetch): the encoded bytes around them."""
        head = 8 if header_version == 0 else 9
        out = SendBuilder(head)
        response.encode_into(out, version)  # type: ignore[attr-defined]
        _RESP_V0.pack_into(out, 0, out.total_size - 4, correlation_id)
        return out.build()


def _api_name(key: int) -> str:
    try:
        return ApiKey(key).name
    except ValueError:
        return f"api key {key}"

