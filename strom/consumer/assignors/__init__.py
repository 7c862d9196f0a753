"""Partition assignors: ``range``, ``roundrobin``, ``sticky``, ``cooperative-sticky``.

Kafka counterparts: ``org.apache.kafka.clients.consumer.{Range,RoundRobin,Sticky,CooperativeSticky}Assignor``
and ``ConsumerPartitionAssignor.getAssignorInstances`` (:func:`make_assignors`).

An assignor is named in ``partition.assignment.strategy`` by its short (protocol) name, Kafka's Java class
name, a dotted Python path, a class or an instance. Not thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from strom.common.errors import ConfigError
from strom.consumer.assignors.abstract import (
    AbstractPartitionAssignor,
    Assignment,
    ConsumerGroupMetadata,
    ConsumerPartitionAssignor,
    GroupAssignment,
    GroupSubscription,
    RebalanceProtocol,
    Subscription,
)
from strom.consumer.assignors.range import RangeAssignor
from strom.consumer.assignors.round_robin import RoundRobinAssignor
from strom.consumer.assignors.sticky import CooperativeStickyAssignor, StickyAssignor

__all__ = [
    "AbstractPartitionAssignor",
    "Assignment",
    "ConsumerGroupMetadata",
    "ConsumerPartitionAssignor",
    "CooperativeStickyAssignor",
    "GroupAssignment",
    "GroupSubscription",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "make_assignors",
    "resolve_assignor",
]

_BUILT_IN: dict[str, type] = {}
for _cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor):
    _BUILT_IN[_cls.NAME] = _cls
    _BUILT_IN[_cls.__name__.lower()] = _cls
    _BUILT_IN[f"org.apache.kafka.clients.consumer.{_cls.__name__}".lower()] = _cls
    _BUILT_IN[f"{_cls.__module__}.{_cls.__name__}".lower()] = _cls
_BUILT_IN["round_robin"] = RoundRobinAssignor
_BUILT_IN["cooperative_sticky"] = CooperativeStickyAssignor


def resolve_assignor(spec: Any) -> Any:
    """A class or instance for one ``partition.assignment.strategy`` entry (raises :class:`ConfigError`)."""
    if isinstance(spec, str):
        found = _BUILT_IN.get(spec.strip().lower())
        if found is not None:
            return found
        from strom.config.config_def import resolve_class

        return resolve_class(spec.strip(), "partition.assignment.strategy")
    if isinstance(spec, type) or callable(getattr(spec, "assign_group", None)):
        return spec
    raise ConfigError(f"Invalid value {spec!r} for configuration partition.assignment.strategy: not an assignor")


def make_assignors(specs: Sequence[Any], configs: Mapping[str, Any] | None = None) -> list[Any]:
    """Instantiate the assignors (classes get ``configure(configs)`` when they have it); protocol names must
    be unique (Kafka: "The assignor name: 'x' is used in more than one assignor")."""
    out: list[Any] = []
    names: set[str] = set()
    for spec in specs:
        found = resolve_assignor(spec)
        instance = found() if isinstance(found, type) else found
        if isinstance(found, type):
            configure = getattr(instance, "configure", None)
            if callable(configure):
                configure(dict(configs or {}))
        if not callable(getattr(instance, "assign_group", None)):
            raise ConfigError(f"{spec!r} is not a ConsumerPartitionAssignor (no assign_group() method)")
        name = instance.name()
        if name in names:
            raise ConfigError(f"The assignor name: '{name}' is used in more than one assignor.")
        names.add(name)
        out.append(instance)
    return out
