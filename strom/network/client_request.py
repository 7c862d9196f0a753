"""Requests handed to a :class:`~strom.network.kafka_client.KafkaClient` and the responses it returns.

Kafka counterparts: ``ClientRequest`` (destination, request "builder" = a generated message object plus the
version range the caller accepts, expect-response flag, timeout, completion callback), ``ClientResponse``
(body or one of: disconnected, timed out, version mismatch), ``RequestCompletionHandler`` and
``NetworkClient.InFlightRequest``.

The message object is encoded at the version the client negotiated with the node (ApiVersions), between
``min_version`` and ``max_version``. Immutable values except the in-flight bookkeeping (I/O thread only).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from strom.network.api_versions import client_version_range

__all__ = ["ClientRequest", "ClientResponse", "RequestHeaderInfo", "InFlightRequest", "RequestCompletionHandler"]

log = logging.getLogger(__name__)

RequestCompletionHandler = Callable[["ClientResponse"], None]


class RequestHeaderInfo:
    """What a response needs to know about its request header."""

    __slots__ = ("api_key", "api_version", "correlation_id", "client_id")

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id

    def __repr__(self) -> str:
        return (f"RequestHeader(apiKey={self.api_key}, apiVersion={self.api_version}, "
                f"correlationId={self.correlation_id}, clientId={self.client_id})")


class ClientRequest:
    """A request to send to ``destination`` (a node id). Kafka's ``ClientRequest``."""

    __slots__ = ("destination", "request", "api_key", "min_version", "max_version", "correlation_id",
                 "client_id", "created_time_ms", "expect_response", "request_timeout_ms", "callback")

    def __init__(self, destination: Any, request: Any, correlation_id: int, client_id: str | None,
                 created_time_ms: int, expect_response: bool, request_timeout_ms: int,
                 callback: RequestCompletionHandler | None, *, api_key: int | None = None,
                 min_version: int | None = None, max_version: int | None = None) -> None:
        self.destination = destination
        self.request = request
        self.api_key = request.API_KEY if api_key is None else api_key
        lo, hi = client_version_range(self.api_key)  # what strom's codecs implement, unstable versions excluded
        self.min_version = lo if min_version is None else min_version
        self.max_version = hi if max_version is None else max_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.created_time_ms = created_time_ms
        self.expect_response = expect_response
        self.request_timeout_ms = request_timeout_ms
        self.callback = callback

    def make_header(self, version: int) -> RequestHeaderInfo:
        return RequestHeaderInfo(self.api_key, version, self.correlation_id, self.client_id)

    def __repr__(self) -> str:
        return (f"ClientRequest(expectResponse={self.expect_response}, destination={self.destination}, "
                f"correlationId={self.correlation_id}, apiKey={self.api_key}, "
                f"createdTimeMs={self.created_time_ms})")


class ClientResponse:
    """The outcome of a :class:`ClientRequest` (Kafka's ``ClientResponse``)."""

    __slots__ = ("request_header", "callback", "destination", "created_time_ms", "received_time_ms",
                 "disconnected", "timed_out", "version_mismatch", "authentication_exception", "response_body")

    def __init__(self, request_header: RequestHeaderInfo, callback: RequestCompletionHandler | None,
                 destination: Any, created_time_ms: int, received_time_ms: int, disconnected: bool,
                 version_mismatch: BaseException | None, authentication_exception: BaseException | None,
                 response_body: Any, timed_out: bool = False) -> None:
        self.request_header = request_header
        self.callback = callback
        self.destination = destination
        self.created_time_ms = created_time_ms
        self.received_time_ms = received_time_ms
        self.disconnected = disconnected
        self.timed_out = timed_out
        self.version_mismatch = version_mismatch
        self.authentication_exception = authentication_exception
        self.response_body = response_body

    @property
    def was_disconnected(self) -> bool:
        return self.disconnected

    @property
    def was_timed_out(self) -> bool:
        return self.timed_out

    def has_response(self) -> bool:
        return self.response_body is not None

    @property
    def request_latency_ms(self) -> int:
        return self.received_time_ms - self.created_time_ms

    def on_complete(self) -> None:
        if self.callback is not None:
            self.callback(self)

    def __repr__(self) -> str:
        return (f"ClientResponse(receivedTimeMs={self.received_time_ms}, latencyMs={self.request_latency_ms}, "
                f"disconnected={self.disconnected}, timedOut={self.timed_out}, "
                f"requestHeader={self.request_header}, responseBody={self.response_body!r})")


class InFlightRequest:
    """A request sent on a connection, awaiting its response (Kafka's ``NetworkClient.InFlightRequest``)."""

    __slots__ = ("header", "destination", "callback", "expect_response", "is_internal", "request", "send",
                 "send_time_ms", "created_time_ms", "request_timeout_ms")

    def __init__(self, client_request: ClientRequest, header: RequestHeaderInfo, is_internal: bool,
                 send: Any, send_time_ms: int) -> None:
        self.header = header
        self.destination = client_request.destination
        self.callback = client_request.callback
        self.expect_response = client_request.expect_response
        self.is_internal = is_internal
        self.request = client_request.request
        self.send = send
        self.send_time_ms = send_time_ms
        self.created_time_ms = client_request.created_time_ms
        self.request_timeout_ms = client_request.request_timeout_ms

    def completed(self, response: Any, now: int) -> ClientResponse:
        return ClientResponse(self.header, self.callback, self.destination, self.created_time_ms, now,
                              False, None, None, response)

    def disconnected(self, now: int, authentication_exception: BaseException | None = None,
                     timed_out: bool = False) -> ClientResponse:
        return ClientResponse(self.header, self.callback, self.destination, self.created_time_ms, now,
                              True, None, authentication_exception, None, timed_out)

    def __repr__(self) -> str:
        return (f"InFlightRequest(header={self.header}, destination={self.destination}, "
                f"expectResponse={self.expect_response}, sendTimeMs={self.send_time_ms})")
