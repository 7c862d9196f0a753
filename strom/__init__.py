"""strom: Apache Kafka's architecture in Python."""

__version__ = "0.1.0"
