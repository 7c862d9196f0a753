"""ConfigDef: typed keys, string conversion, validators, snake_case aliases and Kafka's error wording."""

from __future__ import annotations

import pytest

from strom.common.errors import ConfigError
from strom.config.common_client_configs import parse_bootstrap_servers
from strom.config.config_def import (
    NO_DEFAULT,
    CaseInsensitiveValidString,
    ConfigDef,
    ConfigType,
    Importance,
    NonEmptyString,
    Password,
    Range,
    ValidString,
    resolve_class,
)

pytestmark = pytest.mark.unit


def make_def() -> ConfigDef:
    d = ConfigDef()
    d.define("linger.ms", ConfigType.LONG, 0, Range.at_least(0), Importance.MEDIUM, "linger")
    d.define("batch.size", ConfigType.INT, 16384, Range.between(0, 1 << 20))
    d.define("enable.idempotence", ConfigType.BOOLEAN, True)
    d.define("ratio", ConfigType.DOUBLE, 0.5)
    d.define("hosts", ConfigType.LIST, [])
    d.define("name", ConfigType.STRING, "x", NonEmptyString())
    d.define("mode", ConfigType.STRING, "a", ValidString.in_("a", "b"))
    d.define("proto", ConfigType.STRING, "PLAIN", CaseInsensitiveValidString.in_("PLAIN", "SSL"))
    d.define("secret", ConfigType.PASSWORD, None)
    d.define("cls", ConfigType.CLASS, None)
    d.define("required.key", ConfigType.STRING)
    return d


def test_defaults_and_required() -> None:
    """SPEC §3 / §18 item 1 (mechanism): defaults fill unset keys; a key without default is required."""
    d = make_def()
    with pytest.raises(ConfigError, match='Missing required configuration "required.key" which has no default value.'):
        d.parse({})
    values = d.parse({"required.key": "v"})
    assert values["linger.ms"] == 0
    assert values["batch.size"] == 16384
    assert values["enable.idempotence"] is True
    assert values["hosts"] == []
    assert values["secret"] is None
    assert d.key("required.key").default is NO_DEFAULT


def test_string_conversion_to_declared_types() -> None:
    """DESIGN §1 config: strings such as "5", "true", "a,b" convert to the declared type (no §18 item)."""
    d = make_def()
    v = d.parse({"required.key": "v", "linger.ms": "5", "batch.size": " 100 ", "enable.idempotence": "FALSE",
                 "ratio": "0.25", "hosts": "a:1, b:2", "name": "  n  ", "secret": "pw"})
    assert v["linger.ms"] == 5
    assert v["batch.size"] == 100
    assert v["enable.idempotence"] is False
    assert v["ratio"] == 0.25
    assert v["hosts"] == ["a:1", "b:2"]
    assert v["name"] == "n"  # Kafka trims strings
    assert isinstance(v["secret"], Password) and v["secret"].value == "pw"
    assert "pw" not in repr(v["secret"]) and str(v["secret"]) == "[hidden]"


def test_snake_case_aliases_and_duplicates() -> None:
    """DESIGN §1 config: snake_case aliases (linger_ms ↔ linger.ms); conflicting duplicates rejected."""
    d = make_def()
    assert d.parse({"required_key": "v", "linger_ms": 7})["linger.ms"] == 7
    assert d.parse({"required.key": "v", "linger_ms": 7, "linger.ms": 7})["linger.ms"] == 7
    with pytest.raises(ConfigError, match="linger.ms is given twice"):
        d.parse({"required.key": "v", "linger_ms": 7, "linger.ms": 8})


def test_unknown_key_rejected_with_suggestion() -> None:
    """DESIGN §1 config: unknown keys are rejected naming the key (Kafka only logs them)."""
    d = make_def()
    with pytest.raises(ConfigError, match=r"Unknown configuration 'linger.mss' \(did you mean 'linger.ms'\?\)"):
        d.parse({"required.key": "v", "linger.mss": 1})
    with pytest.raises(ConfigError, match="Unknown configuration 'zzz'"):
        d.parse({"required.key": "v", "zzz": 1})


