"""The read side shared by every client config (Kafka's ``AbstractConfig``).

A subclass parses and validates in its constructor, then stores ``_originals`` (the keys the user gave) and
``_values`` (every key, dotted, with its effective value); lookups accept dotted or snake_case names through the
subclass's ``CONFIG_DEF``. Immutable after construction, so thread-safe.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping
from typing import Any, ClassVar

from strom.common.errors import ConfigError
from strom.config.config_def import ConfigDef

__all__ = ["AbstractConfig"]


class AbstractConfig:
    CONFIG_DEF: ClassVar[ConfigDef]
    _values: Mapping[str, Any]
    _originals: Mapping[str, Any]

    @classmethod
    def merge_originals(cls, configs: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The user's dict and keyword settings as one dotted-key dict; a key given twice differently is an error."""
        merged = dict(cls.CONFIG_DEF.normalize(dict(configs or {})))
        for name, value in cls.CONFIG_DEF.normalize(dict(kwargs)).items():
            if name in merged and merged[name] != value:
                raise ConfigError(f"Configuration {name} is given twice with different values")
            merged[name] = value
        return merged

    @property
    def values(self) -> Mapping[str, Any]:
        """Read-only mapping of every key (dotted) to its effective value."""
        return self._values

    @property
    def originals(self) -> Mapping[str, Any]:
        """The keys (dotted) the user supplied, with the raw values."""
        return self._originals

    def __getitem__(self, name: str) -> Any:
        canonical = self.CONFIG_DEF.canonical_name(name)
        if canonical is None:
            raise KeyError(name)
        return self._values[canonical]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.CONFIG_DEF.canonical_name(name) is not None

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    def keys(self) -> KeysView[str]:
        return self._values.keys()

    def items(self) -> ItemsView[str, Any]:
        return self._values.items()

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        shown = {k: v for k, v in self._values.items() if not k.startswith(("ssl.", "sasl."))}
        return f"{type(self).__name__}({shown!r})"
