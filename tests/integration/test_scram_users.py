"""SCRAM users managed over the wire (KIP-554): AdminClient.alter/describe_user_scram_credentials and
`strom configs --entity-type users` against a real listener process; a new user logs in at once, a deleted one
no longer can, credentials survive a restart, and bad requests get Kafka's errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from strom.admin.admin_client import AdminClient
from strom.admin.scram import ScramCredentialInfo, UserScramCredentialDeletion, UserScramCredentialUpsertion
from strom.common.error_codes import (
    ClusterAuthorizationFailedError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
)
from strom.security.sasl import SaslAuthenticationError
from tests.integration.listener_process import ListenerProcess

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-pw";'


def _server(data: Path) -> ListenerProcess:
    return ListenerProcess({
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", "sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin"}, data_dir=str(data)).start()


def _admin(server: ListenerProcess, mechanism: str, user: str, password: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                        "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
                        "default.api.timeout.ms": 15000})


def _whoami(server: ListenerProcess, mechanism: str, user: str, password: str) -> str:
    admin = _admin(server, mechanism, user, password)
    try:
        return str(admin.describe_cluster().cluster_id().result(20))
    finally:
        admin.close(5)


def test_admin_client_manages_scram_users(tmp_path: Path) -> None:
    server = _server(tmp_path)
    admin = _admin(server, "PLAIN", "admin", "admin-pw")
    try:
        admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("carol", "SCRAM-SHA-256", 8192, "carol-pw"),
            UserScramCredentialUpsertion("carol", "SCRAM-SHA-512", 4096, "carol-pw"),
        ]).all().result(20)
        assert admin.describe_user_scram_credentials().result(20) == {
            "carol": [ScramCredentialInfo("SCRAM-SHA-256", 8192), ScramCredentialInfo("SCRAM-SHA-512", 4096)]}
        assert _whoami(server, "SCRAM-SHA-256", "carol", "carol-pw") == "User:carol"
        with pytest.raises(UnacceptableCredentialError, match="Too few iterations"):
            admin.alter_user_scram_credentials([UserScramCredentialUpsertion("dave", "SCRAM-SHA-256", 100, "x")]
                                               ).all().result(20)
        with pytest.raises(ResourceNotFoundError):
            admin.alter_user_scram_credentials([UserScramCredentialDeletion("dave", "SCRAM-SHA-256")]).all().result(20)
        with pytest.raises(ResourceNotFoundError):
            admin.describe_user_scram_credentials(["dave"]).result(20)
        admin.alter_user_scram_credentials([UserScramCredentialDeletion("carol", "SCRAM-SHA-256")]).all().result(20)
        with pytest.raises(SaslAuthenticationError):
            _whoami(server, "SCRAM-SHA-256", "carol", "carol-pw")
    finally:
        admin.close(5)
    carol = _admin(server, "SCRAM-SHA-512", "carol", "carol-pw")
    try:  # not a super user: may not change credentials
        with pytest.raises(ClusterAuthorizationFailedError):
            carol.alter_user_scram_credentials([UserScramCredentialUpsertion("carol", "SCRAM-SHA-256", 4096, "x")]
                                               ).all().result(20)
    finally:
        carol.close(5)
    server.stop()
    restarted = _server(tmp_path)
    try:
        assert _whoami(restarted, "SCRAM-SHA-512", "carol", "carol-pw") == "User:carol"
    finally:
        restarted.stop()


def test_configs_cli_for_users(tmp_path: Path) -> None:
    server = _server(tmp_path)
    cfg = tmp_path / "admin.properties"
    cfg.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=admin\n"
                   "sasl.password=admin-pw\n")
    base = [sys.executable, "-m", "strom.cli.main", "configs", "--bootstrap-server",
            server.bootstrap("SASL_PLAINTEXT"), "--command-config", str(cfg), "--entity-type", "users"]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *args], capture_output=True, text=True, timeout=120)

    try:
        r = cli("--entity-name", "erin", "--alter", "--add-config",
                "SCRAM-SHA-256=[iterations=8192,password=erin-pw],SCRAM-SHA-512=[password=erin-pw]")
        assert r.returncode == 0, r.stderr
        assert "Completed updating config for user erin." in r.stdout
        r = cli("--describe")
        assert ("SCRAM credential configs for user-principal 'erin' are SCRAM-SHA-256=iterations=8192,"
                "SCRAM-SHA-512=iterations=4096") in r.stdout
        assert _whoami(server, "SCRAM-SHA-512", "erin", "erin-pw") == "User:erin"
        assert cli("--entity-name", "erin", "--alter", "--delete-config", "SCRAM-SHA-512").returncode == 0
        assert "SCRAM-SHA-512" not in cli("--describe", "--entity-name", "erin").stdout
        bad = cli("--entity-name", "erin", "--alter", "--add-config", "bogus_rate=1024")
        assert bad.returncode == 2 and "Only quota and SCRAM credential configs can be added" in bad.stderr
        bad = cli("--entity-name", "erin", "--alter", "--add-config", "producer_byte_rate=1024,SCRAM-SHA-512=[password=x]")
        assert bad.returncode == 2 and "Cannot alter both quota and SCRAM credential configs" in bad.stderr
        bad = cli("--entity-name", "erin", "--alter", "--add-config", "SCRAM-SHA-256=[iterations=10,password=x]")
        assert bad.returncode == 1 and "Too few iterations" in bad.stderr
        assert "erin-pw" not in server.read_log()
    finally:
        server.stop()
