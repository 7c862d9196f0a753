"""Production code never imports the test helpers: every module under strom/ except strom/testing is checked
for ``import strom.testing...`` / ``from strom.testing... import`` / ``from strom import testing``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

STROM = Path(__file__).resolve().parents[2] / "strom"


def find_testing_imports(source: str) -> list[str]:
    """The ``strom.testing`` imports in ``source`` (as written), wherever they are (top level, functions)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name == "strom.testing" or a.name.startswith("strom.testing.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "strom.testing" or node.module.startswith("strom.testing."):
                found.append(node.module)
            elif node.module == "strom":
                found += [f"strom.{a.name}" for a in node.names if a.name == "testing"]
    return found


def test_the_check_sees_every_import_form() -> None:
    assert find_testing_imports("import strom.testing.mock_time\n") == ["strom.testing.mock_time"]
    assert find_testing_imports("def f():\n    from strom.testing.raw_client import RawClient\n") == [
        "strom.testing.raw_client"]
    assert find_testing_imports("from strom import testing, common\n") == ["strom.testing"]
    assert find_testing_imports('"""see strom.testing.mock_time"""\nimport strom.common\n') == []


def test_no_production_module_imports_strom_testing() -> None:
    offenders = {}
    for path in sorted(STROM.rglob("*.py")):
        if path.relative_to(STROM).parts[0] == "testing":
            continue
        found = find_testing_imports(path.read_text(encoding="utf-8"))
        if found:
            offenders[str(path.relative_to(STROM.parent))] = found
    assert offenders == {}
