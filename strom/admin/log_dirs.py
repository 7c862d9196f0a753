"""Describe brokers' log directories (Kafka's ``KafkaAdminClient.describeLogDirs``): one DescribeLogDirs request to
each broker asked, answered per broker as ``{log dir: LogDirDescription}``.

I/O: the calls run on the admin client's I/O thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from strom.admin._support import FutureMap
from strom.admin.calls import Call, ConstantNodeProvider, raise_for
from strom.admin.models import LogDirDescription, ReplicaInfo
from strom.admin.results import KeyedResult
from strom.common.errors import for_code
from strom.common.structs import TopicPartition
from strom.protocol.messages import DescribeLogDirsRequest

if TYPE_CHECKING:
    from strom.admin.runnable import AdminClientRunnable

__all__ = ["describe_log_dirs"]


def describe_log_dirs(rt: AdminClientRunnable, broker_ids: Iterable[int],
                      timeout_ms: int | None) -> KeyedResult[int, dict[str, LogDirDescription]]:
    futures: FutureMap[int] = FutureMap(dict.fromkeys(broker_ids))
    deadline = rt.calc_deadline(timeout_ms)
    for broker in futures.undone():
        def response(body: Any, version: int, broker: int = broker) -> None:
            if version >= 3:
                raise_for(body.error_code)
            out: dict[str, LogDirDescription] = {}
            for r in body.results:
                replicas = {TopicPartition(t.name, p.partition_index): ReplicaInfo(p.partition_size, p.offset_lag,
                                                                                   p.is_future_key)
                            for t in r.topics for p in t.partitions}
                out[r.log_dir] = LogDirDescription(
                    for_code(r.error_code) if r.error_code else None, replicas,
                    r.total_bytes if version >= 4 and r.total_bytes >= 0 else None,
                    r.usable_bytes if version >= 4 and r.usable_bytes >= 0 else None)
            futures.complete(broker, out)

        rt.submit(Call("describeLogDirs", deadline, ConstantNodeProvider(broker),
                       lambda _t: DescribeLogDirsRequest(topics=None), response,
                       lambda e, broker=broker: futures.fail(broker, e)))
    return KeyedResult(futures.futures)
