"""A confluent-kafka producer writing numbered records in a background thread until stopped (tests that change
something under writes): ``acked`` holds the values acknowledged, in acknowledgement order."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["BackgroundWriter"]


class BackgroundWriter:
    def __init__(self, bootstrap: str, topic: str, *, value_size: int = 128, at_least: int = 0,
                 **config: Any) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.padding = b"." * max(0, value_size - 8)
        self.at_least = at_least  # keep writing until this many were sent, even when stopped earlier
        self.config = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2, **config}
        self.acked: list[bytes] = []
        self.errors: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"writer-{topic}", daemon=True)

    def value(self, i: int) -> bytes:
        return f"{i:08d}".encode() + self.padding

    def _run(self) -> None:
        from confluent_kafka import Producer

        p = Producer(self.config)

        def done(err: Any, msg: Any) -> None:
            if err is None:
                self.acked.append(msg.value())
            else:
                self.errors.append(err)

        i = 0
        while not self._stop.is_set() or i < self.at_least:
            p.produce(self.topic, self.value(i), on_delivery=done)
            p.poll(0)
            i += 1
            if i % 2000 == 0:
                p.flush(30)
        if p.flush(60):
            self.errors.append("records left unacknowledged at the end")

    def start(self) -> BackgroundWriter:
        self._thread.start()
        return self

    def __enter__(self) -> BackgroundWriter:
        return self.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(90)
        if self._thread.is_alive():
            raise AssertionError(f"the writer to {self.topic} did not finish")

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive():
            self.stop()
