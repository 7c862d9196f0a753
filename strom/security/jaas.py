"""Kafka's ``sasl.jaas.config`` line: ``<LoginModule> <flag> key="value" ... ;`` (Kafka's ``JaasConfig``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from strom.common.errors import ConfigError

__all__ = ["JaasEntry", "parse_jaas_config", "PLAIN_LOGIN_MODULE", "SCRAM_LOGIN_MODULE"]

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:(?P<semi>;)|(?P<key>[A-Za-z0-9_.$-]+)\s*=\s*(?:"(?P<q>(?:\\.|[^"\\])*)"|(?P<bare>[^\s;"]+))'
                    r'|(?P<word>[A-Za-z0-9_.$-]+))')


@dataclass
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # options hold passwords: never print them
        return f"JaasEntry({self.login_module} {self.flag}, options={sorted(self.options)})"


def parse_jaas_config(text: str, key: str = "sasl.jaas.config") -> JaasEntry:
    """Parse one login module entry. Errors name ``key`` but never echo the value (it carries passwords)."""
    pos, words, options = 0, [], {}
    text = text.strip()
    ended = False
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ConfigError(f"Invalid value for configuration {key}: cannot parse the JAAS entry at "
                              f"character {pos} (expected LoginModule flag key=\"value\" ... ;)")
        pos = m.end()
        if m.group("semi"):
            ended = True
            if text[pos:].strip():
                raise ConfigError(f"Invalid value for configuration {key}: exactly one login module entry is "
                                  "allowed")
            break
        if m.group("key"):
            if len(words) != 2:
                raise ConfigError(f"Invalid value for configuration {key}: expected 'LoginModule flag' before "
                                  "the options")
            value = m.group("q")
            options[m.group("key")] = (re.sub(r"\\(.)", r"\1", value) if value is not None else m.group("bare"))
        else:
            if options or len(words) >= 2:
                raise ConfigError(f"Invalid value for configuration {key}: unexpected word {m.group('word')!r}")
            words.append(m.group("word"))
    if not ended:
        raise ConfigError(f"Invalid value for configuration {key}: the JAAS entry must end with ';'")
    if len(words) != 2:
        raise ConfigError(f"Invalid value for configuration {key}: expected 'LoginModule flag key=\"value\" ... ;'")
    if words[1].lower() not in _FLAGS:
        raise ConfigError(f"Invalid value for configuration {key}: login module control flag must be one of "
                          f"{', '.join(_FLAGS)}, not {words[1]!r}")
    return JaasEntry(words[0], words[1].lower(), options)
