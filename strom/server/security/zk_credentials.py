"""SCRAM credentials in a cluster's metadata: ZooKeeper's ``/config/users/<user>``, as Kafka's ZooKeeper mode keeps
them (``{"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,server_key=...,iterations=4096"}}``).

Kafka counterpart: the SCRAM part of ``AdminZkClient.changeConfigs`` + ``CredentialCache`` updated by the
``users`` config change notifications. Every broker reads the same users, so a user added through one broker
logs in on all of them. Reads come from an in-memory cache (the SASL authenticator runs on the event loop);
writes go to ZooKeeper and announce ``users/<user>`` on ``/config/changes``. Thread-safe.
"""

from __future__ import annotations

import logging
import threading

from strom.security.scram import SCRAM_MECHANISMS, ScramCredential
from strom.server.security.credentials import credential_from_string, credential_to_string
from strom.server.zk.kafka_zk_client import KafkaZkClient
from strom.server.zk.znodes import ConfigType

__all__ = ["ZkCredentialStore"]

log = logging.getLogger("strom.security")


class ZkCredentialStore:
    def __init__(self, zk: KafkaZkClient) -> None:
        self.zk = zk
        self._lock = threading.Lock()
        self._users: dict[str, dict[str, ScramCredential]] = {}
        for user in zk.get_all_entities_with_config(ConfigType.USER):
            self.refresh(user)

    def refresh(self, username: str) -> None:
        """Re-read one user's credentials (a ``users/<user>`` change notification)."""
        configs = self.zk.get_entity_configs(ConfigType.USER, username)
        creds = {}
        for mechanism, text in configs.items():
            if mechanism in SCRAM_MECHANISMS:
                try:
                    creds[mechanism] = credential_from_string(text)
                except ValueError as e:
                    log.warning("ignoring an unreadable %s credential of user %s: %s", mechanism, username, e)
        with self._lock:
            if creds:
                self._users[username] = creds
            else:
                self._users.pop(username, None)

    def credential(self, username: str, mechanism: str) -> ScramCredential | None:
        with self._lock:
            return self._users.get(username, {}).get(mechanism)

    def _write(self, username: str, change: dict[str, ScramCredential | None]) -> None:
        configs = dict(self.zk.get_entity_configs(ConfigType.USER, username))
        for mechanism, cred in change.items():
            if cred is None:
                configs.pop(mechanism, None)
            else:
                configs[mechanism] = credential_to_string(cred)
        self.zk.set_or_create_entity_configs(ConfigType.USER, username, configs)
        self.zk.create_config_change_notification(f"{ConfigType.USER}/{username}")
        self.refresh(username)

    def upsert(self, username: str, mechanism: str, credential: ScramCredential) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"Unknown SCRAM mechanism {mechanism}")
        self._write(username, {mechanism: credential})

    def delete(self, username: str, mechanism: str) -> bool:
        with self._lock:
            found = mechanism in self._users.get(username, {})
        if found:
            self._write(username, {mechanism: None})
        return found

    def describe(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {u: {m: c.iterations for m, c in ms.items()} for u, ms in self._users.items()}
