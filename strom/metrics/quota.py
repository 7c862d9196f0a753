"""Quota bounds on metrics: Kafka's ``Quota`` and ``QuotaViolationException``.

A :class:`~strom.metrics.metric_name.MetricConfig` may carry a :class:`Quota`; a sensor recorded with
``check_quotas=True`` measures each of its metrics that has one, after recording, and raises
:class:`QuotaViolationError` when a value is out of bounds (the value stays recorded, as in Kafka). The broker's
client quota managers turn the violation into a throttle time.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Quota", "QuotaViolationError"]


class Quota:
    """An upper (``upper=True``) or lower bound on a metric's value (Kafka's ``Quota``). Immutable."""

    __slots__ = ("bound", "upper")

    def __init__(self, bound: float, upper: bool = True) -> None:
        self.bound = float(bound)
        self.upper = upper

    @classmethod
    def upper_bound(cls, bound: float) -> Quota:
        return cls(bound, True)

    @classmethod
    def lower_bound(cls, bound: float) -> Quota:
        return cls(bound, False)

    def acceptable(self, value: float) -> bool:
        return value <= self.bound if self.upper else value >= self.bound

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quota) and other.bound == self.bound and other.upper == self.upper

    def __hash__(self) -> int:
        return hash((self.bound, self.upper))

    def __repr__(self) -> str:
        return f"{'upper' if self.upper else 'lower'}={self.bound}"


class QuotaViolationError(Exception):
    """A metric's value broke its quota (Kafka's ``QuotaViolationException``): the metric, its value, the bound."""

    def __init__(self, metric: Any, value: float, bound: float) -> None:
        super().__init__(f"'{metric.metric_name().name}' violated quota. Actual: {value}, Threshold: {bound}")
        self.metric = metric
        self.value = value
        self.bound = bound