@pytest.mark.parametrize("key, value, message", [
    ("linger.ms", -1, "Invalid value -1 for configuration linger.ms: Value must be at least 0"),
    ("linger.ms", "abc", "Invalid value abc for configuration linger.ms: Not a number of type LONG"),
    ("linger.ms", 1.5, "Invalid value 1.5 for configuration linger.ms: Not a number of type LONG"),
    ("linger.ms", True, "Invalid value True for configuration linger.ms: Not a number of type LONG"),
    ("batch.size", 2**31, f"Invalid value {2**31} for configuration batch.size: Not a number of type INT"),
    ("batch.size", 2**21, f"Invalid value {2**21} for configuration batch.size: Value must be no more than"),
    ("enable.idempotence", "yes",
     "Invalid value yes for configuration enable.idempotence: Expected value to be either true or false"),
    ("enable.idempotence", 1,
     "Invalid value 1 for configuration enable.idempotence: Expected value to be either true or false"),
    ("ratio", "x", "Invalid value x for configuration ratio: Not a number of type DOUBLE"),
    ("name", "", "Invalid value  for configuration name: String may not be empty"),
    ("name", 5, "Invalid value 5 for configuration name: Expected value to be a string, but it was a int"),
    ("mode", "c", "Invalid value c for configuration mode: String must be one of: a, b"),
    ("proto", "tls", "Invalid value tls for configuration proto: String must be one of (case insensitive)"),
    ("linger.ms", None, "Invalid value None for configuration linger.ms: Value must be non-null"),
    ("cls", "no.such.Module", "Invalid value no.such.Module for configuration cls: Class no.such.Module cannot be"),
])
def test_bad_values_name_the_key(key: str, value: object, message: str) -> None:
    """DESIGN §1 config: wrong types / out-of-range values raise ConfigError in Kafka's wording."""
    with pytest.raises(ConfigError) as info:
        make_def().parse({"required.key": "v", key: value})
    assert str(info.value).startswith(message)


def test_case_insensitive_valid_string_accepts_other_case() -> None:
    """ConfigDef.CaseInsensitiveValidString semantics (no §18 item)."""
    assert make_def().parse({"required.key": "v", "proto": "ssl"})["proto"] == "ssl"


def test_class_type_resolves_dotted_paths_and_java_names() -> None:
    """SPEC §5.4 / §2.1 step 5: CLASS configs accept dotted paths, Java class names and instances."""
    from strom.common.serialization import IntegerSerializer, StringSerializer

    d = make_def()
    assert d.parse({"required.key": "v", "cls": "strom.common.serialization.StringSerializer"})["cls"] \
        is StringSerializer
    assert d.parse({"required.key": "v", "cls": "org.apache.kafka.common.serialization.IntegerSerializer"})["cls"] \
        is IntegerSerializer
    instance = StringSerializer()
    assert d.parse({"required.key": "v", "cls": instance})["cls"] is instance
    assert resolve_class("strom.producer.partitioner.DefaultPartitioner").__name__ == "DefaultPartitioner"


def test_define_twice_and_bad_default_rejected() -> None:
    """ConfigDef declaration errors (no §18 item)."""
    d = ConfigDef()
    d.define("a", ConfigType.INT, 1)
    with pytest.raises(ValueError):
        d.define("a", ConfigType.INT, 1)
    with pytest.raises(ConfigError):
        d.define("b", ConfigType.INT, -5, Range.at_least(0))


def test_documentation_table() -> None:
    """ConfigDef documentation output (no §18 item)."""
    table = make_def().to_markdown()
    assert "| `linger.ms` | long | 0 | [0,...] | medium | linger |" in table
    assert "(required)" in table


def test_parse_bootstrap_servers() -> None:
    """SPEC §2.1 step 9: bootstrap.servers parsed and validated (Kafka's messages)."""
    assert parse_bootstrap_servers(["h1:9092", " [::1]:9093 ", ""]) == [("h1", 9092), ("::1", 9093)]
    with pytest.raises(ConfigError, match="Invalid url in bootstrap.servers: h1"):
        parse_bootstrap_servers(["h1"])
    with pytest.raises(ConfigError, match="Invalid url in bootstrap.servers: h:99999"):
        parse_bootstrap_servers(["h:99999"])
    with pytest.raises(ConfigError, match="No resolvable bootstrap urls given in bootstrap.servers"):
        parse_bootstrap_servers([])
