"""Java ``.properties`` files: the format of ``server.properties``, ``--command-config``, ``--producer.config``.

Kafka counterpart: ``org.apache.kafka.common.utils.Utils.loadProps`` (``java.util.Properties.load``): one
``key=value``, ``key:value`` or ``key value`` per logical line; ``#`` / ``!`` start comments; a line ending in
an odd number of backslashes continues on the next (leading blanks of the continuation dropped); escapes
``\\t \\n \\r \\f \\uXXXX`` and ``\\<char>`` (so keys may contain ``\\=``, ``\\:`` or ``\\ ``). The last
occurrence of a key wins.

Pure functions; thread-safe.
"""

from __future__ import annotations

from pathlib import Path

from strom.common.errors import ConfigError

__all__ = ["parse_properties", "load_properties_file", "unescape"]

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_SEPARATORS = "=:"
_BLANKS = " \t\f"


def unescape(text: str) -> str:
    """Resolve Java properties escapes in a key or value."""
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and i + 6 <= n:
            try:
                out.append(chr(int(text[i + 2:i + 6], 16)))
            except ValueError:
                raise ConfigError(f"Malformed \\uxxxx encoding in {text!r}") from None
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip(_BLANKS)
        if pending is None and (not line or line[0] in "#!"):
            continue
        if pending is not None:
            line = pending + line
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = line[:-1]
            continue
        pending = None
        lines.append(line)
    if pending:
        lines.append(pending)
    return lines


def _split(line: str) -> tuple[str, str]:
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in _SEPARATORS or c in _BLANKS:
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(_BLANKS)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_BLANKS)
    return unescape(key), unescape(rest)


def parse_properties(text: str) -> dict[str, str]:
    """Parse ``.properties`` text into an ordered ``{key: value}``. Values keep trailing blanks, like Java."""
    out: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split(line)
        out[key] = value
    return out


def load_properties_file(path: str | Path) -> dict[str, str]:
    """Read and parse a properties file; a missing or unreadable file raises :class:`ConfigError`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"Cannot read config file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"Cannot read config file {path}: not UTF-8 text ({e.reason})") from None
    return parse_properties(text)
