"""``ConsumerNetworkClient.send`` wakes the selector only when a poll is under way in another thread: the request
of a thread that polls next goes out from that poll without a write to the wakeup socket, and a poll blocked in
another thread (the heartbeat's, or the caller's while the heartbeat thread sends) is woken at once."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from strom.common.structs import Node
from strom.common.time import SystemTime
from strom.consumer.internals.consumer_network_client import ConsumerNetworkClient

pytestmark = pytest.mark.unit

NODE = Node(1, "127.0.0.1", 9092)


class FakeNetworkClient:
    """Blocks in ``poll`` until its timeout or a ``wakeup``; records wakeups and sent requests."""

    def __init__(self) -> None:
        self.wakeups = 0
        self.sent: list[Any] = []
        self.polling = threading.Event()
        self._woken = threading.Event()

    def ready(self, node: Node, now: int) -> bool:
        return True

    def new_client_request(self, node_id: int, request: Any, *args: Any, **kwargs: Any) -> Any:
        return request

    def send(self, request: Any, now: int) -> None:
        self.sent.append(request)

    def in_flight_request_count(self) -> int:
        return len(self.sent)

    def connection_failed(self, node: Node) -> bool:
        return False

    def wakeup(self) -> None:
        self.wakeups += 1
        self._woken.set()

    def poll(self, timeout_ms: int, now: int) -> None:
        self.polling.set()
        self._woken.wait(timeout_ms / 1000)
        self._woken.clear()
        self.polling.clear()


class FakeMetadata:
    def maybe_throw_any_exception(self) -> None:
        pass


def _client() -> tuple[ConsumerNetworkClient, FakeNetworkClient]:
    net = FakeNetworkClient()
    return ConsumerNetworkClient(net, FakeMetadata(), SystemTime(), retry_backoff_ms=100, request_timeout_ms=30_000,
                                 max_poll_timeout_ms=30_000), net


def test_a_request_of_the_thread_that_polls_next_needs_no_wakeup() -> None:
    cnc, net = _client()
    cnc.send(NODE, "request-1")
    cnc.poll(0)
    assert net.sent == ["request-1"] and net.wakeups == 0


def test_a_poll_blocked_in_another_thread_is_woken_and_sends_the_request() -> None:
    cnc, net = _client()
    poller = threading.Thread(target=cnc.poll, args=(20_000,))
    t0 = time.monotonic()
    poller.start()
    assert net.polling.wait(10)
    cnc.send(NODE, "from-another-thread")
    poller.join(10)
    assert not poller.is_alive() and time.monotonic() - t0 < 10  # woken, not at the end of its 20 s
    assert net.wakeups == 1 and net.sent == ["from-another-thread"]  # sent by the woken poll, after the wakeup
