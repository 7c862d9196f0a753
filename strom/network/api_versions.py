"""What each broker supports: ApiVersions bookkeeping and version negotiation.

Kafka counterparts: ``NodeApiVersions`` (per node: api key → supported range; ``latest_usable_version``
intersects it with the client's range), ``ApiVersions`` (node → ``NodeApiVersions``, thread-safe) and the
client half of KIP-511 (ApiVersions fallback).

Negotiation (NetworkClient): after connecting, send ApiVersionsRequest v3. A broker that does not support
that version answers ``UNSUPPORTED_VERSION`` and (Kafka ≥ 2.4) lists the ApiVersions range it supports; the
client retries with that range's maximum (v0 when the body says nothing). The body of that error answer is
read leniently: real brokers use the v0 layout, librdkafka's mock cluster a nonstandard one
(``0023 01 0012 0000 0002 00 00000000``), so :func:`decode_api_versions_response` falls back to scanning for
the ApiVersions entry. For every API the client then uses the highest version both sides support, capped by
the versions strom's generated codecs implement (:data:`CLIENT_VERSIONS`).
"""

from __future__ import annotations

import struct
import threading
from typing import Any

from strom.common.error_codes import UnsupportedVersionError
from strom.protocol.api_keys import ApiKey
from strom.protocol.connection import decode_api_versions_response
from strom.protocol.messages import REQUESTS

__all__ = [
    "NodeApiVersions",
    "ApiVersions",
    "api_display_name",
    "CLIENT_VERSIONS",
    "client_version_range",
    "decode_api_versions_response",
    "API_VERSIONS_REQUEST_VERSION",
]

API_VERSIONS_REQUEST_VERSION = 3
_HHH = struct.Struct(">hhh")
_H = struct.Struct(">h")


def client_version_range(api_key: int) -> tuple[int, int]:
    """The versions strom's codecs implement for ``api_key`` (the unstable latest version excluded)."""
    cls = REQUESTS[api_key]
    lo, hi = cls.VALID_VERSIONS
    if getattr(cls, "LATEST_VERSION_UNSTABLE", False):
        hi -= 1
    return lo, hi


CLIENT_VERSIONS: dict[int, tuple[int, int]] = {key: client_version_range(key) for key in REQUESTS}


def api_display_name(api_key: int) -> str:
    """Kafka's name of an API (``ApiKeys.name``: ``Produce``, ``ApiVersions``), from the message definitions."""
    cls = REQUESTS.get(api_key)
    return cls.NAME.removesuffix("Request") if cls is not None else f"UNKNOWN({api_key})"


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


class NodeApiVersions:
    """The API versions one node supports. Immutable after construction; thread-safe."""

    __slots__ = ("_supported",)

    def __init__(self, supported: dict[int, tuple[int, int]]) -> None:
        self._supported = dict(supported)

    @classmethod
    def from_response(cls, response: Any) -> NodeApiVersions:
        return cls({a.api_key: (a.min_version, a.max_version) for a in response.api_keys})

    @classmethod
    def create(cls, overrides: dict[int, tuple[int, int]] | None = None) -> NodeApiVersions:
        """Everything strom implements (tests, MockClient), with optional per-API overrides."""
        supported = dict(CLIENT_VERSIONS)
        supported.update(overrides or {})
        return cls(supported)

    def supports(self, api_key: int) -> bool:
        return api_key in self._supported

    def api_version(self, api_key: int) -> tuple[int, int] | None:
        return self._supported.get(api_key)

    def latest_usable_version(self, api_key: int, oldest_allowed: int | None = None,
                              latest_allowed: int | None = None) -> int:
        """The highest version in both the node's range and ``[oldest_allowed, latest_allowed]`` (default:
        what strom implements). Raises :class:`UnsupportedVersionError` when they do not intersect."""
        supported = self._supported.get(api_key)
        if supported is None:
            raise UnsupportedVersionError(f"The node does not support {_api_name(api_key)}")
        if oldest_allowed is None or latest_allowed is None:
            lo, hi = CLIENT_VERSIONS.get(api_key, (0, 0x7FFF))
            oldest_allowed = lo if oldest_allowed is None else oldest_allowed
            latest_allowed = hi if latest_allowed is None else latest_allowed
        lo = max(supported[0], oldest_allowed)
        hi = min(supported[1], latest_allowed)
        if lo > hi:
            raise UnsupportedVersionError(
                f"The broker does not support {_api_name(api_key)} with version in range "
                f"[{oldest_allowed},{latest_allowed}]. The supported range is [{supported[0]},{supported[1]}].")
        return hi

    def items(self) -> list[tuple[int, tuple[int, int]]]:
        return sorted(self._supported.items())

    def to_text(self, line_breaks: bool = False) -> str:
        """Kafka's ``NodeApiVersions.toString(lineBreaks)``, as kafka-broker-api-versions.sh prints it: per API
        key in ascending order ``Name(key): min to max`` (one number when they are equal) and what this client
        would use, ``[usable: v]`` or ``[unusable: node too new|old]``; ``UNKNOWN(key)`` for keys this client
        does not know; ``Name(key): UNSUPPORTED`` for APIs this client knows and the node does not list."""
        texts: dict[int, str] = {}
        for key, (lo, hi) in self._supported.items():
            versions = str(lo) if lo == hi else f"{lo} to {hi}"
            if key not in REQUESTS:
                texts[key] = f"UNKNOWN({key}): {versions}"
                continue
            client_lo, client_hi = CLIENT_VERSIONS[key]
            if client_hi < lo:
                usable = "[unusable: node too new]"
            elif hi < client_lo:
                usable = "[unusable: node too old]"
            else:
                usable = f"[usable: {min(client_hi, hi)}]"
            texts[key] = f"{api_display_name(key)}({key}): {versions} {usable}"
        for key in REQUESTS:
            texts.setdefault(key, f"{api_display_name(key)}({key}): UNSUPPORTED")
        body = (",\n\t" if line_breaks else ", ").join(texts[k] for k in sorted(texts))
        return f"(\n\t{body}\n)" if line_breaks else f"({body})"

    def __repr__(self) -> str:
        return self.to_text()


class ApiVersions:
    """Node id → :class:`NodeApiVersions` (Kafka's ``ApiVersions``). Thread-safe."""

    def __init__(self) -> None:
        self._node_api_versions: dict[Any, NodeApiVersions] = {}
        self._lock = threading.Lock()

    def update(self, node_id: Any, node_api_versions: NodeApiVersions) -> None:
        with self._lock:
            self._node_api_versions[node_id] = node_api_versions

    def remove(self, node_id: Any) -> None:
        with self._lock:
            self._node_api_versions.pop(node_id, None)

    def get(self, node_id: Any) -> NodeApiVersions | None:
        return self._node_api_versions.get(node_id)

    def all(self) -> dict[Any, NodeApiVersions]:
        with self._lock:
            return dict(self._node_api_versions)

    def max_usable_produce_magic(self) -> int:
        """strom writes record batch v2 only (brokers ≥ 0.11)."""
        return 2
