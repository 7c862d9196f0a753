"""README.md, run as a user would: every ```sh and ```python block, in order, in a fresh copy of the
repository (its own ``.venv`` made by the README's set-up block), against the broker the README starts.

The only rewrites: ``127.0.0.1:9092`` becomes a free port (several test runs share the machine). A shell line
ending in ``&`` is started in the background (and stopped at the end), then the test waits until the port
accepts connections; every other line must exit 0. Python blocks run with the copy's ``.venv/bin/python``.
A README command that stops working fails this test.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from strom.broker_process import free_port
from tests.repository import REPO, copy_repository

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

BLOCK = re.compile(r"^```(sh|python)\n(.*?)^```", re.M | re.S)


def readme_blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(text)]


def shell_lines(block: str) -> list[str]:
    """Logical lines: backslash continuations joined; blank lines and comments dropped."""
    lines, current = [], ""
    for raw in block.splitlines():
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        line = (current + raw).strip()
        current = ""
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"the background command exited with {proc.returncode}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on port {port}"
            time.sleep(0.1)


def test_readme_block_parsing() -> None:
    text = "x\n```sh\na \\\n  b\n# c\n\nd &\n```\n```text\nno\n```\n```python\nprint(1)\n```\n"
    blocks = readme_blocks(text)
    assert [kind for kind, _ in blocks] == ["sh", "python"]
    assert shell_lines(blocks[0][1]) == ["a    b", "d &"]


def test_every_readme_block_runs(tmp_path: Path) -> None:
    work = copy_repository(tmp_path / "clone")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(str(REPO)))  # not this checkout's .venv
    # pip's byte-compiling of what it installs (pyspark's thousands of files) is nothing the blocks check; the
    # interpreter compiles what it imports either way.
    env["PIP_NO_COMPILE"] = "1"
    background: list[subprocess.Popen[bytes]] = []
    outputs: list[str] = []
    blocks = readme_blocks((work / "README.md").read_text(encoding="utf-8"))
    assert [kind for kind, _ in blocks].count("sh") >= 3 and "python" in [kind for kind, _ in blocks]
    try:
        for index, (kind, block) in enumerate(blocks):
            block = block.replace("127.0.0.1:9092", f"127.0.0.1:{port}")
            if kind == "python":
                script = tmp_path / "blocks" / f"block{index}.py"
                script.parent.mkdir(exist_ok=True)
                script.write_text(block, encoding="utf-8")
                commands = [[str(work / ".venv/bin/python"), str(script)]]
            else:
                commands = [["bash", "-o", "pipefail", "-c", line] for line in shell_lines(block)]
            for command in commands:
                if command[-1].endswith("&"):
                    command[-1] = command[-1][:-1].rstrip()
                    proc = subprocess.Popen(command, cwd=work, env=env, start_new_session=True,
                                            stdout=open(tmp_path / f"bg{len(background)}.log", "wb"),
                                            stderr=subprocess.STDOUT)
                    background.append(proc)
                    wait_for_port(port, proc)
                    continue
                done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=600,
                                      stdin=subprocess.DEVNULL)
                assert done.returncode == 0, (f"README block {index} ({kind}) failed: {command[-1]}\n"
                                              f"stdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}")
                outputs.append(done.stdout)
        everything = "\n".join(outputs)
        # What the blocks print shows they did their job, not only that they exited 0.
        assert {"liubei", "guanyu", "zhangfei"} <= set(everything.split())  # console-consumer read them
        assert re.search(r"my-group\s+sanguo\s+\d", everything)  # consumer-groups described the group
        assert "zhaoyun" in everything and "written to partition" in everything  # the Python clients
        assert "Row(value='zhaoyun')" in everything  # Spark read the topic
    finally:
        for proc in background:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in background:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    for proc in background:  # the broker the README started shut down cleanly on SIGTERM
        assert proc.returncode == 0, (tmp_path / "bg0.log").read_text(errors="replace")[-3000:]
