"""The ``metric.reporters`` plug-in interface (Kafka's ``org.apache.kafka.common.metrics.MetricsReporter``).

A reporter is told about every metric of a registry: ``init`` with those that exist when it is added,
``metric_change`` when one is added or replaced, ``metric_removal`` when one goes, ``close`` when the registry
closes. Reporters are named by class (``"package.module.Class"``) in ``metric.reporters`` and built with
:func:`strom.config.config_def.get_configured_instance`, which calls ``configure(configs)`` when they have one.

Threading: callbacks run on the thread that changed the registry (a client's constructor, its I/O thread, a
caller's thread); a reporter must be thread-safe and must not call back into the registry's write methods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from strom.config.config_def import get_configured_instance

if TYPE_CHECKING:
    from strom.metrics.metrics import KafkaMetric

__all__ = ["MetricsReporter", "load_reporters"]


@runtime_checkable
class MetricsReporter(Protocol):
    """Kafka's ``MetricsReporter``."""

    def init(self, metrics: list[KafkaMetric]) -> None: ...

    def metric_change(self, metric: KafkaMetric) -> None: ...

    def metric_removal(self, metric: KafkaMetric) -> None: ...

    def close(self) -> None: ...


def load_reporters(specs: Iterable[Any] | str | None, configs: Mapping[str, Any] | None) -> list[MetricsReporter]:
    """The reporters named by ``metric.reporters`` (class names, classes or instances), configured with
    ``configs``. A name that does not resolve, or a class without ``metric_change``, raises with the key named."""
    if not specs:
        return []
    if isinstance(specs, str):
        specs = [s.strip() for s in specs.split(",") if s.strip()]
    reporters = []
    for spec in specs:
        reporter = get_configured_instance(spec, "metric.reporters", configs, "metric_change", "MetricsReporter")
        for method in ("init", "metric_removal", "close"):
            if not callable(getattr(reporter, method, None)):
                raise TypeError(f"{spec!r} is not a MetricsReporter (it has no {method}() method)")
        reporters.append(reporter)
    return reporters
