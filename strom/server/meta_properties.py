"""``meta.properties`` in every log dir: which cluster and broker id the data belongs to.

Kafka counterpart: ``BrokerMetadataCheckpoint`` (ZooKeeper mode: ``version=0``, ``broker.id``, ``cluster.id``). A
log dir written by another cluster or another broker id is refused at start, so a misconfigured
``zookeeper.connect`` or ``broker.id`` cannot mix two clusters' data.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from strom.common.errors import KafkaError
from strom.storage.fs import atomic_write

__all__ = ["check_meta_properties", "InconsistentClusterIdError", "InconsistentBrokerIdError", "FILE_NAME"]

FILE_NAME = "meta.properties"


class InconsistentClusterIdError(KafkaError):
    """The log dir belongs to another cluster (Kafka's ``InconsistentClusterIdException``)."""


class InconsistentBrokerIdError(KafkaError):
    """The log dir belongs to another broker id (Kafka's ``InconsistentBrokerIdException``)."""


def _read(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def check_meta_properties(log_dirs: list[Path], cluster_id: str, broker_id: int,
                          on_io_error: Callable[[Path, OSError], None] | None = None) -> None:
    """Refuse dirs of another cluster or broker; write ``meta.properties`` where it is missing. A dir whose file
    cannot be read or written is passed to ``on_io_error`` (it goes offline, as Kafka's) when given."""
    for d in log_dirs:
        try:
            _check_dir(d, cluster_id, broker_id)
        except OSError as e:
            if on_io_error is None:
                raise
            on_io_error(d, e)


def _check_dir(d: Path, cluster_id: str, broker_id: int) -> None:
    path = d / FILE_NAME
    if path.exists():
        props = _read(path)
        stored = props.get("cluster.id")
        if stored is not None and stored != cluster_id:
            raise InconsistentClusterIdError(
                f"The Cluster ID {cluster_id} doesn't match stored clusterId {stored} in {path}. The broker is "
                "trying to join the wrong cluster. Configured zookeeper.connect may be wrong.")
        stored_id = props.get("broker.id")
        if stored_id is not None and int(stored_id) != broker_id:
            raise InconsistentBrokerIdError(
                f"Configured broker.id {broker_id} doesn't match stored broker.id {stored_id} in {path}. If you "
                "moved your data, make sure your configured broker.id matches. If you intend to create a new "
                "broker, you should remove all data in your data directories (log.dirs).")
        return
    text = (f"#\n#{time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())}\n"
            f"cluster.id={cluster_id}\nversion=0\nbroker.id={broker_id}\n")
    atomic_write(str(path), text.encode())
