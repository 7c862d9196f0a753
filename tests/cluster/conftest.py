"""Cluster-mode fixtures: a real ZooKeeper server (Debian's package, started by strom's own CLI code) and a
LocalCluster of 3 brokers on it."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from strom.testing.cluster import LocalCluster
from strom.testing.zookeeper import ZooKeeperServer

_chroots = itertools.count()


@pytest.fixture(scope="module")
def zookeeper() -> Iterator[ZooKeeperServer]:
    """One ZooKeeper per test module (tickTime 500 ms: sessions can expire within about a second)."""
    server = ZooKeeperServer()
    server.start()
    yield server
    server.stop()
    server.cleanup()


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperServer, request: pytest.FixtureRequest) -> str:
    """A ``zookeeper.connect`` string with a chroot of its own, so the tests of a module never see each
    other's znodes."""
    return f"{zookeeper.connect_string}/{request.node.name.split('[')[0]}-{next(_chroots)}"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """One real ZooKeeper + 3 ``strom broker`` processes (ids 1, 2, 3) shared by a module's tests."""
    with LocalCluster(3) as c:
        yield c
