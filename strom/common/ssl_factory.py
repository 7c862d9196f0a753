"""``ssl.SSLContext`` from Kafka's ``ssl.*`` settings (PEM only), for the broker's listeners and the clients.

Kafka counterpart: ``DefaultSslEngineFactory`` with ``ssl.keystore.type=PEM`` / ``ssl.truststore.type=PEM``:
the key and certificate chain come from ``ssl.keystore.location`` (one PEM file holding both) or inline from
``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``; trusted CAs from ``ssl.truststore.location`` (PEM) or
inline ``ssl.truststore.certificates``. librdkafka's names (``ssl.ca.location``, ``ssl.certificate.location``,
``ssl.key.location``) are read too, so a confluent-kafka client config works unchanged.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Callable
from typing import Any

from strom.common.errors import ConfigError

__all__ = ["build_ssl_context", "CLIENT_AUTH_MODES", "keystore_identity"]

CLIENT_AUTH_MODES = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def _password(value: Any) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "value", value))  # ConfigDef PASSWORD values wrap the secret


def _text(get: Callable[[str], Any], key: str) -> str | None:
    v = get(key)
    if v is None:
        return None
    v = _password(v)
    return v.strip() if v and v.strip() else None


def build_ssl_context(get: Callable[[str], Any], *, server: bool) -> ssl.SSLContext:
    """``get(key)`` returns the setting (or ``None``). ``server=True`` builds a listener's context
    (``ssl.client.auth``), else a client's (``ssl.endpoint.identification.algorithm``)."""
    for key, location in (("ssl.keystore.type", "ssl.keystore.location"),
                          ("ssl.truststore.type", "ssl.truststore.location")):
        kind = _text(get, key)
        if kind is not None and kind.upper() != "PEM" and _text(get, location):
            raise ConfigError(f"Invalid value {kind} for configuration {key}: strom reads PEM files only "
                              "(convert a JKS/PKCS12 store with keytool/openssl, or use the inline PEM settings)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    _protocols(ctx, get("ssl.enabled.protocols"))
    ciphers = get("ssl.cipher.suites")
    if ciphers:
        names = ciphers if isinstance(ciphers, list) else [c.strip() for c in str(ciphers).split(",")]
        names = [n for n in names if n]
        if names:
            try:
                ctx.set_ciphers(":".join(names))
            except ssl.SSLError:
                raise ConfigError(f"Invalid value {','.join(names)} for configuration ssl.cipher.suites: no cipher "
                                  "can be selected (OpenSSL cipher names, e.g. ECDHE-RSA-AES128-GCM-SHA256)") from None
    _load_key_and_chain(ctx, get, required=server)
    _load_trust(ctx, get, server=server)
    if server:
        auth = (_text(get, "ssl.client.auth") or "none").lower()
        if auth not in CLIENT_AUTH_MODES:
            raise ConfigError(f"Invalid value {auth} for configuration ssl.client.auth: "
                              "String must be one of: none, requested, required")
        ctx.verify_mode = CLIENT_AUTH_MODES[auth]
    else:
        algorithm = get("ssl.endpoint.identification.algorithm")
        if algorithm is None:
            algorithm = "https"  # Kafka's default: verify the broker's host name
        ctx.check_hostname = str(algorithm).strip().lower() == "https"
        if get("enable.ssl.certificate.verification") in (False, "false"):
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
    return ctx


_CERTIFICATE = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)
_DN_NAMES = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "localityName": "L",
             "stateOrProvinceName": "ST", "countryName": "C", "emailAddress": "EMAILADDRESS",
             "domainComponent": "DC", "streetAddress": "STREET", "userId": "UID"}


