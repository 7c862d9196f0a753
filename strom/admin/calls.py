"""One admin operation's request to one broker, and how its destination is chosen.

Kafka counterparts: ``KafkaAdminClient.Call`` (an anonymous subclass per API: ``createRequest``,
``handleResponse``, ``handleFailure``, ``handleUnsupportedVersionException``) and the ``NodeProvider`` s
(``LeastLoadedNodeProvider``, ``ControllerNodeProvider``, ``ConstantNodeIdProvider``,
``MetadataUpdateNodeIdProvider``) plus the group-coordinator lookup of ``CoordinatorStrategy``
(:class:`CoordinatorProvider`: FindCoordinator is itself a call, its answer cached until a NOT_COORDINATOR).

A call is retried (``retry.backoff.ms`` … ``retry.backoff.max.ms``, exponential) when its failure is retriable
(``KafkaError.retriable``: disconnects, coordinator moves, leader changes) and it has time left before its
deadline; otherwise ``on_failure`` runs once. ``on_response`` raising an exception is a failure of the call.

Thread-safety: I/O thread only, except construction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from strom.common.error_codes import ErrorCode
from strom.common.errors import KafkaError, for_code
from strom.common.structs import Node

if TYPE_CHECKING:
    from strom.admin.runnable import AdminClientRunnable

__all__ = [
    "Call",
    "NodeProvider",
    "LeastLoadedNodeProvider",
    "ControllerNodeProvider",
    "ConstantNodeProvider",
    "CoordinatorProvider",
    "raise_for",
]

log = logging.getLogger(__name__)


def raise_for(code: int, message: str | None = None) -> None:
    """Raise the broker error for a non-zero ``code`` (with the broker's message when it sent one)."""
    if code:
        raise for_code(code, message or None)


class NodeProvider(Protocol):
    """Chooses the broker a call goes to; ``None`` = not known yet (try again on the next loop)."""

    def provide(self, runnable: AdminClientRunnable, now: int) -> Node | None: ...


class LeastLoadedNodeProvider:
    """Any broker: the least loaded one (bootstrap servers until metadata is known)."""

    def provide(self, runnable: AdminClientRunnable, now: int) -> Node | None:
        return runnable.client.least_loaded_node(now)


class ControllerNodeProvider:
    """The controller named by the latest metadata (requests a metadata update while unknown)."""

    def provide(self, runnable: AdminClientRunnable, now: int) -> Node | None:
        mm = runnable.metadata_manager
        if mm.is_ready():
            controller = mm.controller()
            if controller is not None:
                return controller
        mm.request_update()
        return None


class ConstantNodeProvider:
    """One given broker (a partition leader, a coordinator, or a broker id resolved through metadata)."""

    def __init__(self, node: Node | int) -> None:
        self.node = node

    def provide(self, runnable: AdminClientRunnable, now: int) -> Node | None:
        if isinstance(self.node, Node):
            return self.node
        mm = runnable.metadata_manager
        if mm.is_ready():
            node = mm.node_by_id(self.node)
            if node is not None:
                return node
        mm.request_update()
        return None


class CoordinatorProvider:
    """The coordinator of a group (key type 0) or transactional id (1), looked up with FindCoordinator.

    The lookup is a call of its own, started on the first ``provide``; while it runs ``provide`` returns
    ``None``. A fatal lookup error is raised from ``provide`` (failing the waiting call). ``invalidate()`` after
    NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE makes the next ``provide`` look the coordinator up again.
    """

    def __init__(self, key: str, key_type: int = 0) -> None:
        self.key = key
        self.key_type = key_type
        self.node: Node | None = None
        self.error: BaseException | None = None
        self._lookup: Call | None = None

    def invalidate(self) -> None:
        self.node = None

    def provide(self, runnable: AdminClientRunnable, now: int) -> Node | None:
        if self.error is not None:
            raise self.error
        if self.node is not None:
            return self.node
        if self._lookup is None:
            self._lookup = self._lookup_call(runnable, now)
            runnable.enqueue_internal(self._lookup, now)
        return None

    def _lookup_call(self, runnable: AdminClientRunnable, now: int) -> Call:
        from strom.protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse

        def request(_timeout_ms: int) -> Any:
            return FindCoordinatorRequest(key=self.key, key_type=self.key_type, coordinator_keys=[self.key])

        def response(body: FindCoordinatorResponse, version: int) -> None:
            if version >= 4:
                c = next((c for c in body.coordinators if c.key == self.key), None)
                if c is None:
                    raise KafkaError(f"FindCoordinator response does not name the coordinator of '{self.key}'")
                code, message, node = c.error_code, c.error_message, Node(c.node_id, c.host, c.port)
            else:
                code, message = body.error_code, body.error_message
                node = Node(body.node_id, body.host, body.port)
            raise_for(code, message)
            self.node = node
            self._lookup = None

        def failure(e: BaseException) -> None:
            self._lookup = None
            self.error = e

        return Call("findCoordinator", runnable.internal_deadline(now), LeastLoadedNodeProvider(),
                    request, response, failure, internal=True)


# Errors after which a coordinator must be looked up again.
COORDINATOR_ERRORS = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})


class Call:
    """One admin request (Kafka's ``KafkaAdminClient.Call``).

    ``create_request(timeout_ms)`` builds the request message; ``on_response(body, api_version)`` handles the
    answer (raise to fail or, for a retriable error, retry the call); ``on_failure(exception)`` delivers a final
    failure to the futures; ``on_unsupported_version(exception)`` may adapt the call to an older broker and
    return True to retry it.
    """

    __slots__ = ("name", "deadline_ms", "node_provider", "create_request", "on_response", "on_failure",
                 "on_unsupported_version", "min_version", "max_version", "tries", "next_allowed_try_ms",
                 "cur_node", "aborted", "internal")

    def __init__(self, name: str, deadline_ms: int, node_provider: Any,
                 create_request: Callable[[int], Any], on_response: Callable[[Any, int], None],
                 on_failure: Callable[[BaseException], None], *,
                 on_unsupported_version: Callable[[BaseException], bool] | None = None,
                 min_version: int | None = None, max_version: int | None = None, internal: bool = False) -> None:
        self.name = name
        self.deadline_ms = deadline_ms
        self.node_provider = node_provider
        self.create_request = create_request
        self.on_response = on_response
        self.on_failure = on_failure
        self.on_unsupported_version = on_unsupported_version
        self.min_version = min_version
        self.max_version = max_version
        self.tries = 0
        self.next_allowed_try_ms = 0
        self.cur_node: Node | None = None
        self.aborted = False
        self.internal = internal

    def handle_failure(self, error: BaseException) -> None:
        try:
            self.on_failure(error)
        except Exception:  # a failing handler must not stop the I/O thread
            log.exception("Uncaught error in the failure handler of %s", self)

    def __repr__(self) -> str:
        return (f"Call(callName={self.name}, deadlineMs={self.deadline_ms}, tries={self.tries}, "
                f"nextAllowedTryMs={self.next_allowed_try_ms})")
