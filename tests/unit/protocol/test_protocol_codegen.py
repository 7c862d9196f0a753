"""The generator on synthetic message definitions: naming rules, struct disambiguation. The checks against
Kafka's own definitions are in ``test_protocol_codegen_check.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.codegen.emit import ModuleEmitter
from tools.codegen.spec import parse_message, snake

pytestmark = pytest.mark.unit






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
