"""ACL authorization with the semantics of Kafka's ``StandardAuthorizer`` (and ``AclAuthorizer`` before it).

``authorize(principal, host, operation, resource)``:

1. a principal in ``super.users`` (``User:admin;User:ops``) may do anything;
2. the ACLs that apply to the resource are the LITERAL ones with its name or ``*`` and the PREFIXED ones whose
   prefix starts its name, for the principal or ``User:*`` and the client host or ``*``;
3. any applicable DENY for the operation (or ``ALL``) refuses — DENY wins;
4. an applicable ALLOW for the operation, ``ALL``, or an operation that implies it allows: ``DESCRIBE`` is
   implied by ``READ``, ``WRITE``, ``DELETE`` and ``ALTER``; ``DESCRIBE_CONFIGS`` by ``ALTER_CONFIGS``;
5. otherwise refused — unless no ACL at all (any principal, any operation) applies to the resource and
   ``allow.everyone.if.no.acl.found=true``.

ACLs live in an :class:`AclStore` (:class:`FileAclStore`: ``acls.json`` in the broker's data dir, written
atomically; a ZooKeeper store under ``/kafka-acl`` implements the same interface). Thread-safe.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Protocol

from strom.common.acl import (
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.common.errors import ConfigError
from strom.server.security.principal import KafkaPrincipal
from strom.storage.fs import atomic_write

__all__ = ["Authorizer", "StandardAuthorizer", "authorized_operations", "AclStore", "MemoryAclStore", "FileAclStore", "create_authorizer",
           "ACLS_FILE", "AUTHORIZER_CLASS_NAMES"]

ACLS_FILE = "acls.json"
AUTHORIZER_CLASS_NAMES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "strom.server.security.authorizer.StandardAuthorizer",
)

_IMPLIED = {
    AclOperation.DESCRIBE: (AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                            AclOperation.ALTER),
    AclOperation.DESCRIBE_CONFIGS: (AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
}


class AclStore(Protocol):
    def bindings(self) -> list[AclBinding]: ...
    def add(self, bindings: list[AclBinding]) -> None: ...
    def remove(self, bindings: list[AclBinding]) -> None: ...


class MemoryAclStore:
    def __init__(self) -> None:
        self._bindings: dict[AclBinding, None] = {}  # insertion-ordered set

    def bindings(self) -> list[AclBinding]:
        return list(self._bindings)

    def add(self, bindings: list[AclBinding]) -> None:
        for b in bindings:
            self._bindings[b] = None
        self._persist()

    def remove(self, bindings: list[AclBinding]) -> None:
        for b in bindings:
            self._bindings.pop(b, None)
        self._persist()

    def _persist(self) -> None:
        pass


def _to_json(b: AclBinding) -> dict[str, Any]:
    return {"resourceType": b.pattern.resource_type.name, "name": b.pattern.name,
            "patternType": b.pattern.pattern_type.name, "principal": b.entry.principal, "host": b.entry.host,
            "operation": b.entry.operation.name, "permissionType": b.entry.permission_type.name}


def _from_json(d: dict[str, Any]) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType[d["resourceType"]], d["name"], PatternType[d["patternType"]]),
                      AccessControlEntry(d["principal"], d["host"], AclOperation[d["operation"]],
                                         AclPermissionType[d["permissionType"]]))


class FileAclStore(MemoryAclStore):
    """ACLs persisted in ``<data dir>/acls.json``; survives restarts."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        if self.path.exists():
            try:
                for d in json.loads(self.path.read_text()):
                    self._bindings[_from_json(d)] = None
            except (OSError, ValueError, KeyError) as e:
                raise ConfigError(f"Cannot read the ACLs in {self.path}: {e!r}") from None

    def _persist(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(str(self.path), json.dumps([_to_json(b) for b in self._bindings], indent=1).encode())


class Authorizer(Protocol):
    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  resource: tuple[ResourceType, str]) -> bool: ...
    def authorize_by_resource_type(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool: ...
    def create_acls(self, bindings: list[AclBinding]) -> list[BaseException | None]: ...
    def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]: ...
    def acls(self, flt: AclBindingFilter) -> list[AclBinding]: ...


def _parse_super_users(value: str) -> frozenset[str]:
    users = set()
    for item in (v.strip() for v in (value or "").split(";")):
        if not item:
            continue
        try:
            users.add(str(KafkaPrincipal.parse(item)))
        except ValueError:
            raise ConfigError(f"Invalid value {item} for configuration super.users: expected type:name entries "
                              "separated by ';' (User:admin;User:ops)") from None
    return frozenset(users)


