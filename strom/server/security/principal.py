"""Who a connection is (Kafka's ``KafkaPrincipal``) and how a TLS certificate's DN becomes one
(``ssl.principal.mapping.rules``, KIP-371)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from strom.common.errors import ConfigError

__all__ = ["KafkaPrincipal", "ANONYMOUS", "SslPrincipalMapper", "distinguished_name"]


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """``type:name`` as ACLs name principals, e.g. ``User:alice``."""

    principal_type: str
    name: str

    USER_TYPE = "User"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` → ``KafkaPrincipal("User", "alice")`` (Kafka's ``SecurityUtils.parseKafkaPrincipal``)."""
        ptype, sep, name = text.partition(":")
        if not sep or not ptype or not name:
            raise ValueError(f"Expected a principal in the form type:name, got {text!r}")
        return cls(ptype, name)

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")

# The RFC 2253 short names Java prints for the attribute types Python's ssl module names in full.
_DN_NAMES = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
             "stateOrProvinceName": "ST", "localityName": "L", "streetAddress": "STREET", "domainComponent": "DC",
             "userId": "UID", "emailAddress": "EMAILADDRESS"}


def distinguished_name(peercert: dict[str, Any]) -> str:
    """The subject DN of ``SSLSocket.getpeercert()`` in Java's ``X500Principal.getName()`` order and form
    (most specific RDN first, ``CN=alice,OU=eng,O=acme``)."""
    rdns = []
    for rdn in reversed(peercert.get("subject", ())):
        rdns.append("+".join(f"{_DN_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


def _escape(value: str) -> str:
    return re.sub(r'([,+"\\<>;])', r"\\\1", value)


_RULE = re.compile(r"""\s*(?:RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)|(DEFAULT))\s*(?:,|$)""")


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules`` (Kafka's ``SslPrincipalMapper``): ``RULE:pattern/replacement/[LU]``
    entries tried in order, ``DEFAULT`` = the DN unchanged; no match → the DN unchanged."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules: list[tuple[re.Pattern[str], str, str] | None] = []
        text = rules.strip() or "DEFAULT"
        pos = 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise ConfigError(f"Invalid value {rules} for configuration ssl.principal.mapping.rules: "
                                  f"invalid rule at {text[pos:]!r}")
            if m.group(4):
                self.rules.append(None)
            else:
                try:
                    pattern = re.compile(m.group(1))
                except re.error as e:
                    raise ConfigError(f"Invalid value {rules} for configuration ssl.principal.mapping.rules: "
                                      f"{e}") from None
                # Java's $1 back-references → Python's \g<1>
                replacement = re.sub(r"\$(\d+)", r"\\g<\1>", m.group(2))
                self.rules.append((pattern, replacement, m.group(3)))
            pos = m.end()

    def name(self, dn: str) -> str:
        for rule in self.rules:
            if rule is None:
                return dn
            pattern, replacement, case = rule
            match = pattern.fullmatch(dn)
            if match is not None:
                out = match.expand(replacement)
                return out.lower() if case == "L" else out.upper() if case == "U" else out
        return dn
