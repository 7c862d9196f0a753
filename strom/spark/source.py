"""``format("strom")``: the PySpark ``DataSource`` tying the readers and writers together."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from strom.spark.options import parse_bool
from strom.spark.reader import StromBatchReader, StromStreamReader, source_schema
from strom.spark.writer import StromBatchWriter, StromStreamWriter

__all__ = ["StromDataSource", "register"]


class StromDataSource(DataSource):
    """Read and write strom (or any Kafka cluster) with the options and row schema of Spark's Kafka connector."""

    @classmethod
    def name(cls) -> str:
        return "strom"

    def schema(self) -> StructType:
        return source_schema(parse_bool("includeHeaders", str(self.options.get("includeHeaders", "false"))))

    def reader(self, schema: StructType) -> DataSourceReader:
        return StromBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StromStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return StromBatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StromStreamWriter(self.options, schema)


def register(spark: SparkSession) -> None:
    """Make ``format("strom")`` available in this session."""
    spark.dataSource.register(StromDataSource)
