"""StandardAuthorizer semantics (Kafka's): literal/prefixed/wildcard patterns, DENY wins, hosts, implied
operations, super.users, allow.everyone.if.no.acl.found, filters, persistence."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.common.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from strom.common.errors import ConfigError
from strom.server.broker_config import BrokerConfig
from strom.server.security.authorizer import ACLS_FILE, FileAclStore, StandardAuthorizer, create_authorizer
from strom.server.security.principal import KafkaPrincipal

ALICE = KafkaPrincipal("User", "alice")
BOB = KafkaPrincipal("User", "bob")
T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
Op, Perm = AclOperation, AclPermissionType


def acl(rt: ResourceType, name: str, op: AclOperation, perm: AclPermissionType = Perm.ALLOW,
        principal: str = "User:alice", host: str = "*", pattern: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(ResourcePattern(rt, name, pattern), AccessControlEntry(principal, host, op, perm))


def auth(*bindings: AclBinding, **kw: object) -> StandardAuthorizer:
    a = StandardAuthorizer(**kw)  # type: ignore[arg-type]
    assert a.create_acls(list(bindings)) == [None] * len(bindings)
    return a


def test_literal_prefixed_and_wildcard_patterns() -> None:
    a = auth(acl(T, "orders", Op.READ), acl(T, "logs-", Op.WRITE, pattern=PatternType.PREFIXED),
             acl(G, "*", Op.READ))
    assert a.authorize(ALICE, "10.0.0.1", Op.READ, (T, "orders"))
    assert not a.authorize(ALICE, "10.0.0.1", Op.READ, (T, "orders2"))  # literal is exact
    assert a.authorize(ALICE, "h", Op.WRITE, (T, "logs-app1"))
    assert not a.authorize(ALICE, "h", Op.WRITE, (T, "log"))
    assert a.authorize(ALICE, "h", Op.READ, (G, "any-group"))
    assert not a.authorize(BOB, "h", Op.READ, (T, "orders"))  # another principal
    assert not a.authorize(ALICE, "h", Op.WRITE, (T, "orders"))  # another operation


def test_deny_wins_over_allow_whatever_the_pattern() -> None:
    a = auth(acl(T, "*", Op.ALL), acl(T, "secret-", Op.READ, Perm.DENY, pattern=PatternType.PREFIXED))
    assert a.authorize(ALICE, "h", Op.READ, (T, "public"))
    assert not a.authorize(ALICE, "h", Op.READ, (T, "secret-plans"))
    assert a.authorize(ALICE, "h", Op.WRITE, (T, "secret-plans"))  # the DENY is for READ only
    b = auth(acl(T, "t", Op.READ), acl(T, "t", Op.ALL, Perm.DENY, principal="User:*"))
    assert not b.authorize(ALICE, "h", Op.READ, (T, "t"))


def test_hosts() -> None:
    a = auth(acl(T, "t", Op.READ, host="10.0.0.1"), acl(T, "t", Op.READ, Perm.DENY, host="10.0.0.9"),
             acl(T, "t", Op.WRITE))
    assert a.authorize(ALICE, "10.0.0.1", Op.READ, (T, "t"))
    assert not a.authorize(ALICE, "10.0.0.2", Op.READ, (T, "t"))
    assert a.authorize(ALICE, "10.0.0.9", Op.WRITE, (T, "t"))
    assert a.authorize(ALICE, "10.0.0.9", Op.DESCRIBE, (T, "t"))  # WRITE implies DESCRIBE


@pytest.mark.parametrize(("granted", "implied"), [
    (Op.READ, Op.DESCRIBE), (Op.WRITE, Op.DESCRIBE), (Op.DELETE, Op.DESCRIBE), (Op.ALTER, Op.DESCRIBE),
    (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS), (Op.ALL, Op.CREATE), (Op.ALL, Op.IDEMPOTENT_WRITE),
])
def test_implied_operations(granted: AclOperation, implied: AclOperation) -> None:
    assert auth(acl(T, "t", granted)).authorize(ALICE, "h", implied, (T, "t"))


@pytest.mark.parametrize(("granted", "asked"), [
    (Op.DESCRIBE, Op.READ), (Op.CREATE, Op.DESCRIBE), (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    (Op.READ, Op.WRITE), (Op.ALTER_CONFIGS, Op.DESCRIBE),
])
def test_no_implication_the_other_way(granted: AclOperation, asked: AclOperation) -> None:
    assert not auth(acl(T, "t", granted)).authorize(ALICE, "h", asked, (T, "t"))


def test_deny_describe_is_not_implied_by_deny_read() -> None:
    a = auth(acl(T, "t", Op.ALL), acl(T, "t", Op.READ, Perm.DENY))
    assert not a.authorize(ALICE, "h", Op.READ, (T, "t"))
    assert a.authorize(ALICE, "h", Op.DESCRIBE, (T, "t"))


def test_super_users_and_no_acl_found() -> None:
    a = auth(acl(T, "t", Op.READ, Perm.DENY, principal="User:admin"), super_users="User:admin;User:ops")
    assert a.authorize(KafkaPrincipal("User", "admin"), "h", Op.READ, (T, "t"))  # super users skip ACLs
    assert not a.authorize(ALICE, "h", Op.READ, (T, "untouched"))  # no ACL: refused by default
    open_auth = auth(acl(T, "t", Op.READ, principal="User:bob"), allow_everyone_if_no_acl_found=True)
    assert open_auth.authorize(ALICE, "h", Op.WRITE, (T, "untouched"))
    assert not open_auth.authorize(ALICE, "h", Op.READ, (T, "t"))  # an ACL exists for t: only bob
    with pytest.raises(ConfigError, match="super.users"):
        StandardAuthorizer(super_users="admin")


def test_authorize_by_resource_type() -> None:
    a = auth(acl(T, "app-", Op.WRITE, pattern=PatternType.PREFIXED))
    assert a.authorize_by_resource_type(ALICE, "h", Op.WRITE, T)
    assert not a.authorize_by_resource_type(BOB, "h", Op.WRITE, T)
    b = auth(acl(T, "app-", Op.WRITE, pattern=PatternType.PREFIXED), acl(T, "*", Op.WRITE, Perm.DENY))
    assert not b.authorize_by_resource_type(ALICE, "h", Op.WRITE, T)
    c = auth(acl(T, "app-x", Op.WRITE), acl(T, "app-", Op.WRITE, Perm.DENY, pattern=PatternType.PREFIXED))
    assert not c.authorize_by_resource_type(ALICE, "h", Op.WRITE, T)


def test_filters_match_any_and_match() -> None:
    bindings = [acl(T, "orders", Op.READ), acl(T, "ord", Op.WRITE, pattern=PatternType.PREFIXED),
                acl(T, "*", Op.DESCRIBE), acl(G, "orders", Op.READ), acl(T, "other", Op.READ, principal="User:bob")]
    a = auth(*bindings)
    match = AclBindingFilter(ResourcePatternFilter(T, "orders", PatternType.MATCH))
    assert set(a.acls(match)) == {bindings[0], bindings[1], bindings[2]}
    anyp = AclBindingFilter(ResourcePatternFilter(T, "orders", PatternType.ANY))
    assert a.acls(anyp) == [bindings[0]]
    by_principal = AclBindingFilter(entry=AccessControlEntryFilter(principal="User:bob"))
    assert a.acls(by_principal) == [bindings[4]]
    removed = a.delete_acls([AclBindingFilter(ResourcePatternFilter(ResourceType.ANY, None, PatternType.PREFIXED))])
    assert removed == [[bindings[1]]]
    assert not a.authorize(ALICE, "h", Op.WRITE, (T, "ord-1"))


def test_invalid_acls_are_refused() -> None:
    a = StandardAuthorizer()
    results = a.create_acls([acl(T, "*", Op.READ, pattern=PatternType.PREFIXED), acl(C, "other", Op.ALTER),
                             acl(C, "kafka-cluster", Op.ALTER)])
    assert [type(r).__name__ if r else None for r in results] == ["ValueError", "ValueError", None]
    with pytest.raises(ValueError, match="principal"):
        acl(T, "t", Op.READ, principal="alice")
    with pytest.raises(ValueError, match="operation"):
        acl(T, "t", Op.ANY)


def test_acls_survive_a_restart(tmp_path: Path) -> None:
    config = BrokerConfig({"log.dirs": str(tmp_path), "authorizer.class.name":
                           "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "super.users": "User:admin"})
    a = create_authorizer(config)
    assert a is not None
    a.create_acls([acl(T, "t", Op.READ), acl(X, "tx-", Op.WRITE, pattern=PatternType.PREFIXED)])
    again = create_authorizer(config)
    assert again is not None and again.authorize(ALICE, "h", Op.READ, (T, "t"))
    assert again.authorize(ALICE, "h", Op.WRITE, (X, "tx-1"))
    assert len(FileAclStore(tmp_path / ACLS_FILE).bindings()) == 2
    assert create_authorizer(BrokerConfig({})) is None
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        create_authorizer(BrokerConfig({"authorizer.class.name": "com.example.Custom"}))


def test_authorized_operations_bit_field() -> None:
    from strom.server.security.authorizer import authorized_operations

    a = auth(acl(T, "t", Op.READ))
    bits = authorized_operations(a, ALICE, "h", (T, "t"))
    assert bits == (1 << int(Op.READ)) | (1 << int(Op.DESCRIBE))
    everything = authorized_operations(None, ALICE, "h", (C, "kafka-cluster"))
    assert everything == sum(1 << int(o) for o in (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS,
                                                   Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE))
