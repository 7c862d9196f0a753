"""Re-export of :mod:`strom.broker_process` (production code runs brokers too: ``strom demo``); kept so test
modules written against the old location still import."""

from strom.broker_process import BrokerProcess, free_port

__all__ = ["BrokerProcess", "free_port"]
