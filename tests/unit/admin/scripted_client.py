"""A MockClient that answers each request at once from a handler per request type (tests of the admin client)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strom.common.time import Time
from strom.network.client_request import ClientRequest
from strom.protocol.messages import MetadataResponse
from strom.testing.mock_client import MockClient

__all__ = ["ScriptedClient", "NO_ANSWER", "DISCONNECT", "UNSUPPORTED", "brokers_metadata"]

NO_ANSWER = object()
DISCONNECT = object()
UNSUPPORTED = object()
Handler = Callable[[Any, Any], Any]


def brokers_metadata(num_nodes: int = 1, controller: int = 0, topics: list[Any] | None = None) -> Any:
    brokers = [MetadataResponse.MetadataResponseBroker(node_id=i, host="localhost", port=1969 + i, rack=None)
               for i in range(num_nodes)]
    return MetadataResponse(brokers=brokers, cluster_id="cluster-1", controller_id=controller, topics=topics or [])


class ScriptedClient(MockClient):
    """``handlers[RequestClassName](request_body, destination) -> response body | NO_ANSWER | DISCONNECT |
    UNSUPPORTED``; a MetadataRequest without a handler gets :func:`brokers_metadata`."""

    def __init__(self, time: Time, handlers: dict[str, Handler]) -> None:
        super().__init__(time, max_real_poll_ms=5)
        self.handlers = handlers
        self.sent: list[ClientRequest] = []

    def sent_of(self, name: str) -> list[Any]:
        return [r.request for r in self.sent if type(r.request).__name__ == name]

    def send(self, request: ClientRequest, now: int) -> None:
        name = type(request.request).__name__
        self.sent.append(request)
        handler = self.handlers.get(name)
        if handler is None and name == "MetadataRequest":
            handler = lambda _body, _dest: brokers_metadata()  # noqa: E731
        answer = NO_ANSWER if handler is None else handler(request.request, request.destination)
        if answer is UNSUPPORTED:
            self.prepare_response(None, is_unsupported=True)
        elif answer is DISCONNECT:
            self.prepare_response(None, disconnected=True)
        elif answer is not NO_ANSWER:
            self.prepare_response(answer)
        super().send(request, now)
