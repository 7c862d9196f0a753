"""Declared configuration: typed keys, defaults, validators and parsing.

Kafka counterpart: ``org.apache.kafka.common.config.ConfigDef`` (+ ``ConfigException`` wording, ``Password``,
``ConfigDef.Range`` / ``ValidString`` / ``NonEmptyString`` ...).

A :class:`ConfigDef` declares every key a component accepts. :meth:`ConfigDef.parse` takes a user mapping whose
keys may be Kafka's dotted names (``linger.ms``) or snake_case aliases (``linger_ms``), converts strings such
as ``"5"``, ``"true"`` or ``"a,b"`` to the declared type, applies defaults and validators, and raises
:class:`~strom.common.errors.ConfigError` naming the key for unknown keys, wrong types, out-of-range values
and missing required keys. Unlike Kafka (which only logs unused keys) unknown keys are an error.

Thread-safety: a ``ConfigDef`` is built once at import time and only read afterwards; ``parse`` is thread-safe.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from strom.common.errors import ConfigError

__all__ = [
    "ConfigType",
    "Importance",
    "NO_DEFAULT",
    "ConfigKey",
    "ConfigDef",
    "Password",
    "Validator",
    "Range",
    "ValidString",
    "CaseInsensitiveValidString",
    "NonEmptyString",
    "NonNullValidator",
    "LambdaValidator",
    "invalid_value",
    "resolve_class",
    "JAVA_CLASS_ALIASES",
    "INT_MIN",
    "INT_MAX",
    "LONG_MIN",
    "LONG_MAX",
]

INT_MIN = -(2**31)
INT_MAX = 2**31 - 1
LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1


class ConfigType(Enum):
    """The value types of Kafka's ``ConfigDef.Type``."""

    BOOLEAN = "BOOLEAN"
    STRING = "STRING"
    INT = "INT"
    SHORT = "SHORT"
    LONG = "LONG"
    DOUBLE = "DOUBLE"
    LIST = "LIST"
    CLASS = "CLASS"
    PASSWORD = "PASSWORD"


class Importance(Enum):
    """Kafka's ``ConfigDef.Importance`` (documentation only)."""

    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class _NoDefault:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()
"""Marker for a required key (Kafka's ``ConfigDef.NO_DEFAULT_VALUE``)."""


def invalid_value(name: str, value: Any, message: str | None = None) -> ConfigError:
    """A :class:`ConfigError` worded like Kafka's ``ConfigException(name, value, message)``."""
    shown = value.__name__ if isinstance(value, type) else value
    text = f"Invalid value {shown} for configuration {name}"
    if message:
        text += f": {message}"
    return ConfigError(text)


class Password:
    """A secret config value; ``str``/``repr`` hide it (Kafka's ``types.Password``)."""

    __slots__ = ("value",)
    HIDDEN = "[hidden]"

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return self.HIDDEN

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Password) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)


# --------------------------------------------------------------------------------------------- validators


class Validator(Protocol):
    """Checks a parsed value (Kafka's ``ConfigDef.Validator``)."""

    def ensure_valid(self, name: str, value: Any) -> None:
        """Raise :class:`ConfigError` (via :func:`invalid_value`) when ``value`` is not acceptable."""


@dataclass(frozen=True, slots=True)
class Range:
    """Numeric range check; ``None`` bound = unbounded (Kafka's ``ConfigDef.Range``)."""

    min: float | None = None
    max: float | None = None

    @classmethod
    def at_least(cls, minimum: float) -> Range:
        return cls(minimum, None)

    @classmethod
    def between(cls, minimum: float, maximum: float) -> Range:
        return cls(minimum, maximum)

    def ensure_valid(self, name: str, value: Any) -> None:
        if value is None:
            raise invalid_value(name, None, "Value must be non-null")
        if self.min is not None and value < self.min:
            raise invalid_value(name, value, f"Value must be at least {self.min}")
        if self.max is not None and value > self.max:
            raise invalid_value(name, value, f"Value must be no more than {self.max}")

    def __str__(self) -> str:
        if self.min is None:
            return f"[...,{self.max}]"
        if self.max is None:
            return f"[{self.min},...]"
        return f"[{self.min},...,{self.max}]"


@dataclass(frozen=True, slots=True)
class ValidString:
    """The value must be one of a fixed set of strings (Kafka's ``ConfigDef.ValidString``)."""

    valid: tuple[str, ...]

    @classmethod
    def in_(cls, *valid: str) -> ValidString:
        return cls(tuple(valid))

    def ensure_valid(self, name: str, value: Any) -> None:
        if value not in self.valid:
            raise invalid_value(name, value, f"String must be one of: {', '.join(self.valid)}")

    def __str__(self) -> str:
        return "[" + ", ".join(self.valid) + "]"


