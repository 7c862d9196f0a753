"""A strom broker in this process, on an event loop of its own thread, with a PLAINTEXT and an SSL listener
(tests that reach into the broker's objects while clients talk to it over real sockets)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from strom.server.broker import BrokerServer
from strom.server.broker_config import BrokerConfig
from strom.testing.certs import Pki
from tests.integration.test_fetch_zero_copy import _LoopThread


@contextmanager
def in_process_broker(loop_kind: str, data_dir: Path, pki: Pki, **props: str,
                      ) -> Iterator[tuple[BrokerServer, _LoopThread]]:
    """``loop_kind``: "asyncio" or "uvloop"; ``props``: more server.properties (dots as in Kafka's keys)."""
    runner = _LoopThread(loop_kind)
    b = BrokerServer(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://localhost:0",
                                   "ssl.keystore.location": str(pki.broker_keystore),
                                   "log.dirs": str(data_dir), "num.partitions": "1", **props}))
    runner.run(b.start())
    try:
        yield b, runner
    finally:
        runner.run(b.stop())
        runner.close()
