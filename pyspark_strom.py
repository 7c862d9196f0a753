"""Lets PySpark find ``format("strom")`` without ``strom.spark.register(spark)``.

PySpark imports top-level modules named ``pyspark_*`` that expose ``DefaultSource`` when it looks up a Python
data source by name.
"""

from strom.spark.source import StromDataSource as DefaultSource

__all__ = ["DefaultSource"]