@dataclass(frozen=True, slots=True)
class CaseInsensitiveValidString:
    """Like :class:`ValidString`, ignoring case (Kafka's ``ConfigDef.CaseInsensitiveValidString``)."""

    valid: tuple[str, ...]

    @classmethod
    def in_(cls, *valid: str) -> CaseInsensitiveValidString:
        return cls(tuple(valid))

    def ensure_valid(self, name: str, value: Any) -> None:
        if not isinstance(value, str) or value.upper() not in {v.upper() for v in self.valid}:
            raise invalid_value(name, value, f"String must be one of (case insensitive): {', '.join(self.valid)}")

    def __str__(self) -> str:
        return "(case insensitive) [" + ", ".join(self.valid) + "]"


class NonEmptyString:
    """``None`` is allowed, the empty string is not (Kafka's ``ConfigDef.NonEmptyString``)."""

    __slots__ = ()

    def ensure_valid(self, name: str, value: Any) -> None:
        if value is not None and value == "":
            raise invalid_value(name, value, "String may not be empty")

    def __str__(self) -> str:
        return "non-empty string"


class NonNullValidator:
    """The value may not be ``None`` (Kafka's ``ConfigDef.NonNullValidator``)."""

    __slots__ = ()

    def ensure_valid(self, name: str, value: Any) -> None:
        if value is None:
            raise invalid_value(name, None, "entry must be non null")

    def __str__(self) -> str:
        return "non-null string"


class LambdaValidator:
    """Validator from a function returning an error message (or ``None`` when valid)."""

    __slots__ = ("_check", "_description")

    def __init__(self, check: Callable[[Any], str | None], description: str = "") -> None:
        self._check = check
        self._description = description

    def ensure_valid(self, name: str, value: Any) -> None:
        message = self._check(value)
        if message is not None:
            raise invalid_value(name, value, message)

    def __str__(self) -> str:
        return self._description


# ------------------------------------------------------------------------------------------ class loading

JAVA_CLASS_ALIASES: dict[str, str] = {
    "org.apache.kafka.common.serialization.StringSerializer": "strom.common.serialization.StringSerializer",
    "org.apache.kafka.common.serialization.ByteArraySerializer": "strom.common.serialization.ByteArraySerializer",
    "org.apache.kafka.common.serialization.BytesSerializer": "strom.common.serialization.ByteArraySerializer",
    "org.apache.kafka.common.serialization.ByteBufferSerializer": "strom.common.serialization.ByteArraySerializer",
    "org.apache.kafka.common.serialization.IntegerSerializer": "strom.common.serialization.IntegerSerializer",
    "org.apache.kafka.common.serialization.LongSerializer": "strom.common.serialization.LongSerializer",
    "org.apache.kafka.common.serialization.ShortSerializer": "strom.common.serialization.ShortSerializer",
    "org.apache.kafka.common.serialization.FloatSerializer": "strom.common.serialization.FloatSerializer",
    "org.apache.kafka.common.serialization.DoubleSerializer": "strom.common.serialization.DoubleSerializer",
    "org.apache.kafka.common.serialization.UUIDSerializer": "strom.common.serialization.UUIDSerializer",
    "org.apache.kafka.common.serialization.VoidSerializer": "strom.common.serialization.VoidSerializer",
    "org.apache.kafka.common.serialization.StringDeserializer": "strom.common.serialization.StringDeserializer",
    "org.apache.kafka.common.serialization.ByteArrayDeserializer":
        "strom.common.serialization.ByteArrayDeserializer",
    "org.apache.kafka.common.serialization.BytesDeserializer": "strom.common.serialization.ByteArrayDeserializer",
    "org.apache.kafka.common.serialization.IntegerDeserializer": "strom.common.serialization.IntegerDeserializer",
    "org.apache.kafka.common.serialization.LongDeserializer": "strom.common.serialization.LongDeserializer",
    "org.apache.kafka.common.serialization.ShortDeserializer": "strom.common.serialization.ShortDeserializer",
    "org.apache.kafka.common.serialization.FloatDeserializer": "strom.common.serialization.FloatDeserializer",
    "org.apache.kafka.common.serialization.DoubleDeserializer": "strom.common.serialization.DoubleDeserializer",
    "org.apache.kafka.common.serialization.UUIDDeserializer": "strom.common.serialization.UUIDDeserializer",
    "org.apache.kafka.common.serialization.VoidDeserializer": "strom.common.serialization.VoidDeserializer",
    "org.apache.kafka.clients.producer.internals.DefaultPartitioner": "strom.producer.partitioner.DefaultPartitioner",
    "org.apache.kafka.clients.producer.RoundRobinPartitioner": "strom.producer.partitioner.RoundRobinPartitioner",
    "org.apache.kafka.clients.producer.UniformStickyPartitioner":
        "strom.producer.partitioner.UniformStickyPartitioner",
}
"""Java class names accepted in CLASS/LIST configs, mapped to their strom equivalents (so a Java
``producer.properties`` works unchanged)."""


