"""Where client-metrics subscriptions (KIP-714 config resources) live: ``client-metrics.json`` in a standalone
broker's data dir, ``/config/client-metrics/<name>`` in ZooKeeper for a cluster (each change announced on
``/config/changes`` as ``client-metrics/<name>``; names are stored sanitized, as user and client names are, so every broker re-reads it). Writes persist before they apply.

Both stores: ``subscriptions()`` (every subscription, for start-up), ``read(name)`` and ``write(name, configs)``
(no configs removes the subscription).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Protocol

from strom.server.zk.kafka_zk_client import KafkaZkClient
from strom.server.zk.znodes import ConfigEntityZNode, ConfigType, desanitize, sanitize
from strom.storage.fs import atomic_write

__all__ = ["ClientMetricsStore", "FileClientMetricsStore", "ZkClientMetricsStore", "CLIENT_METRICS_CONFIG_TYPE",
           "CLIENT_METRICS_FILE_NAME"]

CLIENT_METRICS_CONFIG_TYPE = ConfigType.CLIENT_METRICS
CLIENT_METRICS_FILE_NAME = "client-metrics.json"


class ClientMetricsStore(Protocol):
    def subscriptions(self) -> dict[str, dict[str, str]]: ...

    def read(self, name: str) -> dict[str, str]: ...

    def write(self, name: str, configs: dict[str, str]) -> None: ...


class FileClientMetricsStore:
    """Subscriptions of a standalone broker. Event loop only (small atomic writes)."""

    def __init__(self, data_dir: str | Path) -> None:
        self.path = Path(data_dir) / CLIENT_METRICS_FILE_NAME
        self._subs: dict[str, dict[str, str]] = {}
        if self.path.exists():
            try:
                data = json.loads(self.path.read_text())
                self._subs = {str(n): {str(k): str(v) for k, v in c.items()}
                              for n, c in data.get("subscriptions", {}).items()}
            except (ValueError, AttributeError, TypeError) as e:
                raise OSError(f"cannot read client metrics subscriptions from {self.path}: {e}") from None

    def subscriptions(self) -> dict[str, dict[str, str]]:
        return {n: dict(c) for n, c in self._subs.items()}

    def read(self, name: str) -> dict[str, str]:
        return dict(self._subs.get(name, {}))

    def write(self, name: str, configs: dict[str, str]) -> None:
        subs = dict(self._subs)
        if configs:
            subs[name] = dict(configs)
        else:
            subs.pop(name, None)
        atomic_write(str(self.path), json.dumps({"version": 1, "subscriptions": subs}, indent=1,
                                                sort_keys=True).encode())
        self._subs = subs


class ZkClientMetricsStore:
    """Subscriptions in ZooKeeper, shared by the cluster's brokers. Blocking: call it off the event loop."""

    def __init__(self, zk: KafkaZkClient) -> None:
        self.zk = zk
        self._lock = threading.Lock()

    def subscriptions(self) -> dict[str, dict[str, str]]:
        out = {}
        for sanitized in self.zk.get_all_entities_with_config(CLIENT_METRICS_CONFIG_TYPE):
            configs = self.zk.get_entity_configs(CLIENT_METRICS_CONFIG_TYPE, sanitized)
            if configs:
                out[desanitize(sanitized)] = configs
        return out

    def read(self, name: str) -> dict[str, str]:
        return self.zk.get_entity_configs(CLIENT_METRICS_CONFIG_TYPE, sanitize(name))

    def write(self, name: str, configs: dict[str, str]) -> None:
        with self._lock:
            if configs:
                self.zk.set_or_create_entity_configs(CLIENT_METRICS_CONFIG_TYPE, sanitize(name), configs)
            else:
                self.zk.delete_path(ConfigEntityZNode.path(CLIENT_METRICS_CONFIG_TYPE, sanitize(name)))
            self.zk.create_config_change_notification(f"{CLIENT_METRICS_CONFIG_TYPE}/{sanitize(name)}")
