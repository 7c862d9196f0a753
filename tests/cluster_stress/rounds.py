"""What the cluster stress tests share: the kill round (kill -9 brokers, maybe stop and restart ZooKeeper, start them
again, and wait until every broker sees the others), and a comparison of the replicas' logs on disk."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from strom.record.header import HEADER_SIZE, parse_header
from strom.testing.cluster import LocalCluster, wait_until


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


def replica_batches(c: LocalCluster, topic: str, partition: int) -> dict[int, list[tuple[int, int, int]]]:
    """(base offset, last offset, CRC) of every batch in each broker's segment files of ``topic``-``partition``,
    read from disk as written (a batch cut short by a kill -9 ends the list)."""
    out: dict[int, list[tuple[int, int, int]]] = {}
    for n in c.brokers:
        batches: list[tuple[int, int, int]] = []
        for seg in sorted((c.base / f"broker-{n}" / f"{topic}-{partition}").glob("*.log")):
            data = seg.read_bytes()
            pos = 0
            while pos + HEADER_SIZE <= len(data):
                h = parse_header(data, pos)
                if h.batch_length <= 0 or pos + h.size > len(data):
                    break
                batches.append((h.base_offset, h.last_offset, h.crc))
                pos += h.size
        out[n] = batches
    return out


def replica_differences(c: LocalCluster, topic: str, partitions: int) -> list[str]:
    """What makes the replicas of each partition differ: their log ends, or batches one holds and another lacks
    (every replica of a partition holds the same batches once the followers caught up)."""
    problems = []
    for p in range(partitions):
        logs = replica_batches(c, topic, p)
        ends = {n: bs[-1][1] + 1 if bs else 0 for n, bs in logs.items()}
        if len(set(ends.values())) > 1:
            problems.append(f"{topic}-{p}: log ends {ends}")
            continue
        first, *others = sorted(logs)
        for n in others:
            if logs[n] != logs[first]:
                a, b = set(logs[first]), set(logs[n])
                problems.append(f"{topic}-{p}: broker {first} alone has {sorted(a - b)[:5]}, broker {n} alone "
                                f"has {sorted(b - a)[:5]}")
    return problems


def replicas_agree(c: LocalCluster, topic: str, partitions: int, history: str, timeout_s: float = 60) -> None:
    """Wait until every replica of each partition holds the same batches on disk (the followers caught up once
    the writers stopped); AssertionError with what differs, and ``history`` (the rounds), when they do not."""
    differences: list[str] = []

    def agree() -> bool:
        differences[:] = replica_differences(c, topic, partitions)
        return not differences

    try:
        wait_until(agree, timeout_s, "the replicas' logs to agree")
    except AssertionError:
        raise AssertionError(f"the replicas' logs differ: {differences} ({history})") from None
