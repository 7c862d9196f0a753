"""Helpers for the producer integration tests: topic creation and read-back with confluent-kafka."""

from __future__ import annotations

import time
from typing import Any

ck = None


def confluent() -> Any:
    global ck
    if ck is None:
        import confluent_kafka

        ck = confluent_kafka
    return ck


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, num_partitions=n, replication_factor=1) for t, n in topics.items()])
    for f in futures.values():
        f.result(30)


def read_back(bootstrap: str, partitions: dict[str, int], expected: int, timeout: float = 30.0) -> list[Any]:
    """Every record of the given topics (topic → partition count) from the beginning, via ``assign()``."""
    k = confluent()
    consumer = k.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-assign-only",
                           "enable.auto.commit": False, "api.version.request": True})
    try:
        consumer.assign([k.TopicPartition(t, p, k.OFFSET_BEGINNING) for t, n in partitions.items()
                         for p in range(n)])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.2):
                if msg.error() is None:
                    out.append(msg)
        return out
    finally:
        consumer.close()


class ChaosProxy:
    """A TCP proxy that forwards to ``target`` and, every ``kill_every_bytes`` of client→broker traffic (with
    jitter), kills the connection right after forwarding a request — before the broker's answer reaches the
    client — so the client cannot know whether the request was written."""

    def __init__(self, target: tuple[str, int], kill_every_bytes: int = 64 * 1024, max_kills: int = 10,
                 seed: int = 7, port: int = 0) -> None:
        import random
        import socket
        import threading

        self.target = target
        self.kill_every_bytes = kill_every_bytes
        self.max_kills = max_kills
        self.kills = 0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while not self._closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            state = {"dead": False}
            threading.Thread(target=self._pump, args=(client, upstream, True, state), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False, state), daemon=True).start()

    def _pump(self, src: Any, dst: Any, upstream: bool, state: dict[str, bool]) -> None:
        budget = self._budget()
        try:
            while not state["dead"]:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
                if upstream:
                    budget -= len(data)
                    if budget <= 0:
                        with self._lock:
                            kill = self.kills < self.max_kills
                            if kill:
                                self.kills += 1
                        if kill:
                            time.sleep(0.02)  # let the broker write the request; its answer is dropped
                            state["dead"] = True
                            break
                        budget = self._budget()
        except OSError:
            pass
        finally:
            state["dead"] = True
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def _budget(self) -> int:
        return int(self.kill_every_bytes * self._rng.uniform(0.5, 1.5))

    def close(self) -> None:
        self._closed = True
        self.sock.close()
