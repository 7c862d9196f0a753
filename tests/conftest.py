"""Shared fixtures: a real broker subprocess on loopback."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from strom.testing.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker per test module (data in a fresh temp dir)."""
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("broker") / "data")
    b.start()
    yield b
    b.stop()
    b.cleanup()


@pytest.fixture
def fresh_broker(tmp_path) -> Iterator[BrokerProcess]:  # type: ignore[no-untyped-def]
    """A broker for one test (restart/crash tests)."""
    b = BrokerProcess(data_dir=tmp_path / "data")
    yield b
    b.cleanup()


def have_kcat() -> bool:
    return shutil.which("kcat") is not None
