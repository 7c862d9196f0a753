"""ACLs in ZooKeeper (a real ZooKeeper server): two brokers' authorizers over ZkAclStore see each other's changes
through the change notifications, the znodes have Kafka's layout and JSON, concurrent writers to one resource lose
nothing, and a new store (a restarted broker) reads what is stored."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator

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
from strom.server.security.authorizer import StandardAuthorizer
from strom.server.security.principal import KafkaPrincipal
from strom.server.security.zk_acl_store import ZkAclStore
from strom.server.zk.kafka_zk_client import KafkaZkClient

pytestmark = pytest.mark.cluster

ALICE, BOB = KafkaPrincipal("User", "alice"), KafkaPrincipal("User", "bob")
T = ResourceType.TOPIC


def _until(condition: Callable[[], bool], timeout_s: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


def acl(name: str, op: AclOperation, principal: str = "User:alice", pattern: PatternType = PatternType.LITERAL,
        perm: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(ResourcePattern(T, name, pattern), AccessControlEntry(principal, "*", op, perm))


@pytest.fixture
def brokers(zk_connect: str) -> Iterator[Callable[[], tuple[StandardAuthorizer, ZkAclStore, KafkaZkClient]]]:
    made: list[tuple[ZkAclStore, KafkaZkClient]] = []

    def make() -> tuple[StandardAuthorizer, ZkAclStore, KafkaZkClient]:
        zk = KafkaZkClient.connect(zk_connect, session_timeout_ms=6000, connection_timeout_ms=15000)
        store = ZkAclStore(zk)
        authorizer = StandardAuthorizer(store, super_users="User:admin")
        store.start(authorizer.reload)
        made.append((store, zk))
        return authorizer, store, zk

    yield make
    for store, zk in made:
        store.stop()
        zk.close()


def test_changes_reach_the_other_broker_in_kafkas_layout(brokers) -> None:  # type: ignore[no-untyped-def]
    a, _sa, zk = brokers()
    b, _sb, _ = brokers()
    write = acl("orders", AclOperation.WRITE)
    prefixed = acl("ev", AclOperation.READ, "User:bob", PatternType.PREFIXED)
    assert a.create_acls([write, prefixed]) == [None, None]
    assert a.authorize(ALICE, "10.0.0.1", AclOperation.WRITE, (T, "orders"))  # at once on the writer
    _until(lambda: b.authorize(ALICE, "10.0.0.1", AclOperation.WRITE, (T, "orders")), what="broker b sees the ACL")
    _until(lambda: b.authorize(BOB, "10.0.0.1", AclOperation.READ, (T, "events")), what="the prefixed ACL")

    data, _v = zk.get_data_and_version("/kafka-acl/Topic/orders")
    assert json.loads(data) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Write", "host": "*"}]}
    assert zk.get_data_and_version("/kafka-acl-extended/prefixed/Topic/ev")[0] is not None
    changes = zk.get_children("/kafka-acl-changes")
    assert changes and zk.get_data_and_version(f"/kafka-acl-changes/{changes[-1]}")[0] == b"Topic:orders"
    assert zk.get_children("/kafka-acl-extended-changes")

    removed = b.delete_acls([AclBindingFilter(ResourcePatternFilter(T, "orders", PatternType.LITERAL),
                                              AccessControlEntryFilter())])
    assert removed == [[write]]
    _until(lambda: not a.authorize(ALICE, "10.0.0.1", AclOperation.WRITE, (T, "orders")),
           what="broker a sees the deletion")
    assert zk.get_data_and_version("/kafka-acl/Topic/orders")[0] is None  # the last ACL took its znode along

    restarted, _s, _ = brokers()  # a new broker reads what is stored
    assert restarted.acls(AclBindingFilter()) == [prefixed]


def test_concurrent_writers_to_one_resource_lose_nothing(brokers) -> None:  # type: ignore[no-untyped-def]
    a, _sa, _ = brokers()
    b, _sb, _ = brokers()
    wanted = {w: [acl("shared", AclOperation.READ, f"User:{w}-{i}") for i in range(15)] for w in ("a", "b")}

    def write(auth: StandardAuthorizer, bindings: list[AclBinding]) -> None:
        for x in bindings:
            auth.create_acls([x])

    threads = [threading.Thread(target=write, args=(auth, wanted[w])) for auth, w in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    everything = set(wanted["a"] + wanted["b"])
    fresh, _s, _ = brokers()
    assert set(fresh.acls(AclBindingFilter())) == everything
    _until(lambda: set(a.acls(AclBindingFilter())) == everything == set(b.acls(AclBindingFilter())),
           what="both brokers to hold all 30 ACLs")
