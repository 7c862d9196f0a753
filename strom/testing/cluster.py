"""A real local cluster for tests and demos: one ZooKeeper process and N ``strom broker`` processes on loopback.

Short ZooKeeper ticks and session timeouts make a killed broker's session expire in a few seconds, so failover
tests run quickly. Never imported by production code.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from strom.testing.broker_process import BrokerProcess, free_port
from strom.testing.zookeeper import ZooKeeperServer

__all__ = ["LocalCluster", "wait_until"]


def wait_until(cond: Callable[[], Any], timeout_s: float = 30.0, what: str = "condition",
               interval_s: float = 0.05) -> Any:
    """Poll ``cond`` until it returns something truthy; raise AssertionError naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout_s
    last_exc: BaseException | None = None
    while True:
        try:
            v = cond()
            if v:
                return v
        except Exception as e:  # the cluster may be between states: keep polling
            last_exc = e
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}"
                                 + (f" (last error: {last_exc!r})" if last_exc else ""))
        time.sleep(interval_s)


class LocalCluster:
    def __init__(self, num_brokers: int = 3, *, chroot: str = "/kafka", overrides: Mapping[str, str] | None = None,
                 session_timeout_ms: int = 4000, racks: list[str] | None = None) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="strom-cluster-")
        self.base = Path(self._tmp.name)
        self.zookeeper = ZooKeeperServer(data_dir=self.base / "zk")
        self.chroot = chroot
        self.session_timeout_ms = session_timeout_ms
        common = {
            "zookeeper.session.timeout.ms": str(session_timeout_ms),
            "zookeeper.connection.timeout.ms": "10000",
            "replica.lag.time.max.ms": "4000",
            "offsets.topic.num.partitions": "6",
            "group.initial.rebalance.delay.ms": "0",
            "controlled.shutdown.retry.backoff.ms": "200",
            **dict(overrides or {}),
        }
        self.brokers: dict[int, BrokerProcess] = {}
        for i in range(num_brokers):
            node = i + 1
            props = {"broker.id": str(node), **common}
            if racks:
                props["broker.rack"] = racks[i % len(racks)]
            self.brokers[node] = BrokerProcess(data_dir=self.base / f"broker-{node}", port=free_port(),
                                               overrides=props)

    @property
    def zk_connect(self) -> str:
        return self.zookeeper.connect_string + self.chroot

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def bootstrap_of(self, *nodes: int) -> str:
        return ",".join(self.brokers[n].bootstrap for n in nodes)

    def start(self) -> LocalCluster:
        """ZooKeeper (unless already started: a test may prepare it first, e.g. SCRAM users) then the brokers."""
        if not self.zookeeper.running:
            self.zookeeper.start()
        for b in self.brokers.values():  # side by side: each spends most of a second importing
            b.overrides["zookeeper.connect"] = self.zk_connect
            b.launch()
        for b in self.brokers.values():
            b.wait_ready(timeout=60)
        self.wait_for_metadata()
        return self

    def wait_for_metadata(self, nodes: list[int] | None = None, timeout_s: float = 60.0) -> None:
        """Until every running broker knows every running broker and the controller (UpdateMetadata arrived)."""
        from strom.protocol.api_keys import ApiKey
        from strom.protocol.messages.metadata import MetadataRequest
        from strom.testing.raw_client import RawClient

        alive = set(self.alive())
        for n in nodes or sorted(alive):
            def sees_all(n: int = n) -> bool:
                with RawClient(self.brokers[n].bootstrap, timeout=5) as c:
                    md = c.request(ApiKey.METADATA, 12, MetadataRequest(topics=[]))
                return {b.node_id for b in md.brokers} == alive and md.controller_id in alive
            wait_until(sees_all, timeout_s, f"broker {n} to see brokers {sorted(alive)} and a controller")

    def alive(self) -> list[int]:
        return [n for n, b in self.brokers.items() if b.proc is not None and b.proc.poll() is None]

    def stop(self) -> None:
        for b in self.brokers.values():
            try:
                b.stop(timeout=60)
            except Exception:
                b.kill()
        self.zookeeper.stop()

    def cleanup(self) -> None:
        for b in self.brokers.values():
            b.kill()
        self.zookeeper.kill()
        self._tmp.cleanup()

    def __enter__(self) -> LocalCluster:
        try:
            return self.start()
        except BaseException:  # a cluster that failed to start leaves no process or directory behind
            self.__exit__()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.cleanup()
