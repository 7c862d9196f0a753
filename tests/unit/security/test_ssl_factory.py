"""SSLContext from Kafka's ssl.* keys: PEM key stores (file or inline), trust, client auth, protocols, ciphers;
bad settings are ConfigErrors that name the key."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from strom.common.errors import ConfigError
from strom.common.ssl_factory import build_ssl_context
from strom.testing.certs import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def ctx(server: bool = True, **settings: object) -> ssl.SSLContext:
    return build_ssl_context({k.replace("_", "."): v for k, v in settings.items()}.get, server=server)


def test_server_contexts(pki: Pki) -> None:
    c = ctx(ssl_keystore_location=str(pki.broker_keystore), ssl_client_auth="required",
            ssl_truststore_location=str(pki.ca), ssl_enabled_protocols="TLSv1.3")
    assert c.verify_mode == ssl.CERT_REQUIRED and c.minimum_version == ssl.TLSVersion.TLSv1_3
    inline = ctx(ssl_keystore_key=pki.broker_key.read_text(), ssl_keystore_certificate_chain=pki.broker_cert.read_text(),
                 ssl_truststore_certificates=pki.ca.read_text(), ssl_client_auth="requested")
    assert inline.verify_mode == ssl.CERT_OPTIONAL
    assert ctx(ssl_keystore_location=str(pki.broker_keystore)).verify_mode == ssl.CERT_NONE


def test_client_contexts(pki: Pki) -> None:
    c = ctx(False, ssl_ca_location=str(pki.ca))
    assert c.check_hostname and c.verify_mode == ssl.CERT_REQUIRED
    assert not ctx(False, ssl_ca_location=str(pki.ca), ssl_endpoint_identification_algorithm="").check_hostname
    ctx(False, ssl_ca_location=str(pki.ca), ssl_certificate_location=str(pki.client_cert),
        ssl_key_location=str(pki.client_key))


@pytest.mark.parametrize(("settings", "message"), [
    ({}, "an SSL listener needs a key and certificate"),
    ({"ssl_keystore_location": "/nonexistent.pem"}, "no such file"),
    ({"ssl_keystore_location": "KEYSTORE", "ssl_keystore_type": "JKS"}, "ssl.keystore.type: strom reads PEM"),
    ({"ssl_keystore_location": "CA"}, "Cannot load the SSL key"),
    ({"ssl_keystore_key": "KEY"}, "must be set together"),
    ({"ssl_keystore_location": "KEYSTORE", "ssl_enabled_protocols": "TLSv1.0"}, "ssl.enabled.protocols"),
    ({"ssl_keystore_location": "KEYSTORE", "ssl_cipher_suites": "NOT-A-CIPHER"}, "ssl.cipher.suites"),
    ({"ssl_keystore_location": "KEYSTORE", "ssl_client_auth": "maybe"}, "ssl.client.auth"),
    ({"ssl_keystore_location": "KEYSTORE", "ssl_truststore_location": "KEYSTORE_DIR/none.pem"}, "truststore"),
])
def test_bad_settings(pki: Pki, settings: dict[str, str], message: str) -> None:
    paths = {"KEYSTORE": str(pki.broker_keystore), "CA": str(pki.ca), "KEY": pki.broker_key.read_text(),
             "KEYSTORE_DIR/none.pem": str(Path(pki.dir) / "none.pem")}
    with pytest.raises(ConfigError, match=message):
        ctx(**{k: paths.get(v, v) for k, v in settings.items()})
