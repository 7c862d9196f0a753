"""Hypothesis strategies for generated message classes, built from their ``FIELDS`` schema."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import strategies as st

from strom.protocol.base import FieldInfo, versions_contain

_INTS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}

_uuids = st.one_of(st.just(uuid.UUID(int=0)), st.integers(0, 2**128 - 1).map(lambda i: uuid.UUID(int=i)))
_text = st.text(max_size=12)
_binary = st.binary(max_size=16)


def _primitive(t: str) -> st.SearchStrategy[Any]:
    if t in _INTS:
        lo, hi = _INTS[t]
        return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, -1 if lo < 0 else 1]))
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "uuid":
        return _uuids
    if t == "string":
        return _text
    if t in ("bytes", "records"):
        return _binary
    raise ValueError(t)


def field_strategy(cls: type, f: FieldInfo, version: int) -> st.SearchStrategy[Any]:
    is_array = f.type.startswith("[]")
    elem = f.type[2:] if is_array else f.type
    if f.struct is not None:
        base = struct_strategy(f.struct, version)
    else:
        base = _primitive(elem)
    if is_array:
        base = st.lists(base, max_size=3)
    if versions_contain(f.nullable_versions, version):
        base = st.one_of(st.none(), base)
    return base


def struct_strategy(cls: type, version: int) -> st.SearchStrategy[Any]:
    """Instances of ``cls`` with every field that exists in ``version`` drawn; others keep their default."""
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    known_tags: set[int] = set()
    for f in cls.FIELDS:
        if not (versions_contain(f.versions, version) or versions_contain(f.tagged_versions, version)):
            continue
        kwargs[f.name] = field_strategy(cls, f, version)
        if f.tag is not None and versions_contain(f.tagged_versions, version):
            known_tags.add(f.tag)
    fmin = cls.FLEXIBLE_VERSIONS_MIN
    if fmin is not None and version >= fmin:
        tags = st.integers(0, 300).filter(lambda t: t not in known_tags)
        kwargs["unknown_tagged_fields"] = st.dictionaries(tags, st.binary(max_size=6), max_size=2)
    return st.builds(cls, **kwargs)
