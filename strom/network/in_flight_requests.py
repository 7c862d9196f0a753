"""Requests sent (or being sent) and not yet answered, per node.

Kafka counterpart: ``org.apache.kafka.clients.InFlightRequests``. Requests to one node are answered in order,
so responses are matched FIFO (:meth:`complete_next`); a request that expects no response (Produce with
acks=0) is completed when its send completes (:meth:`complete_last_sent`). :meth:`can_send_more` bounds the
un-answered requests per connection to ``max.in.flight.requests.per.connection`` and only lets a new request
start once the previous one has been completely written.

Not thread-safe: I/O thread only.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

from strom.common.errors import IllegalStateError

__all__ = ["InFlightRequests"]


class _Tracked(Protocol):
    send: Any
    send_time_ms: int
    request_timeout_ms: int
    destination: Any


class InFlightRequests:
    """Per-node deques of in-flight requests, oldest first. I/O thread only."""

    __slots__ = ("max_in_flight_per_connection", "_requests", "_count")

    def __init__(self, max_in_flight_per_connection: int) -> None:
        self.max_in_flight_per_connection = max_in_flight_per_connection
        self._requests: dict[Any, deque[Any]] = {}
        self._count = 0

    def add(self, request: Any) -> None:
        queue = self._requests.get(request.destination)
        if queue is None:
            queue = self._requests[request.destination] = deque()
        queue.append(request)
        self._count += 1

    def _queue(self, node: Any) -> deque[Any]:
        queue = self._requests.get(node)
        if not queue:
            raise IllegalStateError(f"There are no in-flight requests for node {node}")
        return queue

    def complete_next(self, node: Any) -> Any:
        """The oldest request to ``node`` (its response just arrived)."""
        request = self._queue(node).popleft()
        self._count -= 1
        return request

    def last_sent(self, node: Any) -> Any:
        return self._queue(node)[-1]

    def complete_last_sent(self, node: Any) -> Any:
        request = self._queue(node).pop()
        self._count -= 1
        return request

    def can_send_more(self, node: Any) -> bool:
        queue = self._requests.get(node)
        return not queue or (queue[-1].send.completed() and len(queue) < self.max_in_flight_per_connection)

    def last_send_completed(self, node: Any) -> bool:
        queue = self._requests.get(node)
        return not queue or queue[-1].send.completed()

    def count(self, node: Any = None) -> int:
        if node is None:
            return self._count
        queue = self._requests.get(node)
        return len(queue) if queue else 0

    def is_empty(self, node: Any = None) -> bool:
        return self.count(node) == 0

    def clear_all(self, node: Any) -> list[Any]:
        """Remove and return every request to ``node`` (oldest first)."""
        queue = self._requests.pop(node, None)
        if not queue:
            return []
        self._count -= len(queue)
        return list(queue)

    def nodes_with_timed_out_requests(self, now: int) -> list[Any]:
        """Nodes with a request older than its own request timeout."""
        nodes = []
        for node, queue in self._requests.items():
            for request in queue:
                if now - request.send_time_ms > request.request_timeout_ms:
                    nodes.append(node)
                    break
        return nodes

    def nodes(self) -> list[Any]:
        return [node for node, queue in self._requests.items() if queue]
