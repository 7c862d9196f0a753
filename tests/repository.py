"""The repository as a user's clone has it, copied for tests that install it (the README's set-up, pip installs):
an install then builds and writes into the copy, never into the checkout the running tests import from (an
editable install rebuilds the C accelerators in place, rewriting the ``.so`` files other test processes have
mapped)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def copy_repository(dest: Path) -> Path:
    """Tracked and new files, no .venv, caches, build output or data dirs."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           check=True, capture_output=True, text=True).stdout.split("\n")
    for name in filter(None, files):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest
