"""The broker's topic registry: names, ids, partition counts and per-topic configs, durable across restarts.

Kafka counterpart: ``KRaftMetadataCache`` plus the controller's topic records. A single broker is its own
controller, so the registry is a JSON document written by write-temp-then-rename (``topics.json`` in the first
log dir). Not thread-safe: used from the broker's event loop only.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TopicInfo", "MetadataCache", "validate_topic_name", "INTERNAL_TOPICS", "MAX_TOPIC_NAME_LENGTH"]

MAX_TOPIC_NAME_LENGTH = 249
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str | None) -> str | None:
    """Return an error message when ``name`` is not a legal Kafka topic name, else None (Kafka's ``Topic.validate``)."""
    if name is None or name == "":
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}"
    if not _LEGAL.match(name):
        return (
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        )
    return None


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class MetadataCache:
    """Topics by name and by id; persisted on every change."""

    FILE_NAME = "topics.json"

    def __init__(self, data_dir: str | Path) -> None:
        self._path = Path(data_dir) / self.FILE_NAME
        self._by_name: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self.cluster_id = ""
        self.producer_id_block_end = 0
        self._load()

    # -- persistence -------------------------------------------------------------------------------------------
    def _load(self) -> None:
        if not self._path.exists():
            self.cluster_id = _new_cluster_id()
            self._save()
            return
        doc = json.loads(self._path.read_text(encoding="utf-8"))
        self.cluster_id = doc.get("cluster_id") or _new_cluster_id()
        self.producer_id_block_end = int(doc.get("producer_id_block_end", 0))
        for t in doc.get("topics", []):
            info = TopicInfo(t["name"], uuid.UUID(t["topic_id"]), int(t["num_partitions"]), dict(t.get("configs", {})))
            self._by_name[info.name] = info
            self._by_id[info.topic_id] = info

    def _save(self) -> None:
        doc = {
            "version": 1,
            "cluster_id": self.cluster_id,
            "producer_id_block_end": self.producer_id_block_end,
            "topics": [
                {"name": t.name, "topic_id": str(t.topic_id), "num_partitions": t.num_partitions, "configs": t.configs}
                for t in sorted(self._by_name.values(), key=lambda t: t.name)
            ],
        }
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_suffix(".json.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
        fd = os.open(self._path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- queries ----------------------------------------------------------------------------------------------
    def topic(self, name: str) -> TopicInfo | None:
        return self._by_name.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def topics(self) -> list[TopicInfo]:
        return sorted(self._by_name.values(), key=lambda t: t.name)

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    # -- changes ----------------------------------------------------------------------------------------------
    def create_topic(self, name: str, num_partitions: int, configs: dict[str, str] | None = None) -> TopicInfo:
        info = TopicInfo(name, uuid.uuid4(), num_partitions, dict(configs or {}))
        self._by_name[name] = info
        self._by_id[info.topic_id] = info
        self._save()
        return info

    def delete_topic(self, name: str) -> TopicInfo | None:
        info = self._by_name.pop(name, None)
        if info is not None:
            self._by_id.pop(info.topic_id, None)
            self._save()
        return info

    def set_partitions(self, name: str, num_partitions: int) -> None:
        self._by_name[name].num_partitions = num_partitions
        self._save()

    def allocate_producer_id_block(self, size: int) -> int:
        """Reserve ``size`` producer ids durably; returns the first (Kafka's ProducerIdManager blocks)."""
        start = self.producer_id_block_end
        self.producer_id_block_end = start + size
        self._save()
        return start

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        self._by_name[name].configs = dict(configs)
        self._save()


def _new_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
