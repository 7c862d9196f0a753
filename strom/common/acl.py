"""Kafka's ACL model, shared by the broker's authorizer, the admin client and ``strom acls``.

Kafka counterparts: ``org.apache.kafka.common.resource`` (``ResourceType``, ``PatternType``, ``ResourcePattern``,
``ResourcePatternFilter``) and ``org.apache.kafka.common.acl`` (``AclOperation``, ``AclPermissionType``,
``AccessControlEntry``, ``AclBinding``, ``AclBindingFilter``). Wire codes are Kafka's. Immutable; thread-safe.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "ResourceType",
    "PatternType",
    "AclOperation",
    "AclPermissionType",
    "ResourcePattern",
    "ResourcePatternFilter",
    "AccessControlEntry",
    "AccessControlEntryFilter",
    "AclBinding",
    "AclBindingFilter",
    "WILDCARD_RESOURCE",
    "WILDCARD_PRINCIPAL",
    "WILDCARD_HOST",
    "SUPPORTED_OPERATIONS",
]

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"


class _Parse(enum.IntEnum):
    @classmethod
    def parse(cls, text: str) -> _Parse:
        """Case-insensitive name, ``-``/``_`` ignored (``Read``, ``IdempotentWrite``, ``TRANSACTIONAL_ID``)."""
        key = text.strip().upper().replace("-", "").replace("_", "")
        for member in cls:
            if member.name.replace("_", "") == key:
                return member
        names = ", ".join(m.name for m in cls if m.name not in ("UNKNOWN",))
        raise ValueError(f"Unknown {cls.__name__} {text!r} (one of {names})")


class ResourceType(_Parse):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Parse):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Parse):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_Parse):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __post_init__(self) -> None:
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise ValueError(f"resource type must be concrete, not {self.resource_type.name}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise ValueError(f"pattern type must be LITERAL or PREFIXED, not {self.pattern_type.name}")
        if not self.name:
            raise ValueError("resource name must not be empty")

    def __str__(self) -> str:
        return f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, " \
               f"patternType={self.pattern_type.name})"


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """``None`` name = any name. ``MATCH`` matches the patterns that would apply to a resource of that name
    (the literal name, the wildcard ``*`` and every prefix of it); ``ANY`` any pattern type."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    def matches(self, p: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not p.resource_type:
            return False
        if self.pattern_type is PatternType.MATCH:
            if self.name is None:
                return True
            if p.pattern_type is PatternType.LITERAL:
                return p.name == self.name or p.name == WILDCARD_RESOURCE
            return self.name.startswith(p.name)
        if self.pattern_type is not PatternType.ANY and self.pattern_type is not p.pattern_type:
            return False
        return self.name is None or self.name == p.name


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __post_init__(self) -> None:
        if self.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise ValueError(f"operation must be concrete, not {self.operation.name}")
        if self.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise ValueError(f"permission type must be ALLOW or DENY, not {self.permission_type.name}")
        if ":" not in self.principal:
            raise ValueError(f"principal must be type:name (e.g. User:alice), not {self.principal!r}")


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, e: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == e.principal)
                and (self.host is None or self.host == e.host)
                and (self.operation is AclOperation.ANY or self.operation is e.operation)
                and (self.permission_type is AclPermissionType.ANY or self.permission_type is e.permission_type))


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        e = self.entry
        return (f"(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
                f"permissionType={e.permission_type.name}) on {self.pattern}")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter = ResourcePatternFilter()
    entry: AccessControlEntryFilter = AccessControlEntryFilter()

    def matches(self, b: AclBinding) -> bool:
        return self.pattern.matches(b.pattern) and self.entry.matches(b.entry)

    def unknown_element(self) -> str | None:
        """What makes the filter unusable (an UNKNOWN code), as Kafka's ``findIndefiniteField``."""
        if self.pattern.resource_type is ResourceType.UNKNOWN:
            return "Resource type is UNKNOWN"
        if self.pattern.pattern_type is PatternType.UNKNOWN:
            return "Resource pattern type is UNKNOWN"
        if self.entry.operation is AclOperation.UNKNOWN:
            return "Operation is UNKNOWN"
        if self.entry.permission_type is AclPermissionType.UNKNOWN:
            return "Permission type is UNKNOWN"
        return None


_Op = AclOperation
# What each resource type takes (Kafka's AclCommand.supportedOps / the authorized-operations sets of
# Metadata, DescribeCluster and DescribeGroups).
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_Op.READ, _Op.WRITE, _Op.CREATE, _Op.DESCRIBE, _Op.DELETE, _Op.ALTER, _Op.DESCRIBE_CONFIGS,
                         _Op.ALTER_CONFIGS),
    ResourceType.GROUP: (_Op.READ, _Op.DESCRIBE, _Op.DELETE),
    ResourceType.CLUSTER: (_Op.CREATE, _Op.CLUSTER_ACTION, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS,
                           _Op.IDEMPOTENT_WRITE, _Op.ALTER, _Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (_Op.DESCRIBE, _Op.WRITE),
}
