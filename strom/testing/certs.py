"""Certificates made at run time for TLS tests and benchmarks (needs the ``cryptography`` test extra).

:func:`make_pki` writes, under a directory: a CA (``ca.pem``), a broker key + chain signed by it for
``localhost`` / ``127.0.0.1`` (``broker.pem`` holding key and chain, as ``ssl.keystore.location`` wants, and the
separate ``broker.key`` / ``broker.crt``), a client certificate ``CN=<client_cn>,O=strom`` (``client.pem``,
``client.key``, ``client.crt``) and an unrelated CA with a client certificate it signed (``rogue-ca.pem``,
``rogue-client.key`` / ``rogue-client.crt``) for refusal tests.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Pki", "make_pki", "first_certificate_der"]


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: Path
    broker_keystore: Path
    broker_key: Path
    broker_cert: Path
    client_keystore: Path
    client_key: Path
    client_cert: Path
    rogue_ca: Path
    rogue_client_key: Path
    rogue_client_cert: Path


def _key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str, org: str = "strom") -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org), x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: Any, key: Any, issuer: Any, issuer_key: Any, *, ca: bool, sans: list[Any] | None = None) -> Any:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    now = datetime.datetime.now(datetime.UTC)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=2))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                          content_commitment=False, key_encipherment=False, data_encipherment=False,
                                          key_agreement=False, encipher_only=False, decipher_only=False),
                            critical=True)
        b = b.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                            critical=False)
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _pem_key(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _pem_cert(cert: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def make_pki(directory: str | Path, client_cn: str = "alice", *, broker_cn: str = "localhost",
             broker_dns: tuple[str, ...] = ("localhost",), ca_cn: str = "strom test CA") -> Pki:
    """A CA (``ca_cn``), a broker certificate (``broker_cn``; SANs ``broker_dns`` and 127.0.0.1), client
    certificates, and a rogue CA with a client of its own, as PEM files in ``directory``."""
    from cryptography import x509

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name(ca_cn)
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    broker_key = _key()
    broker = _cert(_name(broker_cn), broker_key, ca_name, ca_key, ca=False,
                   sans=[*(x509.DNSName(n) for n in broker_dns), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    client_key = _key()
    client = _cert(_name(client_cn), client_key, ca_name, ca_key, ca=False)
    rogue_key = _key()
    rogue_name = _name("rogue CA", "elsewhere")
    rogue = _cert(rogue_name, rogue_key, rogue_name, rogue_key, ca=True)
    rogue_client_key = _key()
    rogue_client = _cert(_name(client_cn, "elsewhere"), rogue_client_key, rogue_name, rogue_key, ca=False)

    def write(name: str, data: bytes) -> Path:
        p = d / name
        p.write_bytes(data)
        p.chmod(0o600)
        return p

    return Pki(
        dir=d,
        ca=write("ca.pem", _pem_cert(ca)),
        broker_keystore=write("broker.pem", _pem_key(broker_key) + _pem_cert(broker) + _pem_cert(ca)),
        broker_key=write("broker.key", _pem_key(broker_key)),
        broker_cert=write("broker.crt", _pem_cert(broker) + _pem_cert(ca)),
        client_keystore=write("client.pem", _pem_key(client_key) + _pem_cert(client)),
        client_key=write("client.key", _pem_key(client_key)),
        client_cert=write("client.crt", _pem_cert(client)),
        rogue_ca=write("rogue-ca.pem", _pem_cert(rogue)),
        rogue_client_key=write("rogue-client.key", _pem_key(rogue_client_key)),
        rogue_client_cert=write("rogue-client.crt", _pem_cert(rogue_client)),
    )


def first_certificate_der(pem_file: Path) -> bytes:
    """The first certificate of a PEM file, DER-encoded (what a TLS peer's ``getpeercert(binary_form=True)`` gives)."""
    import ssl

    text = pem_file.read_text()
    start = text.index("-----BEGIN CERTIFICATE-----")
    end = text.index("-----END CERTIFICATE-----", start) + len("-----END CERTIFICATE-----")
    return ssl.PEM_cert_to_DER_cert(text[start:end])
