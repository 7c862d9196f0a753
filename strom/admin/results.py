"""Result objects of the admin client: one future per resource, plus ``all()``.

Kafka counterparts: ``KafkaFuture`` (here :class:`concurrent.futures.Future`: ``result(timeout)`` is Kafka's
``get``), ``KafkaFuture.allOf`` (:func:`all_of`) and the ``*Result`` classes of ``org.apache.kafka.clients.admin``
(``CreateTopicsResult``, ``DeleteTopicsResult``, ``DescribeTopicsResult``, ``CreatePartitionsResult``,
``DescribeConfigsResult``, ``AlterConfigsResult``, ``DeleteConsumerGroupsResult``,
``DescribeConsumerGroupsResult``, ``AlterConsumerGroupOffsetsResult``, ``ListOffsetsResult``,
``DeleteRecordsResult``, ``ListTopicsResult``, ``ListConsumerGroupsResult``,
``ListConsumerGroupOffsetsResult``, ``DescribeClusterResult``).

A keyed result is :class:`KeyedResult`: ``values()`` maps each resource to its future (Kafka's ``values()``),
``result[key]`` is that future, ``all()`` completes with ``{key: value}`` when every future succeeded, or fails
with the first failure (in key order). Futures complete on the admin client's I/O thread.

Thread-safety: thread-safe (futures are).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

from strom.admin.models import ClusterDescription, ConsumerGroupListing, TopicListing
from strom.common.error_codes import ErrorCode
from strom.common.errors import KafkaError
from strom.common.structs import Node, OffsetAndMetadata, TopicPartition

__all__ = [
    "KafkaFuture",
    "KeyedResult",
    "all_of",
    "completed_future",
    "failed_future",
    "chain",
    "ListTopicsResult",
    "ListConsumerGroupsResult",
    "ListConsumerGroupOffsetsResult",
    "DescribeClusterResult",
    "ElectLeadersResult",
]

K = TypeVar("K")
V = TypeVar("V")
KafkaFuture = Future
"""Kafka's ``KafkaFuture``: ``result(timeout=None)`` waits; ``exception()``, ``done()``, callbacks."""


def completed_future(value: Any) -> Future[Any]:
    f: Future[Any] = Future()
    f.set_result(value)
    return f


def failed_future(error: BaseException) -> Future[Any]:
    f: Future[Any] = Future()
    f.set_exception(error)
    return f


def _settle(future: Future[Any], fn: Callable[[], Any]) -> None:
    """Complete ``future`` with ``fn()`` (or its exception) unless something completed it already."""
    if future.done():
        return
    try:
        value = fn()
    except BaseException as e:  # noqa: BLE001 - delivered through the future
        if not future.done():
            future.set_exception(e)
        return
    if not future.done():
        future.set_result(value)


def all_of(futures: Mapping[K, Future[Any]], transform: Callable[[dict[K, Any]], Any] | None = None) -> Future[Any]:
    """A future completed when every one of ``futures`` is: ``{key: value}`` (or ``transform`` of it), or the
    first failure in key order (Kafka's ``KafkaFuture.allOf(...).thenApply``)."""
    out: Future[Any] = Future()
    items = list(futures.items())
    if not items:
        out.set_result(transform({}) if transform else {})
        return out
    remaining = [len(items)]
    lock = threading.Lock()

    def finish() -> dict[K, Any]:
        values = {k: f.result() for k, f in items}  # raises the first failure
        return transform(values) if transform else values

    def on_done(_f: Future[Any]) -> None:
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if last:
            _settle(out, finish)

    for _k, f in items:
        f.add_done_callback(on_done)
    return out


def chain(source: Future[Any], fn: Callable[[Any], Any]) -> Future[Any]:
    """Kafka's ``thenApply``: a future of ``fn(source.result())``."""
    out: Future[Any] = Future()
    source.add_done_callback(lambda f: _settle(out, lambda: fn(f.result())))
    return out


