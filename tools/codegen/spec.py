"""Reads Kafka's message-definition JSON files into a small model the emitter walks.

Struct naming: every struct of a message (inline ``fields`` or ``commonStructs``) becomes a class reachable
as an attribute of the top-level message class under its JSON struct type name. If two *different*
definitions in one message share a name, the later one (in file order: fields depth-first, then
commonStructs) is renamed ``<ParentStructName><Name>`` (then suffixed ``2``, ``3``... if still taken);
identical duplicate definitions share one class.
"""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_VERSION = 0x7FFF

PRIMITIVES = {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "uuid", "string",
              "bytes", "records"}
FIXED = {"bool": "?", "int8": "b", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I", "int64": "q",
         "float64": "d", "uuid": "16s"}
FIXED_SIZE = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8,
              "float64": 8, "uuid": 16}

# Attribute names used by the generated classes / base class that a field must not shadow.
RESERVED = {"unknown_tagged_fields", "encode", "decode", "encode_into", "decode_from", "to_dict", "is_flexible",
            "API_KEY", "NAME", "VALID_VERSIONS", "FLEXIBLE_VERSIONS_MIN", "LATEST_VERSION_UNSTABLE", "FIELDS"}


@dataclass(frozen=True)
class Versions:
    lo: int
    hi: int  # inclusive; lo > hi means empty

    @staticmethod
    def parse(text: str | None) -> Versions:
        if text is None or text == "none":
            return NONE
        text = text.strip()
        if text.endswith("+"):
            return Versions(int(text[:-1]), MAX_VERSION)
        if "-" in text:
            lo, hi = text.split("-")
            return Versions(int(lo), int(hi))
        return Versions(int(text), int(text))

    @property
    def empty(self) -> bool:
        return self.lo > self.hi

    def __contains__(self, v: int) -> bool:
        return self.lo <= v <= self.hi

    def intersect(self, other: Versions) -> Versions:
        return Versions(max(self.lo, other.lo), min(self.hi, other.hi))

    def as_tuple(self) -> tuple[int, int] | None:
        return None if self.empty else (self.lo, self.hi)


NONE = Versions(1, 0)


def snake(name: str) -> str:
    """``TopicId`` -> ``topic_id``; ``ClientSoftwareName`` -> ``client_software_name``;
    ``V3AndBelowTopics`` -> ``v3_and_below_topics``; ``protocolType`` -> ``protocol_type``."""
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    s = re.sub(r"(?<=[A-Z])(?=[A-Z][a-z])", "_", s)
    return s.lower()


@dataclass
class FieldSpec:
    json_name: str
    py_name: str
    type: str  # full JSON type string
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default_raw: Any
    flexible_override: Versions | None
    about: str
    struct: StructSpec | None = None  # element/field struct

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def elem_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.struct is not None

    def present(self, v: int) -> bool:
        return v in self.versions or v in self.tagged


@dataclass
class StructSpec:
    name: str  # class name (possibly disambiguated)
    json_name: str
    fields: list[FieldSpec]
    versions: set[int] = field(default_factory=set)  # versions in which the struct can appear
    is_top: bool = False


@dataclass
class MessageSpec:
    name: str
    type: str  # request / response / header / data
    api_key: int | None
    valid: Versions
    flexible: Versions
    latest_unstable: bool
    top: StructSpec
    structs: list[StructSpec]  # nested structs, definition order (children after parents)
    source: str  # file name

    def is_flexible(self, v: int) -> bool:
        return v in self.flexible

    @property
    def versions(self) -> range:
        return range(self.valid.lo, self.valid.hi + 1)


def load_json(path: Path) -> dict[str, Any]:
    """Kafka's JSON files carry ``//`` line comments (never inside strings in this set)."""
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"//.*$", "", text, flags=re.M)
    return json.loads(text)


def _py_names(fields: list[dict[str, Any]]) -> list[str]:
    names: list[str] = []
    for f in fields:
        n = snake(f["name"])
        if keyword.iskeyword(n) or n in RESERVED or n in names:
            n += "_"
        while n in names:
            n += "_"
        names.append(n)
    return names


