"""The generator against Kafka's message definitions: the committed output is up to date (``--check``),
generation is deterministic and marked, ``--check`` reports stale files.

These tests need the definitions themselves (``../shared/kafka-protocol``, beside the repository in the
project's workspace; they are not copied into the repository). ``tests/unit/protocol/conftest.py`` collects
this module only when that directory exists, so a plain clone runs the rest of the suite without it (and
without a skip); the generated code it checks is committed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tools.codegen.__main__ import DEFAULT_SPEC_DIR, REPO, generate, main

pytestmark = pytest.mark.unit


def test_committed_output_is_up_to_date(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["--check", "--spec-dir", str(DEFAULT_SPEC_DIR)])
    out = capsys.readouterr().out
    assert rc == 0, out

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

def test_generation_is_deterministic_and_marked() -> None:
    a = generate(DEFAULT_SPEC_DIR)
    b = generate(DEFAULT_SPEC_DIR)
    assert a == b
    for rel, content in a.items():
        if rel.parts[:3] == ("strom", "protocol", "messages") or rel.name == "api_keys.py":
            assert content.startswith("# GENERATED") and "Do not edit" in content.splitlines()[0]
        compile(content, str(rel), "exec")
    assert (REPO / "strom/common/error_codes.py").read_text(encoding="utf-8") == a[Path("strom/common/error_codes.py")]

def test_spec_dir_copy_generates_same(tmp_path: Path) -> None:
    copy = tmp_path / "kafka-protocol"
    shutil.copytree(DEFAULT_SPEC_DIR, copy)
    assert generate(copy) == generate(DEFAULT_SPEC_DIR)

