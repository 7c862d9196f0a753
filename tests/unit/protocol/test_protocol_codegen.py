"""The generator: committed output is up to date, deterministic, naming rules, struct disambiguation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tools.codegen.__main__ import DEFAULT_SPEC_DIR, REPO, generate, main
from tools.codegen.emit import ModuleEmitter
from tools.codegen.spec import parse_message, snake

pytestmark = pytest.mark.unit

needs_spec = pytest.mark.skipif(not (DEFAULT_SPEC_DIR / "messages").is_dir(), reason="../shared not present")


@needs_spec
def test_committed_output_is_up_to_date(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["--check", "--spec-dir", str(DEFAULT_SPEC_DIR)])
    out = capsys.readouterr().out
    assert rc == 0, out


@needs_spec
def test_check_mode_reports_stale_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = generate(DEFAULT_SPEC_DIR)
    for rel, content in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(content, encoding="utf-8")
    assert main(["--check", "--spec-dir", str(DEFAULT_SPEC_DIR), "--repo", str(tmp_path)]) == 0
    stale = tmp_path / "strom/protocol/messages/produce.py"
    stale.write_text(stale.read_text() + "# edited\n")
    (tmp_path / "strom/protocol/messages/metadata.py").unlink()
    capsys.readouterr()
    assert main(["--check", "--spec-dir", str(DEFAULT_SPEC_DIR), "--repo", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "produce.py" in out and "metadata.py" in out and "fetch.py" not in out
    assert main(["--spec-dir", str(DEFAULT_SPEC_DIR), "--repo", str(tmp_path)]) == 0
    assert main(["--check", "--spec-dir", str(DEFAULT_SPEC_DIR), "--repo", str(tmp_path)]) == 0


@needs_spec
def test_generation_is_deterministic_and_marked() -> None:
    a = generate(DEFAULT_SPEC_DIR)
    b = generate(DEFAULT_SPEC_DIR)
    assert a == b
    for rel, content in a.items():
        if rel.parts[:3] == ("strom", "protocol", "messages") or rel.name == "api_keys.py":
            assert content.startswith("# GENERATED") and "Do not edit" in content.splitlines()[0]
        compile(content, str(rel), "exec")
    assert (REPO / "strom/common/error_codes.py").read_text(encoding="utf-8") == a[Path("strom/common/error_codes.py")]


@pytest.mark.parametrize("name, expected", [
    ("TimeoutMs", "timeout_ms"), ("TopicData", "topic_data"), ("ErrorCode", "error_code"),
    ("ProducerId", "producer_id"), ("ApiKeys", "api_keys"), ("TopicId", "topic_id"),
    ("ClientSoftwareName", "client_software_name"), ("V3AndBelowTransactionalId", "v3_and_below_transactional_id"),
    ("ResultsByTopicV3AndBelow", "results_by_topic_v3_and_below"), ("protocolType", "protocol_type"),
    ("IsrNodes", "isr_nodes"), ("ZkMigrationReady", "zk_migration_ready"),
])
def test_snake_case(name: str, expected: str) -> None:
    assert snake(name) == expected


SYNTHETIC = {
    "apiKey": 500, "type": "request", "name": "DupRequest", "validVersions": "0-1", "flexibleVersions": "1+",
    "fields": [
        {"name": "A", "type": "[]Item", "versions": "0+", "fields": [
            {"name": "X", "type": "int32", "versions": "0+"}]},
        {"name": "B", "type": "[]Item", "versions": "0+", "fields": [
            {"name": "Y", "type": "string", "versions": "0+"}]},
        {"name": "C", "type": "Common", "versions": "1+"},
        {"name": "Class", "type": "int8", "versions": "0+"},
        {"name": "Encode", "type": "bool", "versions": "0+"},
    ],
    "commonStructs": [{"name": "Common", "versions": "0+", "fields": [
        {"name": "Item", "type": "[]Item", "versions": "0+", "fields": [
            {"name": "X", "type": "int32", "versions": "0+"}]}]}],
}


def test_struct_name_clash_is_disambiguated(tmp_path: Path) -> None:
    path = tmp_path / "DupRequest.json"
    path.write_text("// license\n" + json.dumps(SYNTHETIC, indent=1))
    msg = parse_message(path)
    names = [s.name for s in msg.structs]
    # first Item keeps its name; the different second one is renamed after its parent; the identical
    # third definition (inside Common) shares the first class
    assert names == ["Item", "DupRequestItem", "Common"]
    assert [f.py_name for f in msg.top.fields] == ["a", "b", "c", "class_", "encode_"]
    src = ModuleEmitter("synthetic", [msg]).render()
    ns: dict = {}
    exec(compile(src, "dup.py", "exec"), ns)
    cls = ns["DupRequest"]
    obj = cls(a=[cls.Item(x=1)], b=[cls.DupRequestItem(y="q")], c=cls.Common(item=[cls.Item(x=2)]), class_=3,
              encode_=True)
    for v in (0, 1):
        back = cls.decode(obj.encode(v), v)
        assert back.a == obj.a and back.b == obj.b and back.class_ == 3
    assert cls.decode(obj.encode(1), 1) == obj


@needs_spec
def test_spec_dir_copy_generates_same(tmp_path: Path) -> None:
    copy = tmp_path / "kafka-protocol"
    shutil.copytree(DEFAULT_SPEC_DIR, copy)
    assert generate(copy) == generate(DEFAULT_SPEC_DIR)