class StandardAuthorizer:
    """Kafka's ``StandardAuthorizer`` over an :class:`AclStore`. Thread-safe (one lock; reads of the ACL index
    take no lock)."""

    def __init__(self, store: AclStore | None = None, *, super_users: str = "",
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.store: AclStore = store if store is not None else MemoryAclStore()
        self.super_users = _parse_super_users(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._lock = threading.Lock()
        self._index: tuple[dict[ResourceType, list[AclBinding]], dict[tuple[ResourceType, str], list[AclBinding]],
                           dict[ResourceType, list[AclBinding]]] = ({}, {}, {})
        self._reindex()

    def _reindex(self) -> None:
        index: dict[ResourceType, list[AclBinding]] = {}
        literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        prefixed: dict[ResourceType, list[AclBinding]] = {}
        for b in self.store.bindings():
            rt = b.pattern.resource_type
            index.setdefault(rt, []).append(b)
            if b.pattern.pattern_type is PatternType.LITERAL:
                literal.setdefault((rt, b.pattern.name), []).append(b)
            else:
                prefixed.setdefault(rt, []).append(b)
        # Swapped whole (one attribute): readers see the old or the new index, never a mix. Literal ACLs are
        # looked up by name (a request checks one resource among many ACLs); only prefixed ones are scanned.
        self._index = (index, literal, prefixed)

    def reload(self) -> None:
        """Re-read the store (it changed behind this authorizer's back: another broker's CreateAcls)."""
        with self._lock:
            self._reindex()

    # -- decisions ------------------------------------------------------------------------------------------
    def _applicable(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        _, literal, prefixed = self._index
        out = list(literal.get((resource_type, name), ()))
        if name != WILDCARD_RESOURCE:
            out += literal.get((resource_type, WILDCARD_RESOURCE), ())
        out += [b for b in prefixed.get(resource_type, ()) if name.startswith(b.pattern.name)]
        return out

    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  resource: tuple[ResourceType, str]) -> bool:
        if str(principal) in self.super_users:
            return True
        resource_type, name = resource
        acls = self._applicable(resource_type, name)
        if not acls:
            return self.allow_everyone_if_no_acl_found
        who = (str(principal), WILDCARD_PRINCIPAL)
        where = (host, WILDCARD_HOST)
        mine = [b.entry for b in acls if b.entry.principal in who and b.entry.host in where]
        if any(e.permission_type is AclPermissionType.DENY and e.operation in (operation, AclOperation.ALL)
               for e in mine):
            return False
        allowed_by = _IMPLIED.get(operation, (operation,)) + (AclOperation.ALL,)
        return any(e.permission_type is AclPermissionType.ALLOW and e.operation in allowed_by for e in mine)

    def authorize_by_resource_type(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """May the principal do ``operation`` on *some* resource of the type (KIP-679: idempotent producers
        need WRITE on any topic)? An ALLOW on some LITERAL or PREFIXED pattern that is not covered by a DENY
        on ``*`` or on a prefix of it."""
        if str(principal) in self.super_users:
            return True
        who = (str(principal), WILDCARD_PRINCIPAL)
        where = (host, WILDCARD_HOST)
        by_type = self._index[0].get(resource_type, ())
        acls = [b for b in by_type
                if b.entry.principal in who and b.entry.host in where]
        denies = [b.pattern for b in acls if b.entry.permission_type is AclPermissionType.DENY
                  and b.entry.operation in (operation, AclOperation.ALL)]
        if any(p.pattern_type is PatternType.LITERAL and p.name == WILDCARD_RESOURCE for p in denies):
            return False
        allowed_by = _IMPLIED.get(operation, (operation,)) + (AclOperation.ALL,)
        for b in acls:
            if b.entry.permission_type is not AclPermissionType.ALLOW or b.entry.operation not in allowed_by:
                continue
            p = b.pattern
            covered = any((d.pattern_type is PatternType.PREFIXED and p.name.startswith(d.name))
                          or (d.pattern_type is PatternType.LITERAL and d == p) for d in denies)
            if not covered:
                return True
        if not by_type:
            return self.allow_everyone_if_no_acl_found
        return False

    # -- ACL management -------------------------------------------------------------------------------------
    def create_acls(self, bindings: list[AclBinding]) -> list[BaseException | None]:
        """Add ``bindings`` (already present ones are kept once); one result per binding."""
        results: list[BaseException | None] = []
        valid = []
        for b in bindings:
            if b.pattern.pattern_type is PatternType.PREFIXED and b.pattern.name == WILDCARD_RESOURCE:
                results.append(ValueError("Cannot create a PREFIXED ACL with the wildcard resource name '*'"))
            elif b.pattern.resource_type is ResourceType.CLUSTER and b.pattern.name != "kafka-cluster":
                results.append(ValueError("The only valid name for the CLUSTER resource is kafka-cluster"))
            else:
                results.append(None)
                valid.append(b)
        with self._lock:
            self.store.add(valid)
            self._reindex()
        return results

    def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove what each filter matches; per filter, the bindings it removed."""
        with self._lock:
            current = self.store.bindings()
            out = [[b for b in current if f.matches(b)] for f in filters]
            self.store.remove([b for removed in out for b in removed])
            self._reindex()
        return out

    def acls(self, flt: AclBindingFilter) -> list[AclBinding]:
        return [b for b in self.store.bindings() if flt.matches(b)]


def create_authorizer(config: Any, data_dir: str | Path | None = None,
                      store: AclStore | None = None) -> StandardAuthorizer | None:
    """The authorizer ``authorizer.class.name`` names (``None`` when unset: every request is allowed, as Kafka
    without an authorizer). The standalone store lives in the first log dir."""
    name = str(config["authorizer.class.name"] or "").strip()
    if not name:
        return None
    if name not in AUTHORIZER_CLASS_NAMES:
        raise ConfigError(f"Invalid value {name} for configuration authorizer.class.name: strom provides "
                          f"{AUTHORIZER_CLASS_NAMES[0]} (Kafka's other names for it are accepted too)")
    if store is None:
        base = Path(data_dir) if data_dir is not None else Path(config.log_dirs[0])
        store = FileAclStore(base / ACLS_FILE)
    return StandardAuthorizer(store, super_users=str(config["super.users"] or ""),
                              allow_everyone_if_no_acl_found=bool(config["allow.everyone.if.no.acl.found"]))


def authorized_operations(authorizer: Authorizer | None, principal: KafkaPrincipal, host: str,
                          resource: tuple[ResourceType, str]) -> int:
    """The ``*_authorized_operations`` bit field of Metadata / DescribeCluster / DescribeGroups: bit ``op`` set
    for each operation the resource supports that the principal may perform; with no authorizer, all of them
    (as Kafka answers)."""
    bits = 0
    for op in SUPPORTED_OPERATIONS[resource[0]]:
        if authorizer is None or authorizer.authorize(principal, host, op, resource):
            bits |= 1 << int(op)
    return bits