def resolve_class(name: str, config_name: str | None = None) -> type:
    """Import ``package.module.ClassName`` (or a Java name from :data:`JAVA_CLASS_ALIASES`).

    Raises :class:`ConfigError` naming ``config_name`` when the class cannot be found (Kafka: "Class X cannot
    be found").
    """
    target = JAVA_CLASS_ALIASES.get(name, name)
    module_name, _, attr = target.rpartition(".")
    error = invalid_value(config_name or "class", name, f"Class {name} cannot be found")
    if not module_name or not attr:
        raise error
    try:
        module = importlib.import_module(module_name)
        found = getattr(module, attr)
    except (ImportError, AttributeError):
        raise error from None
    if not isinstance(found, type):
        raise invalid_value(config_name or "class", name, f"{name} is not a class")
    return found


# ------------------------------------------------------------------------------------------ parsing


def _parse_type(name: str, value: Any, typ: ConfigType) -> Any:
    """Convert a user value to ``typ`` (Kafka's ``ConfigDef.parseType``); ``None`` passes through."""
    if value is None:
        return None
    if typ is ConfigType.BOOLEAN:
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            text = value.strip().lower()
            if text in ("true", "false"):
                return text == "true"
        raise invalid_value(name, value, "Expected value to be either true or false")
    if typ is ConfigType.STRING:
        if isinstance(value, str):
            return value.strip()
        raise invalid_value(name, value, f"Expected value to be a string, but it was a {type(value).__name__}")
    if typ in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        lo, hi = {
            ConfigType.INT: (INT_MIN, INT_MAX),
            ConfigType.SHORT: (-(2**15), 2**15 - 1),
            ConfigType.LONG: (LONG_MIN, LONG_MAX),
        }[typ]
        number: int | None = None
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        elif isinstance(value, str):
            try:
                number = int(value.strip())
            except ValueError:
                number = None
        if number is None or not lo <= number <= hi:
            raise invalid_value(name, value, f"Not a number of type {typ.value}")
        return number
    if typ is ConfigType.DOUBLE:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise invalid_value(name, value, "Not a number of type DOUBLE")
    if typ is ConfigType.LIST:
        if isinstance(value, str):
            text = value.strip()
            return [] if not text else [part.strip() for part in text.split(",")]
        if isinstance(value, (list, tuple)):
            return [v.strip() if isinstance(v, str) else v for v in value]
        if isinstance(value, (set, frozenset)):
            return sorted(value)
        raise invalid_value(name, value, "Expected a comma separated list.")
    if typ is ConfigType.CLASS:
        if isinstance(value, str):
            return resolve_class(value.strip(), name)
        # A class object, or an already-built plug-in instance / callable: used as given.
        return value
    if typ is ConfigType.PASSWORD:
        if isinstance(value, Password):
            return value
        if isinstance(value, str):
            return Password(value)
        raise invalid_value(name, value, "Expected value to be a string, but it was a " + type(value).__name__)
    raise AssertionError(f"unknown config type {typ}")  # pragma: no cover


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One declared key (Kafka's ``ConfigDef.ConfigKey``)."""

    name: str
    type: ConfigType
    default: Any
    validator: Validator | None
    importance: Importance
    doc: str
    parser: Callable[[str, Any], Any] | None = None

    @property
    def has_default(self) -> bool:
        return self.default is not NO_DEFAULT

    @property
    def alias(self) -> str:
        """The snake_case keyword spelling (``linger.ms`` → ``linger_ms``)."""
        return self.name.replace(".", "_").replace("-", "_")

    def parse(self, value: Any) -> Any:
        """Convert and validate one value for this key."""
        if self.parser is not None:
            parsed = self.parser(self.name, value)
        else:
            parsed = _parse_type(self.name, value, self.type)
        if parsed is None and self.has_default and self.default is not None:
            raise invalid_value(self.name, None, "Value must be non-null")
        if self.validator is not None:
            self.validator.ensure_valid(self.name, parsed)
        return parsed


class ConfigDef:
    """A set of declared keys (Kafka's ``ConfigDef``). Build once; thread-safe to read."""

    def __init__(self, base: ConfigDef | None = None) -> None:
        self._keys: dict[str, ConfigKey] = dict(base._keys) if base is not None else {}
        self._aliases: dict[str, str] = dict(base._aliases) if base is not None else {}

    def define(
        self,
        name: str,
        type: ConfigType,
        default: Any = NO_DEFAULT,
        validator: Validator | None = None,
        importance: Importance = Importance.MEDIUM,
        doc: str = "",
        *,
        parser: Callable[[str, Any], Any] | None = None,
    ) -> ConfigDef:
        """Declare a key; the default is parsed and validated like a user value. Returns ``self``."""
        if name in self._keys:
            raise ValueError(f"Configuration {name} is defined twice.")
        key = ConfigKey(name, type, default, validator, importance, doc, parser)
        if key.has_default and default is not None:
            key = ConfigKey(name, type, key.parse(default), validator, importance, doc, parser)
        self._keys[name] = key
        self._aliases[key.alias] = name
        return self

    def undefine(self, name: str) -> ConfigDef:
        """Remove a key (used when a component changes a shared key's default). Returns ``self``."""
        key = self._keys.pop(name)
        self._aliases.pop(key.alias, None)
        return self

    def __contains__(self, name: object) -> bool:
        return name in self._keys

    def __iter__(self) -> Iterator[ConfigKey]:
        return iter(self._keys.values())

    def __len__(self) -> int:
        return len(self._keys)

    def names(self) -> list[str]:
        return sorted(self._keys)

    def key(self, name: str) -> ConfigKey:
        return self._keys[name]

    def default_values(self) -> dict[str, Any]:
        """Defaults of every key that has one."""
        return {k.name: k.default for k in self._keys.values() if k.has_default}

    def canonical_name(self, name: str) -> str | None:
        """The dotted Kafka name for ``name`` (dotted or snake_case), or ``None`` if unknown."""
        if name in self._keys:
            return name
        return self._aliases.get(name)

    def normalize(self, props: Mapping[str, Any]) -> dict[str, Any]:
        """Map every key to its dotted name; unknown or duplicated keys raise :class:`ConfigError`."""
        out: dict[str, Any] = {}
        for raw_name, value in props.items():
            if not isinstance(raw_name, str):
                raise ConfigError(f"Configuration names must be strings, got {raw_name!r}")
            name = self.canonical_name(raw_name)
            if name is None:
                raise ConfigError(self._unknown_message(raw_name))
            if name in out and out[name] is not value and out[name] != value:
                raise ConfigError(
                    f"Configuration {name} is given twice with different values ({out[name]!r} and {value!r})"
                )
            out[name] = value
        return out

    def _unknown_message(self, name: str) -> str:
        candidates = list(self._keys) + list(self._aliases)
        close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.8)
        hint = f" (did you mean '{self.canonical_name(close[0])}'?)" if close else ""
        return f"Unknown configuration '{name}'{hint}"

    def parse(self, props: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Parse and validate ``props`` into a dict of every declared key (defaults filled in)."""
        given = self.normalize(props or {})
        values: dict[str, Any] = {}
        for key in self._keys.values():
            if key.name in given and not (given[key.name] is None and not key.has_default):
                values[key.name] = key.parse(given[key.name])
            elif key.has_default:
                default = key.default
                values[key.name] = list(default) if isinstance(default, list) else default
            else:
                raise ConfigError(f'Missing required configuration "{key.name}" which has no default value.')
        return values

    def to_markdown(self, names: Iterable[str] | None = None) -> str:
        """A documentation table of the keys (name, type, default, valid values, importance, doc)."""
        rows = ["| name | type | default | valid values | importance | description |", "|---|---|---|---|---|---|"]
        for name in names or self.names():
            k = self._keys[name]
            default = "(required)" if not k.has_default else ("null" if k.default is None else k.default)
            if isinstance(default, type):
                default = default.__name__
            rows.append(
                f"| `{k.name}` | {k.type.value.lower()} | {default} | {k.validator or ''} | "
                f"{k.importance.value} | {k.doc} |"
            )
        return "\n".join(rows)


def get_configured_instance(spec: Any, config_name: str, configs: Mapping[str, Any] | None, method: str,
                            kind: str) -> Any:
    """A plug-in from a config value (Kafka's ``AbstractConfig.getConfiguredInstance``).

    A class or dotted path is instantiated without arguments and ``configure(configs)`` is called when it has
    one; an instance is used as given. It must have a callable ``method`` (else ``TypeError`` naming ``kind``).
    """
    if isinstance(spec, str):
        spec = resolve_class(spec, config_name)
    if isinstance(spec, type):
        instance = spec()
        configure = getattr(instance, "configure", None)
        if callable(configure):
            configure(dict(configs or {}))
    else:
        instance = spec
    if not callable(getattr(instance, method, None)):
        raise TypeError(f"{spec!r} is not a {kind} (it has no {method}() method)")
    return instance
