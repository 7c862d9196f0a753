"""Fixtures shared by the integration tests: a test PKI, and a broker in this process on an event loop of its own
thread (the standard asyncio loop and uvloop)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.server.broker import BrokerServer
from strom.testing.certs import Pki, make_pki
from tests.integration.in_process_broker import in_process_broker
from tests.integration.test_fetch_zero_copy import _LoopThread


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(params=["asyncio", "uvloop"])
def loop_broker(request: pytest.FixtureRequest, tmp_path: Path, pki: Pki) -> Iterator[tuple[BrokerServer, _LoopThread]]:
    """A broker in this process with a PLAINTEXT and an SSL listener, and the loop thread it runs on."""
    with in_process_broker(request.param, tmp_path / "data", pki) as started:
        yield started