def parse_message(path: Path) -> MessageSpec:
    raw = load_json(path)
    common_raw = {c["name"]: c for c in raw.get("commonStructs", [])}
    structs: list[StructSpec] = []
    by_name: dict[str, tuple[Any, StructSpec]] = {}

    def make_struct(json_name: str, fields_raw: list[dict[str, Any]], parent: str) -> StructSpec:
        key = json.dumps(fields_raw, sort_keys=True)
        if json_name in by_name:
            prev_key, prev = by_name[json_name]
            if prev_key == key:
                return prev
            name = parent + json_name
            i = 2
            while name in by_name or name in {s.name for s in structs}:
                name = f"{parent}{json_name}{i}"
                i += 1
        else:
            name = json_name
        spec = StructSpec(name=name, json_name=json_name, fields=[])
        by_name[name] = (key, spec)
        structs.append(spec)
        spec.fields = make_fields(fields_raw, name)
        return spec

    common_specs: dict[str, StructSpec] = {}

    def resolve_common(name: str) -> StructSpec:
        if name not in common_specs:
            if name not in common_raw:
                raise ValueError(f"{path.name}: struct type {name} has no fields and is not in commonStructs")
            common_specs[name] = make_struct(name, common_raw[name]["fields"], raw["name"])
        return common_specs[name]

    def make_fields(fields_raw: list[dict[str, Any]], owner: str) -> list[FieldSpec]:
        out = []
        for f, py in zip(fields_raw, _py_names(fields_raw), strict=True):
            tagged = Versions.parse(f.get("taggedVersions"))
            versions = Versions.parse(f["versions"]) if "versions" in f else tagged
            ftype = f["type"]
            elem = ftype[2:] if ftype.startswith("[]") else ftype
            spec = FieldSpec(
                json_name=f["name"],
                py_name=py,
                type=ftype,
                versions=versions,
                nullable=Versions.parse(f.get("nullableVersions")),
                tagged=tagged,
                tag=f.get("tag"),
                default_raw=f.get("default"),
                flexible_override=Versions.parse(f["flexibleVersions"]) if "flexibleVersions" in f else None,
                about=f.get("about", ""),
            )
            if elem not in PRIMITIVES:
                if "fields" in f:
                    spec.struct = make_struct(elem, f["fields"], owner)
                else:
                    spec.struct = resolve_common(elem)
            elif "fields" in f:
                raise ValueError(f"{path.name}: primitive field {f['name']} has fields")
            out.append(spec)
        return out

    top = StructSpec(name=raw["name"], json_name=raw["name"], fields=[], is_top=True)
    top.fields = make_fields(raw["fields"], raw["name"])
    for name in common_raw:  # unused common structs still get a class
        resolve_common(name)

    msg = MessageSpec(
        name=raw["name"],
        type=raw["type"],
        api_key=raw.get("apiKey"),
        valid=Versions.parse(raw["validVersions"]),
        flexible=Versions.parse(raw.get("flexibleVersions", "none")),
        latest_unstable=bool(raw.get("latestVersionUnstable", False)),
        top=top,
        structs=structs,
        source=path.name,
    )
    _compute_struct_versions(msg)
    return msg


def _compute_struct_versions(msg: MessageSpec) -> None:
    msg.top.versions = set(msg.versions)
    # Structs are created parent-first, so one pass in creation order after the top level suffices,
    # except for commonStructs referenced from a later struct; iterate to a fixpoint.
    changed = True
    while changed:
        changed = False
        for s in [msg.top, *msg.structs]:
            for f in s.fields:
                if f.struct is None:
                    continue
                vs = {v for v in s.versions if f.present(v)}
                if not vs <= f.struct.versions:
                    f.struct.versions |= vs
                    changed = True


def load_all(spec_dir: Path) -> list[MessageSpec]:
    paths = sorted((spec_dir / "messages").glob("*.json")) + sorted((spec_dir / "records").glob("*.json"))
    return [parse_message(p) for p in paths]
