"""The kill round the cluster stress tests share: kill -9 brokers, maybe stop and restart ZooKeeper, start them
again, and wait until every broker sees the others."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from strom.testing.cluster import LocalCluster


def kill_round(c: LocalCluster, rnd: random.Random, victims: list[int], what: str, log: list[str], *,
               restart_zookeeper: bool = False, while_down: Callable[[], None] | None = None) -> None:
    """kill -9 ``victims`` (a random live broker when none of them is alive), then ``while_down``, then
    ZooKeeper down for a second if asked, then a random 0.5-2 s before the brokers start again. Each step is
    appended to ``log`` (``what``: the line's text after "kill -9 [...]")."""
    victims = [v for v in victims if v in c.alive()] or [rnd.choice(c.alive())]
    log.append(f"kill -9 {victims}{what}")
    for v in victims:
        c.brokers[v].kill()
    if while_down is not None:
        while_down()
    if restart_zookeeper:
        log.append("ZooKeeper stopped and restarted")
        c.zookeeper.stop()
        time.sleep(1.0)
        c.zookeeper.restart()
    time.sleep(rnd.uniform(0.5, 2.0))
    for v in victims:
        c.brokers[v].start(timeout=120)
    c.wait_for_metadata(timeout_s=120)
