"""strom's PySpark connector: ``format("strom")`` with the options and row schema of Spark's Kafka source/sink.

``strom.spark.register(spark)`` registers the data source in a session. Requires PySpark >= 4.2 and pyarrow
(``pip install 'strom[spark]'``). Importing this package does not import pyspark; the pure parts (options,
offsets, planning) are usable and testable without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["register", "StromDataSource"]

if TYPE_CHECKING:
    from strom.spark.source import StromDataSource, register


def __getattr__(name: str) -> Any:
    if name in __all__:
        from strom.spark import source

        return getattr(source, name)
    raise AttributeError(f"module 'strom.spark' has no attribute {name!r}")
