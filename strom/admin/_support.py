"""Small helpers shared by the admin API families (per-resource futures, response bookkeeping).

Kafka counterpart: the future maps ``KafkaAdminClient`` keeps per call (``completeAllExceptionally``,
"The server response did not contain a reference to ..."). I/O thread only (futures are thread-safe).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

from strom.common.errors import KafkaError

__all__ = ["FutureMap"]

K = TypeVar("K", bound=Hashable)


class FutureMap(Generic[K]):
    """One future per key; ``undone()`` are the keys a retried call must still ask about."""

    def __init__(self, keys: Iterable[K]) -> None:
        self.futures: dict[K, Future[Any]] = {}
        for key in keys:
            self.futures.setdefault(key, Future())

    def undone(self) -> list[K]:
        return [k for k, f in self.futures.items() if not f.done()]

    def complete(self, key: K, value: Any) -> None:
        f = self.futures.get(key)
        if f is not None and not f.done():
            f.set_result(value)

    def fail(self, key: K, error: BaseException) -> None:
        f = self.futures.get(key)
        if f is not None and not f.done():
            f.set_exception(error)

    def fail_all(self, error: BaseException) -> None:
        for key in self.undone():
            self.fail(key, error)

    def fail_missing(self, seen: Iterable[K], what: str, among: Iterable[K] | None = None) -> None:
        """Fail the keys (of ``among``, default all) a response did not mention (Kafka: "The server response
        did not contain a reference to ...")."""
        seen_set = set(seen)
        candidates = self.undone() if among is None else [k for k in among if k in self.undone()]
        for key in candidates:
            if key not in seen_set:
                self.fail(key, KafkaError(f"The server response did not contain a reference to {what} {key}"))

    def __contains__(self, key: object) -> bool:
        return key in self.futures
