"""KafkaPrincipal parsing and ssl.principal.mapping.rules (Kafka's SslPrincipalMapper)."""

from __future__ import annotations

import pytest

from strom.common.errors import ConfigError
from strom.server.security.principal import KafkaPrincipal, SslPrincipalMapper, distinguished_name


def test_parse_principal() -> None:
    assert KafkaPrincipal.parse("User:alice") == KafkaPrincipal("User", "alice")
    assert str(KafkaPrincipal.parse("User:CN=a,O=b")) == "User:CN=a,O=b"
    with pytest.raises(ValueError, match="type:name"):
        KafkaPrincipal.parse("alice")


def test_dn_is_printed_most_specific_first_as_java_does() -> None:
    cert = {"subject": ((("countryName", "DE"),), (("organizationName", "Acme, Inc"),), (("commonName", "alice"),))}
    assert distinguished_name(cert) == "CN=alice,O=Acme\\, Inc,C=DE"


def test_mapping_rules_in_order_with_case_and_default() -> None:
    m = SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L,DEFAULT")
    assert m.name("CN=kafka-svc,OU=ServiceUsers,O=Acme") == "kafka-svc"
    assert m.name("CN=Bob,OU=Eng,O=Acme") == "bob@eng"
    assert m.name("CN=carol") == "CN=carol"
    assert SslPrincipalMapper("RULE:^CN=(.*)$/$1/U").name("CN=dave") == "DAVE"
    assert SslPrincipalMapper("").name("CN=x") == "CN=x"


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*$/$1/", "NONSENSE", "RULE:a/b/X"])
def test_bad_rules_are_config_errors(rules: str) -> None:
    with pytest.raises(ConfigError, match="ssl.principal.mapping.rules"):
        SslPrincipalMapper(rules)