class KeyedResult(Generic[K, V]):
    """One future per resource (Kafka's ``values()``) and ``all()``."""

    def __init__(self, futures: Mapping[K, Future[V]]) -> None:
        self._futures: dict[K, Future[V]] = dict(futures)

    def values(self) -> dict[K, Future[V]]:
        return dict(self._futures)

    def __getitem__(self, key: K) -> Future[V]:
        return self._futures[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._futures)

    def __len__(self) -> int:
        return len(self._futures)

    def __contains__(self, key: object) -> bool:
        return key in self._futures

    def all(self) -> Future[dict[K, V]]:
        return all_of(self._futures)

    def result(self, timeout: float | None = None) -> dict[K, V]:
        """Shortcut for ``all().result(timeout)``."""
        return self.all().result(timeout)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self._futures)!r})"


class ListTopicsResult:
    """Kafka's ``ListTopicsResult``."""

    def __init__(self, future: Future[dict[str, TopicListing]]) -> None:
        self._future = future

    def names_to_listings(self) -> Future[dict[str, TopicListing]]:
        return self._future

    def listings(self) -> Future[list[TopicListing]]:
        return chain(self._future, lambda m: list(m.values()))

    def names(self) -> Future[set[str]]:
        return chain(self._future, lambda m: set(m))


class ListConsumerGroupsResult:
    """Kafka's ``ListConsumerGroupsResult``: ``valid()`` the listings, ``errors()`` the per-broker failures,
    ``all()`` the listings or the first error."""

    def __init__(self, valid: Future[list[ConsumerGroupListing]], errors: Future[list[BaseException]]) -> None:
        self._valid = valid
        self._errors = errors

    def valid(self) -> Future[list[ConsumerGroupListing]]:
        return self._valid

    def errors(self) -> Future[list[BaseException]]:
        return self._errors

    def all(self) -> Future[list[ConsumerGroupListing]]:
        def check(listings: list[ConsumerGroupListing]) -> list[ConsumerGroupListing]:
            errors = self._errors.result()
            if errors:
                raise errors[0]
            return listings

        return chain(self._valid, check)


class ListConsumerGroupOffsetsResult:
    """Kafka's ``ListConsumerGroupOffsetsResult``: per group, ``{TopicPartition: OffsetAndMetadata}``."""

    def __init__(self, futures: Mapping[str, Future[dict[TopicPartition, OffsetAndMetadata]]]) -> None:
        self._futures = dict(futures)

    def partitions_to_offset_and_metadata(self, group_id: str | None = None,
                                          ) -> Future[dict[TopicPartition, OffsetAndMetadata]]:
        if group_id is None:
            if len(self._futures) != 1:
                raise ValueError("Group id must be given when offsets of several groups were requested")
            return next(iter(self._futures.values()))
        return self._futures[group_id]

    def all(self) -> Future[dict[str, dict[TopicPartition, OffsetAndMetadata]]]:
        return all_of(self._futures)


class DescribeClusterResult:
    """Kafka's ``DescribeClusterResult``: ``nodes()``, ``controller()``, ``cluster_id()`` futures."""

    def __init__(self, future: Future[ClusterDescription]) -> None:
        self._future = future

    def description(self) -> Future[ClusterDescription]:
        return self._future

    def nodes(self) -> Future[list[Node]]:
        return chain(self._future, lambda d: list(d.nodes))

    def controller(self) -> Future[Node | None]:
        return chain(self._future, lambda d: d.controller)

    def cluster_id(self) -> Future[str | None]:
        return chain(self._future, lambda d: d.cluster_id)

    def authorized_operations(self) -> Future[frozenset[int] | None]:
        return chain(self._future, lambda d: d.authorized_operations)


class ElectLeadersResult:
    """Kafka's ``ElectLeadersResult``: ``partitions()`` maps each partition to ``None`` (elected) or its error;
    ``all()`` fails with the first error other than ELECTION_NOT_NEEDED."""

    def __init__(self, future: Future[dict[TopicPartition, KafkaError | None]]) -> None:
        self._future = future

    def partitions(self) -> Future[dict[TopicPartition, KafkaError | None]]:
        return self._future

    def all(self) -> Future[None]:
        def check(results: dict[TopicPartition, KafkaError | None]) -> None:
            for error in results.values():
                if error is not None and error.errno != ErrorCode.ELECTION_NOT_NEEDED:
                    raise error

        return chain(self._future, check)