def keystore_identity(get: Callable[[str], Any]) -> tuple[str, frozenset[tuple[str, str]]] | None:
    """The subject distinguished name (RFC 2253 order) and the subject alternative names of the keystore's first
    certificate (``ssl.keystore.location`` or the inline ``ssl.keystore.certificate.chain``); None when there is no
    certificate, or this Python cannot decode one (the check that uses it is then skipped). OSError when the file
    cannot be read."""
    decode = getattr(ssl._ssl, "_test_decode_cert", None)  # type: ignore[attr-defined]
    location = _text(get, "ssl.keystore.location")
    if location is not None:
        with open(location, encoding="utf-8", errors="replace") as f:
            text: str | None = f.read()
    else:
        text = _text(get, "ssl.keystore.certificate.chain")
    found = _CERTIFICATE.search(text or "")
    if decode is None or found is None:
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".pem", delete=False) as f:
        f.write(found.group(0) + "\n")
    try:
        info = decode(f.name)
    except ssl.SSLError:
        return None
    finally:
        os.unlink(f.name)
    dn = ",".join(f"{_DN_NAMES.get(k, k)}={v}" for rdn in reversed(info.get("subject", ())) for k, v in rdn)
    return dn, frozenset((str(t), str(v)) for t, v in info.get("subjectAltName", ()))


def _protocols(ctx: ssl.SSLContext, value: Any) -> None:
    if not value:
        return
    names = value if isinstance(value, list) else [p.strip() for p in str(value).split(",")]
    versions = []
    for name in (n for n in names if n):
        if name not in _PROTOCOLS:
            raise ConfigError(f"Invalid value {name} for configuration ssl.enabled.protocols: "
                              f"supported protocols are {', '.join(_PROTOCOLS)}")
        versions.append(_PROTOCOLS[name])
    if versions:
        ctx.minimum_version = min(versions)
        ctx.maximum_version = max(versions)


def _load_key_and_chain(ctx: ssl.SSLContext, get: Callable[[str], Any], *, required: bool) -> None:
    password = _password(get("ssl.key.password")) or _password(get("ssl.keystore.password"))
    location = _text(get, "ssl.keystore.location")
    key_pem = _text(get, "ssl.keystore.key")
    chain_pem = _text(get, "ssl.keystore.certificate.chain")
    cert_location = _text(get, "ssl.certificate.location")
    key_location = _text(get, "ssl.key.location")
    try:
        if key_pem or chain_pem:
            if not (key_pem and chain_pem):
                raise ConfigError("ssl.keystore.key and ssl.keystore.certificate.chain must be set together")
            # The ssl module loads key material from files only: write it to a private temporary file.
            fd, path = tempfile.mkstemp(prefix="strom-keystore-", suffix=".pem")
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(key_pem + "\n" + chain_pem + "\n")
                ctx.load_cert_chain(path, password=password)
            finally:
                os.unlink(path)
        elif location:
            ctx.load_cert_chain(location, password=password)
        elif cert_location:
            ctx.load_cert_chain(cert_location, key_location, password=password)
        elif required:
            raise ConfigError("an SSL listener needs a key and certificate: set ssl.keystore.location (PEM with the "
                              "private key and certificate chain) or ssl.keystore.key and "
                              "ssl.keystore.certificate.chain")
    except FileNotFoundError as e:
        raise ConfigError(f"Cannot read the SSL keystore: {e.filename or location}: no such file") from None
    except ssl.SSLError as e:
        raise ConfigError(f"Cannot load the SSL key and certificate chain "
                          f"({location or cert_location or 'ssl.keystore.key'}): {e.reason or e}") from None


def _load_trust(ctx: ssl.SSLContext, get: Callable[[str], Any], *, server: bool) -> None:
    location = _text(get, "ssl.truststore.location") or _text(get, "ssl.ca.location")
    inline = _text(get, "ssl.truststore.certificates")
    try:
        if location:
            ctx.load_verify_locations(cafile=location)
        if inline:
            ctx.load_verify_locations(cadata=inline)
    except FileNotFoundError:
        raise ConfigError(f"Cannot read the SSL truststore {location}: no such file") from None
    except ssl.SSLError as e:
        raise ConfigError(f"Cannot load the SSL truststore ({location or 'ssl.truststore.certificates'}): "
                          f"{e.reason or e}") from None
    if not location and not inline and not server:
        ctx.load_default_certs()  # a client without a truststore trusts the system's CAs, as the JVM's default
