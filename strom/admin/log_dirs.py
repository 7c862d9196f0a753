"""Brokers' log directories (Kafka's ``KafkaAdminClient.describeLogDirs`` / ``alterReplicaLogDirs``): one request
to each broker concerned; described per broker as ``{log dir: LogDirDescription}``, moves answered per replica.

I/O: the calls run on the admin client's I/O thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from strom.admin._support import FutureMap
from strom.admin.calls import Call, ConstantNodeProvider, raise_for
from strom.admin.models import LogDirDescription, ReplicaInfo, TopicPartitionReplica
from strom.admin.results import KeyedResult
from strom.common.error_codes import ErrorCode
from strom.common.errors import for_code
from strom.common.structs import TopicPartition
from strom.protocol.messages import AlterReplicaLogDirsRequest, DescribeLogDirsRequest

if TYPE_CHECKING:
    from strom.admin.runnable import AdminClientRunnable

__all__ = ["alter_replica_log_dirs", "describe_log_dirs"]


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


def alter_replica_log_dirs(rt: AdminClientRunnable, replica_dirs: Mapping[TopicPartitionReplica, str],
                           timeout_ms: int | None) -> KeyedResult[TopicPartitionReplica, None]:
    """Move each replica to the log dir named (an absolute path on its broker): one AlterReplicaLogDirs per
    broker. A replica's future fails with the broker's error (``LogDirNotFoundError``, ``ReplicaNotAvailableError``
    when the broker has no such replica yet: it is placed there once created, as in Kafka)."""
    futures: FutureMap[TopicPartitionReplica] = FutureMap(dict.fromkeys(replica_dirs))
    deadline = rt.calc_deadline(timeout_ms)
    by_broker: dict[int, dict[str, dict[str, list[int]]]] = {}
    for replica, path in replica_dirs.items():
        by_broker.setdefault(replica.broker_id, {}).setdefault(path, {}).setdefault(replica.topic, []).append(
            replica.partition)
    for broker, dirs in by_broker.items():
        def request(_t: int, dirs: dict[str, dict[str, list[int]]] = dirs) -> AlterReplicaLogDirsRequest:
            D = AlterReplicaLogDirsRequest.AlterReplicaLogDir
            T = AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic
            return AlterReplicaLogDirsRequest(dirs=[D(path=path, topics=[T(name=t, partitions=ps)
                                                                         for t, ps in topics.items()])
                                                    for path, topics in dirs.items()])

        def response(body: Any, _version: int, broker: int = broker) -> None:
            for t in body.results:
                for p in t.partitions:
                    replica = TopicPartitionReplica(t.topic_name, p.partition_index, broker)
                    if p.error_code:
                        futures.fail(replica, for_code(p.error_code))
                    else:
                        futures.complete(replica, None)
            for replica in futures.undone():
                if replica.broker_id == broker:
                    futures.fail(replica, for_code(ErrorCode.UNKNOWN_SERVER_ERROR,
                                                   "the broker did not answer for this replica"))

        rt.submit(Call("alterReplicaLogDirs", deadline, ConstantNodeProvider(broker), request, response,
                       lambda e, broker=broker: [futures.fail(r, e) for r in futures.undone()
                                                 if r.broker_id == broker]))
    return KeyedResult(futures.futures)
