"""ACL management end to end: strom's AdminClient and `strom acls` over SASL against a real listener process whose
ACL requests go through StandardAuthorizer and the CreateAcls/DescribeAcls/DeleteAcls handlers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.admin.admin_client import AdminClient
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
from strom.common.error_codes import ClusterAuthorizationFailedError, SecurityDisabledError
from tests.integration.listener_process import ListenerProcess

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="admin-pw" user_alice="alice-pw";')


def _server(data: Path, authorizer: bool = True) -> ListenerProcess:
    props = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
             "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS}
    if authorizer:
        props |= {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                  "super.users": "User:admin"}
    return ListenerProcess(props, data_dir=str(data)).start()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ListenerProcess]:
    p = _server(tmp_path)
    yield p
    p.stop()


def _admin(server: ListenerProcess, user: str | None) -> AdminClient:
    config = {"bootstrap.servers": server.bootstrap("SASL_PLAINTEXT" if user else "PLAINTEXT"),
              "default.api.timeout.ms": 15000}
    if user:
        config |= {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
                   "sasl.password": f"{user}-pw"}
    return AdminClient(config)


def _b(rt: ResourceType, name: str, op: AclOperation, pt: PatternType = PatternType.LITERAL,
       perm: AclPermissionType = AclPermissionType.ALLOW, principal: str = "User:alice") -> AclBinding:
    return AclBinding(ResourcePattern(rt, name, pt), AccessControlEntry(principal, "*", op, perm))


def test_admin_client_create_describe_delete(server: ListenerProcess, tmp_path: Path) -> None:
    read_t = _b(ResourceType.TOPIC, "orders", AclOperation.READ)
    write_prefix = _b(ResourceType.TOPIC, "ord", AclOperation.WRITE, PatternType.PREFIXED)
    deny_group = _b(ResourceType.GROUP, "g", AclOperation.READ, perm=AclPermissionType.DENY, principal="User:bob")
    admin = _admin(server, "admin")
    try:
        admin.create_acls([read_t, write_prefix, deny_group]).all().result(20)
        assert set(admin.describe_acls().result(20)) == {read_t, write_prefix, deny_group}
        match = AclBindingFilter(ResourcePatternFilter(ResourceType.TOPIC, "orders", PatternType.MATCH))
        assert set(admin.describe_acls(match).result(20)) == {read_t, write_prefix}
        by_bob = AclBindingFilter(entry=AccessControlEntryFilter(principal="User:bob"))
        assert admin.describe_acls(by_bob).result(20) == [deny_group]
        bad = _b(ResourceType.TOPIC, "*", AclOperation.READ, PatternType.PREFIXED)
        with pytest.raises(Exception, match="wildcard"):
            admin.create_acls([bad]).all().result(20)
        prefixed = AclBindingFilter(ResourcePatternFilter(ResourceType.ANY, None, PatternType.PREFIXED))
        assert admin.delete_acls([prefixed]).all().result(20) == {prefixed: [write_prefix]}
    finally:
        admin.close(5)
    alice = _admin(server, "alice")
    anonymous = _admin(server, None)
    try:  # neither is a super user nor holds ALTER/DESCRIBE on the cluster
        with pytest.raises(ClusterAuthorizationFailedError):
            alice.create_acls([_b(ResourceType.TOPIC, "x", AclOperation.ALL)]).all().result(20)
        with pytest.raises(ClusterAuthorizationFailedError):
            anonymous.describe_acls().result(20)
    finally:
        alice.close(5)
        anonymous.close(5)
    server.stop()
    restarted = _server(tmp_path)  # ACLs survive a restart
    admin = _admin(restarted, "admin")
    try:
        assert set(admin.describe_acls().result(20)) == {read_t, deny_group}
    finally:
        admin.close(5)
        restarted.stop()


def test_without_an_authorizer_acl_requests_are_refused(tmp_path: Path) -> None:
    p = _server(tmp_path, authorizer=False)
    admin = _admin(p, "alice")
    try:
        with pytest.raises(SecurityDisabledError, match="No Authorizer is configured"):
            admin.describe_acls().result(20)
    finally:
        admin.close(5)
        p.stop()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", "acls", *args], capture_output=True, text=True,
                          timeout=120)


def test_cli_mirrors_kafka_acls(server: ListenerProcess, tmp_path: Path) -> None:
    cfg = tmp_path / "admin.properties"
    cfg.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                   'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
                   'username="admin" password="admin-pw";\n')
    conn = ["--bootstrap-server", server.bootstrap("SASL_PLAINTEXT"), "--command-config", str(cfg)]
    r = _cli(*conn, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "t", "--group", "g")
    assert r.returncode == 0, r.stderr
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`" in r.stdout
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in r.stdout
    r = _cli(*conn, "--add", "--deny-principal", "User:bob", "--producer", "--topic", "logs-",
             "--resource-pattern-type", "prefixed")
    assert r.returncode == 0, r.stderr
    listed = _cli(*conn, "--list")
    assert listed.returncode == 0, listed.stderr
    for expected in ("name=t, patternType=LITERAL", "resourceType=GROUP, name=g",
                     "name=logs-, patternType=PREFIXED", "principal=User:bob, host=*, operation=CREATE, "
                     "permissionType=DENY"):
        assert expected in listed.stdout
    only_t = _cli(*conn, "--list", "--topic", "t")
    assert "name=g" not in only_t.stdout and "name=t" in only_t.stdout
    r = _cli(*conn, "--remove", "--force", "--topic", "logs-", "--resource-pattern-type", "prefixed")
    assert r.returncode == 0, r.stderr
    assert "logs-" not in _cli(*conn, "--list").stdout
    for bad, message in ((["--add", "--topic", "t"], "You must specify one of: --allow-principal"),
                         (["--add", "--allow-principal", "alice", "--topic", "t"], "expected type:name"),
                         (["--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"],
                          "Unknown AclOperation"),
                         (["--add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g"],
                          "ResourceType GROUP only supports operations"),
                         (["--topic", "t"], "exactly one action")):
        r = _cli(*conn, *bad)
        assert r.returncode == 2 and message in r.stderr, (bad, r.stderr)
        assert "Traceback" not in r.stderr
    anon = _cli("--bootstrap-server", server.bootstrap("PLAINTEXT"), "--list")
    assert anon.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in anon.stderr
    assert len(anon.stderr.strip().splitlines()) == 1
