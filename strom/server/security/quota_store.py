"""Where client quotas live: a file in a standalone broker's data dir, ZooKeeper's ``/config`` in a cluster.

Kafka counterparts: ``AdminZkClient.changeConfigs`` / ``fetchEntityConfig`` for ``/config/users/<user>``,
``/config/clients/<client-id>``, ``/config/users/<user>/clients/<client-id>`` and ``/config/ips/<ip>`` (``<default>``
for a type's default), each change announced on ``/config/changes`` as ``users/<user>``, ``clients/<client-id>``,
``users/<user>/clients/<client-id>`` or ``ips/<ip>`` so every broker's ``ClientIdConfigHandler`` / ``UserConfigHandler`` re-reads
it and updates its quota managers. A user's znode also holds its SCRAM credentials: writes here keep every
non-quota key as it is.

Both stores have one interface: ``entities()`` (everything, for start-up), ``alter(entity, changes)`` (``None`` a
key removes it) and ``describe()``. Writes persist before they apply: the file is replaced atomically
(write-temp-then-rename, fsync), ZooKeeper is written before the notification.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from strom.server.security.client_quotas import DEFAULT, QUOTA_KEYS, QuotaEntity
from strom.server.zk.kafka_zk_client import KafkaZkClient
from strom.server.zk.znodes import ConfigType, desanitize, sanitize
from strom.storage.fs import atomic_write

__all__ = ["QuotaStore", "FileQuotaStore", "ZkQuotaStore", "QUOTA_FILE_NAME"]

log = logging.getLogger("strom.server")

QUOTA_FILE_NAME = "client-quotas.json"


class QuotaStore(Protocol):
    def entities(self) -> dict[QuotaEntity, dict[str, float]]: ...

    def alter(self, entity: QuotaEntity, changes: Mapping[str, str | None]) -> dict[str, float]: ...


def _apply(current: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    out = dict(current)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def _quota_values(configs: Mapping[str, str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, text in configs.items():
        if key in QUOTA_KEYS:
            try:
                out[key] = float(text)
            except ValueError:
                log.warning("ignoring an unreadable quota %s=%r", key, text)
    return out


class FileQuotaStore:
    """Quotas of a standalone broker in ``<data dir>/client-quotas.json``. Event loop only."""

    def __init__(self, data_dir: str | Path) -> None:
        self.path = Path(data_dir) / QUOTA_FILE_NAME
        self._entities: dict[QuotaEntity, dict[str, str]] = {}
        if self.path.exists():
            try:
                data = json.loads(self.path.read_text())
                for item in data.get("entities", []):
                    entity = QuotaEntity(item.get("user"), item.get("client_id"), item.get("ip"))
                    self._entities[entity] = {str(k): str(v) for k, v in item.get("quotas", {}).items()}
            except (ValueError, AttributeError, TypeError) as e:
                # An OSError: the broker refuses to start with this one line rather than run without its quotas.
                raise OSError(f"cannot read client quotas from {self.path}: {e}") from None

    def entities(self) -> dict[QuotaEntity, dict[str, float]]:
        return {e: _quota_values(q) for e, q in self._entities.items() if _quota_values(q)}

    def alter(self, entity: QuotaEntity, changes: Mapping[str, str | None]) -> dict[str, float]:
        updated = _apply(self._entities.get(entity, {}), changes)
        entities = dict(self._entities)
        if updated:
            entities[entity] = updated
        else:
            entities.pop(entity, None)
        items = [{"user": e.user, "client_id": e.client_id, **({"ip": e.ip} if e.ip is not None else {}), "quotas": q}
                 for e, q in sorted(entities.items(),
                                    key=lambda kv: (str(kv[0].user), str(kv[0].client_id), str(kv[0].ip)))]
        atomic_write(str(self.path), json.dumps({"version": 1, "entities": items}, indent=1).encode())
        self._entities = entities
        return _quota_values(updated)


def _zk_location(entity: QuotaEntity) -> tuple[str, str, str]:
    """(config type, entity name for ``ConfigEntityZNode.path``, sanitized notification path)."""
    if entity.ip is not None:
        return ConfigType.IP, entity.ip, f"ips/{sanitize(entity.ip)}"
    if entity.user is not None and entity.client_id is not None:
        name = f"{entity.user}/clients/{entity.client_id}"
        return ConfigType.USER, name, f"users/{sanitize(entity.user)}/clients/{sanitize(entity.client_id)}"
    if entity.user is not None:
        return ConfigType.USER, entity.user, f"users/{sanitize(entity.user)}"
    assert entity.client_id is not None
    return ConfigType.CLIENT, entity.client_id, f"clients/{sanitize(entity.client_id)}"


def _name(sanitized: str) -> str:
    return DEFAULT if sanitized == DEFAULT else desanitize(sanitized)


class ZkQuotaStore:
    """Quotas in ZooKeeper, shared by the cluster's brokers. ``on_change(entity, quotas)`` is called on the
    broker's event loop when another broker (or this one) changes an entity. Thread-safe."""

    def __init__(self, zk: KafkaZkClient, loop: asyncio.AbstractEventLoop | None = None,
                 on_change: Callable[[QuotaEntity, dict[str, float]], None] | None = None) -> None:
        self.zk = zk
        self.loop = loop
        self.on_change = on_change
        self._lock = threading.Lock()

    def entities(self) -> dict[QuotaEntity, dict[str, float]]:
        out: dict[QuotaEntity, dict[str, float]] = {}
        for user in self.zk.get_all_entities_with_config(ConfigType.USER):
            configs = self.zk.get_entity_configs(ConfigType.USER, _name(user))
            if _quota_values(configs):
                out[QuotaEntity(_name(user), None)] = _quota_values(configs)
            base = f"/config/{ConfigType.USER}/{user}/clients"
            if self.zk.path_exists(base):
                for client in self.zk.get_children(base):
                    configs = self.zk.get_entity_configs(ConfigType.USER, f"{_name(user)}/clients/{_name(client)}")
                    if _quota_values(configs):
                        out[QuotaEntity(_name(user), _name(client))] = _quota_values(configs)
        for client in self.zk.get_all_entities_with_config(ConfigType.CLIENT):
            configs = self.zk.get_entity_configs(ConfigType.CLIENT, _name(client))
            if _quota_values(configs):
                out[QuotaEntity(None, _name(client))] = _quota_values(configs)
        for ip in self.zk.get_all_entities_with_config(ConfigType.IP):
            configs = self.zk.get_entity_configs(ConfigType.IP, _name(ip))
            if _quota_values(configs):
                out[QuotaEntity(ip=_name(ip))] = _quota_values(configs)
        return out

    def read(self, entity: QuotaEntity) -> dict[str, float]:
        config_type, name, _ = _zk_location(entity)
        return _quota_values(self.zk.get_entity_configs(config_type, name))

    def alter(self, entity: QuotaEntity, changes: Mapping[str, str | None]) -> dict[str, float]:
        """Blocking (ZooKeeper round trips): call it off the event loop."""
        config_type, name, notification = _zk_location(entity)
        with self._lock:
            configs = _apply(self.zk.get_entity_configs(config_type, name), changes)
            self.zk.set_or_create_entity_configs(config_type, name, configs)
            self.zk.create_config_change_notification(notification)
        return _quota_values(configs)

    def on_notification(self, kind: str, entity_path: str) -> None:
        """A ``users/...`` or ``clients/...`` config change notification (kazoo's thread): re-read the entity and
        hand its quotas to the event loop."""
        parts = entity_path.split("/")
        if kind == "users" and len(parts) == 3 and parts[1] == "clients":
            entity = QuotaEntity(_name(parts[0]), _name(parts[2]))
        elif kind == "users" and len(parts) == 1:
            entity = QuotaEntity(_name(parts[0]), None)
        elif kind == "clients" and len(parts) == 1:
            entity = QuotaEntity(None, _name(parts[0]))
        elif kind == "ips" and len(parts) == 1:
            entity = QuotaEntity(ip=_name(parts[0]))
        else:
            return
        quotas = self.read(entity)
        if self.on_change is not None and self.loop is not None:
            self.loop.call_soon_threadsafe(self.on_change, entity, quotas)
