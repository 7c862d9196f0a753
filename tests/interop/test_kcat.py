"""kcat (Debian package) against a strom broker subprocess: metadata, produce, consume."""

from __future__ import annotations

import shutil
import subprocess

import pytest

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]


@pytest.fixture(autouse=True)
def _need_kcat() -> None:
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (make test installs it with apt-get)")


def test_kcat_metadata_produce_consume(broker) -> None:  # type: ignore[no-untyped-def]
    lines = "\n".join(f"key{i}:value-{i}" for i in range(200)) + "\n"
    subprocess.run(["kcat", "-b", broker.bootstrap, "-P", "-t", "kcat-topic", "-K", ":", "-z", "snappy"],
                   input=lines.encode(), check=True, timeout=60)
    out = subprocess.run(["kcat", "-b", broker.bootstrap, "-L"], capture_output=True, check=True, timeout=30).stdout
    assert b'topic "kcat-topic" with 1 partitions' in out
    assert b"broker 1 at 127.0.0.1:" in out
    got = subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", "kcat-topic", "-o", "beginning", "-e",
                          "-f", "%k=%s@%o\n"], capture_output=True, check=True, timeout=60).stdout.decode()
    rows = got.strip().splitlines()
    assert rows == [f"key{i}=value-{i}@{i}" for i in range(200)]
