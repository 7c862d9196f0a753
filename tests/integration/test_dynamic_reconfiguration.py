"""Dynamic broker configs reaching the components of a running broker (in this process, so its objects can be
looked at): a TLS listener's keystore (Kafka's ``listener.name.<l>.ssl.*``): connections made afterwards get the
new certificate, a certificate rewritten in place is picked up by altering the config with its unchanged value,
and a keystore that does not load is refused while the listener goes on serving the current one; confluent-kafka,
trusting only the new certificate's CA, produces over TLS after the rotation. The log cleaner's threads and the
connection limits likewise."""

from __future__ import annotations

import dataclasses
import shutil
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from strom.admin import AdminClient
from strom.admin.models import AlterConfigOp, ConfigResource, ConfigResourceType
from strom.common.error_codes import InvalidRequestError
from strom.testing.certs import Pki, first_certificate_der, make_pki
from strom.testing.cluster import wait_until
from tests.integration.in_process_broker import in_process_broker

KEYSTORE = "listener.name.ssl.ssl.keystore.location"



def _served_cert(port: int, cafile: Path) -> bytes:
    """The certificate the listener presents to a new connection (DER)."""
    ctx = ssl.create_default_context(cafile=str(cafile))
    with socket.create_connection(("localhost", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as tls:
        der = tls.getpeercert(binary_form=True)
        assert der is not None
        return der


@contextmanager
def _tls_broker(data_dir: Path, pki: Pki, keystore: Path, **props: str) -> Iterator[tuple[int, AdminClient]]:
    """An in-process broker (``props``: more server.properties) whose TLS listener serves a copy of ``pki``'s
    keystore at ``keystore``: its TLS port and an admin client on its plaintext listener."""
    shutil.copy(pki.broker_keystore, keystore)
    with in_process_broker("asyncio", data_dir, dataclasses.replace(pki, broker_keystore=keystore), **props) as (
            broker, _runner):
        plaintext, tls_port = broker.bound_ports
        admin = AdminClient(bootstrap_servers=f"127.0.0.1:{plaintext}")
        try:
            yield tls_port, admin
        finally:
            admin.close()


def test_keystore_rotation_at_runtime(tmp_path: Path, pki: Pki) -> None:
    second = make_pki(tmp_path / "second")
    both_cas = tmp_path / "both-cas.pem"
    both_cas.write_bytes(pki.ca.read_bytes() + second.ca.read_bytes())
    keystore = tmp_path / "keystore.pem"
    with _tls_broker(tmp_path / "data", pki, keystore) as (tls_port, admin):
        node = ConfigResource(ConfigResourceType.BROKER, "1")

        def alter(resource: ConfigResource, key: str, value: str) -> None:
            admin.incremental_alter_configs({resource: [AlterConfigOp(key, value)]})[resource].result(30)

        old, new = first_certificate_der(pki.broker_cert), first_certificate_der(second.broker_cert)
        assert _served_cert(tls_port, both_cas) == old
        alter(node, KEYSTORE, str(keystore))  # now a dynamic config, the same file
        assert _served_cert(tls_port, both_cas) == old
        keystore.write_bytes(second.broker_keystore.read_bytes())  # rewritten in place: not re-read by itself
        assert _served_cert(tls_port, both_cas) == old
        alter(node, KEYSTORE, str(keystore))  # the config unchanged: the file is loaded again
        assert _served_cert(tls_port, both_cas) == new

        bad = tmp_path / "bad.pem"
        bad.write_text("not a key or a certificate\n")
        with pytest.raises(InvalidRequestError, match="Invalid SSL keystore or truststore of listener SSL"):
            alter(node, KEYSTORE, str(bad))
        assert _served_cert(tls_port, both_cas) == new
        with pytest.raises(InvalidRequestError, match=r"only per-listener using the listener prefix: "
                                                      r"Set\(ssl.keystore.location\)"):
            alter(node, "ssl.keystore.location", str(keystore))
        with pytest.raises(InvalidRequestError, match="broker id must be specified"):
            alter(ConfigResource(ConfigResourceType.BROKER, ""), KEYSTORE, str(keystore))
        with pytest.raises(InvalidRequestError, match="Listener PLAINTEXT is not a TLS listener"):
            alter(node, "listener.name.plaintext.ssl.keystore.location", str(keystore))
        entries = {e.name: e for e in admin.describe_configs([node])[node].result(30)}
        assert (entries[KEYSTORE].value, entries[KEYSTORE].is_read_only) == (str(keystore), False)

        import confluent_kafka as ck

        delivered: list[object] = []
        producer = ck.Producer({"bootstrap.servers": f"localhost:{tls_port}", "security.protocol": "SSL",
                                "ssl.ca.location": str(second.ca)})
        producer.produce("after-rotation", b"v", on_delivery=lambda err, _m: delivered.append(err))
        assert producer.flush(30) == 0 and delivered == [None]


def test_a_new_keystore_must_keep_the_broker_identity(tmp_path: Path, pki: Pki) -> None:
    """Kafka's check on a keystore update: the new certificate keeps the subject DN and every SAN of the one the
    listener serves (``ssl.allow.dn.changes`` / ``ssl.allow.san.changes`` allow it), also when the file is rewritten
    in place; a refused keystore leaves the served certificate as it was."""
    imposter = make_pki(tmp_path / "imposter", broker_cn="imposter")
    fewer_sans = make_pki(tmp_path / "fewer", broker_dns=())
    more_sans = make_pki(tmp_path / "more", broker_dns=("localhost", "broker-1.example"))
    all_cas = tmp_path / "cas.pem"
    all_cas.write_bytes(b"".join(p.ca.read_bytes() for p in (pki, imposter, fewer_sans, more_sans)))
    keystore = tmp_path / "keystore.pem"
    with _tls_broker(tmp_path / "data", pki, keystore) as (tls_port, admin):
        node = ConfigResource(ConfigResourceType.BROKER, "1")

        def alter(value: str) -> None:
            admin.incremental_alter_configs({node: [AlterConfigOp(KEYSTORE, value)]})[node].result(30)

        served = first_certificate_der(pki.broker_cert)
        with pytest.raises(InvalidRequestError, match=r"Keystore DistinguishedName does not match:  "
                                                      r"existing=\{DN=CN=localhost,O=strom\}, "
                                                      r"new=\{DN=CN=imposter,O=strom\}"):
            alter(str(imposter.broker_keystore))
        with pytest.raises(InvalidRequestError, match=r"Keystore SubjectAltNames do not match:  existing=\{SAN="
                                                      r"\[DNS:localhost, IP Address:127.0.0.1\]\}"):
            alter(str(fewer_sans.broker_keystore))
        keystore.write_bytes(imposter.broker_keystore.read_bytes())  # rewritten in place, then reloaded
        with pytest.raises(InvalidRequestError, match="Keystore DistinguishedName does not match"):
            alter(str(keystore))
        assert _served_cert(tls_port, all_cas) == served
        alter(str(more_sans.broker_keystore))  # more names than before: allowed
        assert _served_cert(tls_port, all_cas) == first_certificate_der(more_sans.broker_cert)
        with pytest.raises(InvalidRequestError, match="broker-1.example"):  # the served one's names count now
            alter(str(pki.broker_keystore))
    with _tls_broker(tmp_path / "data2", pki, tmp_path / "keystore2.pem",
                     **{"listener.name.ssl.ssl.allow.dn.changes": "true"}) as (tls_port, admin):
        node = ConfigResource(ConfigResourceType.BROKER, "1")
        admin.incremental_alter_configs({node: [AlterConfigOp(KEYSTORE, str(imposter.broker_keystore))]})[
            node].result(30)
        assert _served_cert(tls_port, all_cas) == first_certificate_der(imposter.broker_cert)


def test_cleaner_threads_and_connection_limits_change_in_a_running_broker(tmp_path: Path, pki: Pki) -> None:
    with in_process_broker("asyncio", tmp_path / "data", pki) as (broker, runner):
        plaintext = broker.bound_ports[0]
        admin = AdminClient(bootstrap_servers=f"127.0.0.1:{plaintext}")
        node = ConfigResource(ConfigResourceType.BROKER, "1")
        cleaner = broker.log_manager.cleaner if broker.log_manager is not None else None
        assert cleaner is not None and len(cleaner._threads) == 1
        try:
            admin.incremental_alter_configs({node: [
                AlterConfigOp("log.cleaner.threads", "3"), AlterConfigOp("log.cleaner.backoff.ms", "100"),
                AlterConfigOp("max.connections.per.ip", "50"),
                AlterConfigOp("max.connections.per.ip.overrides", "10.1.1.1:5")]})[node].result(30)
            # the cleaner restarts in a worker thread: wait for its new threads
            wait_until(lambda: len(cleaner._threads) == 3 and cleaner.config.backoff_ms == 100, 30,
                       "three cleaner threads")
            assert all(t.is_alive() for t in cleaner._threads)
            quotas = broker.socket_servers[0].quotas
            assert (quotas.max_connections_per_ip, quotas.overrides) == (50, {"10.1.1.1": 5})
            assert all(server.quotas is quotas for server in broker.socket_servers)
        finally:
            admin.close()
