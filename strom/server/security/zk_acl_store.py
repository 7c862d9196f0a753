"""ACLs in ZooKeeper, shared by every broker of a cluster (Kafka's ``ZkAclStore`` + ``ZkAclChangeStore``, as
``AclAuthorizer`` keeps them).

Layout (Kafka's, so Kafka's tools and strom read each other's ACLs): a LITERAL pattern's ACLs are the JSON of
``/kafka-acl/<Topic|Group|Cluster|TransactionalId>/<name>``, a PREFIXED one's
``/kafka-acl-extended/prefixed/<type>/<name>``; every change appends a sequential notification under
``/kafka-acl-changes`` (``Topic:name``) or ``/kafka-acl-extended-changes`` (JSON). A broker writes a resource's
znode with a version check (read, modify, conditional write, retried on a concurrent change), and every broker's
store reloads the ACLs when a notification appears and tells its authorizer (``start(on_change)``).

Use (cluster mode)::

    store = ZkAclStore(zk)
    authorizer = create_authorizer(config, store=store)
    if authorizer is not None:
        store.start(authorizer.reload)     # ... store.stop() at shutdown

Reloads run on a thread of the store's own (never on kazoo's callback thread). Thread-safe.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from strom.common.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.server.zk.znodes import AclEntry, AclZNodes

if TYPE_CHECKING:
    from strom.server.zk.kafka_zk_client import KafkaZkClient

__all__ = ["ZkAclStore"]

log = logging.getLogger("strom.server")

_TYPE_BY_ZNODE_NAME = {v: k for k, v in AclZNodes.RESOURCE_TYPE_NAMES.items()}
_PATTERNS = (PatternType.LITERAL, PatternType.PREFIXED)


def _camel(name: str) -> str:
    """``IDEMPOTENT_WRITE`` → ``IdempotentWrite``: how Kafka names operations and permissions in znodes."""
    return "".join(w.capitalize() for w in name.split("_"))


def _entry(b: AclBinding) -> AclEntry:
    e = b.entry
    return AclEntry(e.principal, _camel(e.permission_type.name), _camel(e.operation.name), e.host)


def _binding(pattern: ResourcePattern, a: AclEntry) -> AclBinding:
    return AclBinding(pattern, AccessControlEntry(a.principal, a.host, AclOperation.parse(a.operation),
                                                  AclPermissionType.parse(a.permission_type)))


class ZkAclStore:
    """An :class:`~strom.server.security.authorizer.AclStore` over ZooKeeper."""

    def __init__(self, zk: KafkaZkClient) -> None:
        self.zk = zk
        self._lock = threading.Lock()
        self._bindings: list[AclBinding] = self._load()
        self._on_change: Callable[[], None] | None = None
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._handles: list[Any] = []
        self._thread: threading.Thread | None = None

    # -- AclStore -------------------------------------------------------------------------------------------
    def bindings(self) -> list[AclBinding]:
        with self._lock:
            return list(self._bindings)

    def add(self, bindings: list[AclBinding]) -> None:
        self._change(bindings, adding=True)

    def remove(self, bindings: list[AclBinding]) -> None:
        self._change(bindings, adding=False)

    # -- change notifications -------------------------------------------------------------------------------
    def start(self, on_change: Callable[[], None]) -> None:
        """Watch the change notifications; after each, reload every ACL and call ``on_change``."""
        self._on_change = on_change
        self._thread = threading.Thread(target=self._reloader, name="acl-change-reloader", daemon=True)
        self._thread.start()
        for path in (AclZNodes.LITERAL_CHANGES_PATH, AclZNodes.EXTENDED_CHANGES_PATH):
            self._handles.append(self.zk.watch_children(path, lambda _children: self._wake.set()))

    def stop(self) -> None:
        for h in self._handles:
            h.cancel()
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)

    def _reloader(self) -> None:
        while True:
            self._wake.wait()
            if self._stopped.is_set():
                return
            self._wake.clear()
            try:
                fresh = self._load()
            except Exception as e:  # ZooKeeper unreachable for now: the next notification reloads again
                log.warning("cannot reload the ACLs from ZooKeeper: %r", e)
                continue
            with self._lock:
                self._bindings = fresh
            if self._on_change is not None:
                self._on_change()

    # -- ZooKeeper I/O --------------------------------------------------------------------------------------
    def _load(self) -> list[AclBinding]:
        out: list[AclBinding] = []
        for pt in _PATTERNS:
            base = AclZNodes.store_path(pt.name)
            for type_name in self.zk.get_children(base):
                rt = ResourceType.__members__.get(_TYPE_BY_ZNODE_NAME.get(type_name, ""))
                if rt is None:  # DelegationToken / User ACLs: resource types strom does not authorize
                    continue
                for name in self.zk.get_children(f"{base}/{type_name}"):
                    data, _v = self.zk.get_data_and_version(f"{base}/{type_name}/{name}")
                    pattern = ResourcePattern(rt, name, pt)
                    try:
                        out += [_binding(pattern, a) for a in AclZNodes.decode(data)]
                    except ValueError as e:
                        log.warning("skipping unreadable ACLs of %s: %s", pattern, e)
        return out

    def _change(self, bindings: list[AclBinding], adding: bool) -> None:
        by_pattern: dict[ResourcePattern, list[AclBinding]] = {}
        for b in bindings:
            by_pattern.setdefault(b.pattern, []).append(b)
        for pattern, group in by_pattern.items():
            self._update_znode(pattern, group, adding)
            self.zk.kazoo.create(AclZNodes.change_create_path(pattern.pattern_type.name),
                                 AclZNodes.encode_change(pattern.resource_type.name, pattern.name,
                                                         pattern.pattern_type.name),
                                 sequence=True, makepath=True)
        with self._lock:
            if adding:
                self._bindings = list(dict.fromkeys(self._bindings + bindings))
            else:
                gone = set(bindings)
                self._bindings = [b for b in self._bindings if b not in gone]

    def _update_znode(self, pattern: ResourcePattern, group: list[AclBinding], adding: bool) -> None:
        """Read, modify and conditionally write one resource's ACLs, again when another broker changed them
        in between (Kafka's ``updateResourceAcls``)."""
        kz = self.zk.kazoo
        path = AclZNodes.path(pattern.resource_type.name, pattern.name, pattern.pattern_type.name)
        change = [_entry(b) for b in group]
        while True:
            data, version = self.zk.get_data_and_version(path)
            current = AclZNodes.decode(data) if data is not None else []
            new = list(dict.fromkeys(current + change)) if adding else [a for a in current if a not in change]
            try:
                if data is None:
                    if new:
                        kz.create(path, AclZNodes.encode(new), makepath=True)
                elif new:
                    kz.set(path, AclZNodes.encode(new), version=version)
                else:
                    kz.delete(path, version=version)
                return
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # changed under us: read again
