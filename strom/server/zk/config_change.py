"""Dynamic config changes as every broker learns them (``/config/changes/config_change_<seq>``): topics, brokers
(dynamic broker configs), users (SCRAM credentials, quotas), clients and ips (quotas), client-metrics (KIP-714
subscriptions).

Kafka counterpart: ``ZkConfigManager`` + ``ZkNodeChangeNotificationListener``: an admin writes the new overrides to
``/config/topics/<t>`` and appends a sequential notification naming ``topics/<t>``; each broker watches the
notifications, reads the entity's current configs and applies them. Notifications older than the broker's start
are skipped (it reads current configs when it opens a topic anyway). Watches fire on kazoo's thread; the apply
callback runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from strom.server.zk.kafka_zk_client import KafkaZkClient

__all__ = ["ConfigChangeWatcher"]

log = logging.getLogger("strom.server")

CHANGES_PATH = "/config/changes"
PREFIX = "config_change_"


class ConfigChangeWatcher:
    def __init__(self, zk: KafkaZkClient, loop: asyncio.AbstractEventLoop,
                 apply: Callable[[str, dict[str, str]], None],
                 on_user_change: Callable[[str], None] | None = None,
                 on_quota_change: Callable[[str, str], None] | None = None,
                 on_broker_change: Callable[[str], None] | None = None,
                 on_client_metrics_change: Callable[[str], None] | None = None) -> None:
        self.zk = zk
        self.loop = loop
        self.apply = apply
        self.on_user_change = on_user_change  # SCRAM credentials (runs on kazoo's thread; must be quick)
        self.on_quota_change = on_quota_change  # client quotas: (users | clients, sanitized rest of the path)
        self.on_broker_change = on_broker_change  # dynamic broker configs: a broker id or <default>
        self.on_client_metrics_change = on_client_metrics_change  # KIP-714 subscriptions: a sanitized name
        self._last_seen: str | None = None
        self._handle = None

    def start(self) -> None:
        existing = [c for c in self.zk.get_children(CHANGES_PATH) if c.startswith(PREFIX)]
        self._last_seen = max(existing) if existing else ""
        self._handle = self.zk.watch_children(CHANGES_PATH, self._on_children)

    def _on_children(self, children: list[str]) -> None:
        new = sorted(c for c in children if c.startswith(PREFIX) and c > (self._last_seen or ""))
        for name in new:
            self._last_seen = name
            data, _v = self.zk.get_data_and_version(f"{CHANGES_PATH}/{name}")
            try:
                entity = json.loads(data or b"{}").get("entity_path", "")
            except ValueError:
                log.warning("unreadable config change notification %s", name)
                continue
            kind, _, entity_name = entity.partition("/")
            if kind in ("users", "clients", "ips") and entity_name and self.on_quota_change is not None:
                self.on_quota_change(kind, entity_name)
            if kind == "users" and entity_name and self.on_user_change is not None:
                self.on_user_change(entity_name)
                continue
            if kind == "brokers" and entity_name and self.on_broker_change is not None:
                self.on_broker_change(entity_name)
                continue
            if kind == "client-metrics" and entity_name and self.on_client_metrics_change is not None:
                self.on_client_metrics_change(entity_name)
                continue
            if kind != "topics" or not entity_name:
                continue
            configs = self.zk.get_topic_config(entity_name)
            self.loop.call_soon_threadsafe(self.apply, entity_name, configs)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
