"""``python -m tools.codegen [--check] [--spec-dir DIR]``: regenerate the protocol modules from Kafka's JSON.

Writes ``strom/protocol/messages/*.py`` (one module per API, headers, the ``records/`` data types and the
``__init__`` registry), ``strom/protocol/api_keys.py`` and ``strom/common/error_codes.py``.
``--check`` writes nothing and exits 1 listing the files that regeneration would change.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.codegen import errors
from tools.codegen.emit import GENERATED_LINE, ModuleEmitter
from tools.codegen.spec import MessageSpec, load_all, snake

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SPEC_DIR = REPO.parent / "shared" / "kafka-protocol"

# records/*.json data types -> module name
DATA_MODULES = {
    "ConsumerProtocolSubscription": "consumer_protocol",
    "ConsumerProtocolAssignment": "consumer_protocol",
    "OffsetCommitKey": "group_coordinator_records",
    "OffsetCommitValue": "group_coordinator_records",
    "GroupMetadataKey": "group_coordinator_records",
    "GroupMetadataValue": "group_coordinator_records",
    "TransactionLogKey": "transaction_log",
    "TransactionLogValue": "transaction_log",
}


def module_of(msg: MessageSpec) -> str:
    if msg.type in ("request", "response"):
        base = msg.name.removesuffix("Request").removesuffix("Response")
        return snake(base)
    if msg.type == "header":
        return "headers_gen"
    return DATA_MODULES.get(msg.name, snake(msg.name))


def _order(msg: MessageSpec) -> tuple[int, str]:
    return ({"request": 0, "response": 1}.get(msg.type, 2), msg.name)


def generate(spec_dir: Path) -> dict[Path, str]:
    """All generated files: ``{path relative to the repo: content}``."""
    msgs = load_all(spec_dir)
    groups: dict[str, list[MessageSpec]] = {}
    for m in msgs:
        groups.setdefault(module_of(m), []).append(m)
    files: dict[Path, str] = {}
    for mod, group in sorted(groups.items()):
        group.sort(key=_order)
        first = group[0]
        if first.type in ("request", "response"):
            doc = (f"Kafka {first.name.removesuffix('Request').removesuffix('Response')} API "
                   f"(key {first.api_key}): request and response codecs.")
        elif first.type == "header":
            doc = "Kafka request and response header codecs (see also ``strom.protocol.headers``)."
        else:
            doc = "Kafka stand-alone data types: " + ", ".join(m.name for m in group) + "."
        files[Path("strom/protocol/messages") / f"{mod}.py"] = ModuleEmitter(doc, group).render()
    files[Path("strom/protocol/messages/__init__.py")] = render_registry(groups)
    files[Path("strom/protocol/api_keys.py")] = render_api_keys(msgs)
    files[Path("strom/common/error_codes.py")] = errors.generate(spec_dir / "errors.tsv")
    return files


def render_registry(groups: dict[str, list[MessageSpec]]) -> str:
    L = [GENERATED_LINE.format(sources="messages/*.json, records/*.json"),
         '"""Generated Kafka message classes and the api-key registry.',
         "",
         "``REQUESTS[api_key]`` / ``RESPONSES[api_key]`` give the request / response class of an API;",
         "``DATA_TYPES[name]`` the stand-alone ``records/`` data types and headers.",
         '"""',
         "",
         "from __future__ import annotations",
         ""]
    names: list[str] = []
    for mod, group in sorted(groups.items()):
        cls = ", ".join(m.name for m in group)
        L.append(f"from strom.protocol.messages.{mod} import {cls}")
        names.extend(m.name for m in group)
    reqs = sorted((m.api_key, m.name) for g in groups.values() for m in g if m.type == "request")
    resps = sorted((m.api_key, m.name) for g in groups.values() for m in g if m.type == "response")
    data = sorted(m.name for g in groups.values() for m in g if m.type in ("data", "header"))
    L.append("")
    L.append("REQUESTS: dict[int, type] = {")
    L.extend(f"    {k}: {n}," for k, n in reqs)
    L.append("}")
    L.append("RESPONSES: dict[int, type] = {")
    L.extend(f"    {k}: {n}," for k, n in resps)
    L.append("}")
    L.append("DATA_TYPES: dict[str, type] = {")
    L.extend(f"    {n!r}: {n}," for n in data)
    L.append("}")
    L.append("")
    L.append("__all__ = [\"REQUESTS\", \"RESPONSES\", \"DATA_TYPES\", " + ", ".join(repr(n) for n in sorted(names)) + "]")
    return "\n".join(L) + "\n"


def render_api_keys(msgs: list[MessageSpec]) -> str:
    reqs = sorted((m.api_key, m.name.removesuffix("Request")) for m in msgs if m.type == "request")
    L = [GENERATED_LINE.format(sources="messages/*Request.json"),
         '"""Kafka API keys (``ApiKeys`` in Kafka): one member per API whose schema is in the spec set."""',
         "",
         "from __future__ import annotations",
         "",
         "from enum import IntEnum",
         "",
         '__all__ = ["ApiKey"]',
         "",
         "",
         "class ApiKey(IntEnum):",
         '    """The INT16 ``request_api_key`` of every request header."""',
         ""]
    for key, name in reqs:
        L.append(f"    {snake(name).upper()} = {key}")
    return "\n".join(L) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.codegen", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if any file would change")
    ap.add_argument("--spec-dir", type=Path, default=DEFAULT_SPEC_DIR, help="kafka-protocol folder")
    ap.add_argument("--repo", type=Path, default=REPO, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    files = generate(args.spec_dir)
    stale: list[Path] = []
    for rel, content in files.items():
        path = args.repo / rel
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if old != content:
            stale.append(rel)
            if not args.check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content, encoding="utf-8")
    # generated modules that no longer correspond to a spec
    msg_dir = args.repo / "strom/protocol/messages"
    expected = {rel.name for rel in files if rel.parent == Path("strom/protocol/messages")}
    for path in sorted(msg_dir.glob("*.py")):
        if path.name not in expected and path.read_text(encoding="utf-8").startswith("# GENERATED"):
            stale.append(path.relative_to(args.repo))
            if not args.check:
                path.unlink()
    if args.check:
        if stale:
            print("generated files out of date (run `python -m tools.codegen`):")
            for rel in stale:
                print(f"  {rel}")
            return 1
        print(f"{len(files)} generated files up to date")
        return 0
    print(f"{len(stale)} of {len(files)} generated files written" if stale else f"{len(files)} files unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
