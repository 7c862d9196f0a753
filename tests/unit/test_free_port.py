"""free_port: ports handed out are claimed across processes, so parallel test workers never start two servers on one
port (a CI run failed with EADDRINUSE when two workers picked the same not-yet-bound port)."""

from __future__ import annotations

import os
import time

from strom import broker_process
from strom.broker_process import free_port


def test_ports_handed_out_are_distinct() -> None:
    # 300 random picks from ~22,000 ports repeat one with near certainty unless picks are claimed.
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)


def test_a_claimed_port_is_refused_until_the_claim_lapses() -> None:
    port = free_port()
    assert not broker_process._reserve(port)  # another caller (any process of this user) is refused
    claim = broker_process.claim_path(port)
    old = time.time() - broker_process._RESERVED_FOR_S - 1
    os.utime(claim, (old, old))
    assert broker_process._reserve(port)  # lapsed: taken over
    assert not broker_process._reserve(port)
