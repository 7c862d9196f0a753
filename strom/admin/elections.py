"""Leader elections: preferred (the first replica leads again) or unclean (any live replica, even out of sync).

Kafka counterpart: ``KafkaAdminClient.electLeaders`` (KIP-460): one ElectLeaders request to the controller named
by the latest Metadata (NOT_CONTROLLER refreshes the metadata and retries). ``partitions=None`` asks for every
partition of the cluster; the controller answers with one result per partition it considered. A partition's
error is the broker's error class (ELECTION_NOT_NEEDED when its leader is already the one wanted,
PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION, ...).

I/O: the call runs on the admin client's I/O thread; this module only builds and submits it.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from strom.admin._support import FutureMap
from strom.admin.calls import Call, ControllerNodeProvider
from strom.admin.models import ElectionType
from strom.admin.results import ElectLeadersResult
from strom.common.error_codes import ErrorCode, NotControllerError
from strom.common.errors import KafkaError, for_code
from strom.common.structs import TopicPartition
from strom.protocol.messages import ElectLeadersRequest

if TYPE_CHECKING:
    from strom.admin.runnable import AdminClientRunnable

__all__ = ["elect_leaders"]


def elect_leaders(rt: AdminClientRunnable, election_type: ElectionType, partitions: Iterable[TopicPartition] | None,
                  timeout_ms: int | None) -> ElectLeadersResult:
    wanted = None if partitions is None else sorted(set(partitions))
    futures: FutureMap[str] = FutureMap(["all"])
    result: Future[dict[TopicPartition, KafkaError | None]] = futures.futures["all"]
    R = ElectLeadersRequest

    def request(timeout: int) -> Any:
        topics: dict[str, list[int]] = {}
        for tp in wanted or ():
            topics.setdefault(tp.topic, []).append(tp.partition)
        return R(election_type=int(election_type), timeout_ms=timeout,
                 topic_partitions=None if wanted is None else [
                     R.TopicPartitions(topic=t, partitions=ps) for t, ps in topics.items()])

    def response(body: Any, version: int) -> None:
        code = body.error_code if version >= 1 else ErrorCode.NONE
        if code == ErrorCode.NOT_CONTROLLER:
            rt.metadata_manager.clear_controller()
            rt.metadata_manager.request_update()
            raise NotControllerError("The controller moved; retrying the leader election")
        if code:
            raise for_code(code)
        out: dict[TopicPartition, KafkaError | None] = {}
        for t in body.replica_election_results:
            for p in t.partition_result:
                tp = TopicPartition(t.topic, p.partition_id)
                out[tp] = for_code(p.error_code, p.error_message) if p.error_code else None
        for tp in wanted or ():  # Kafka: "The server response did not contain a reference to ..."
            out.setdefault(tp, KafkaError(f"The server response did not contain a reference to partition {tp}"))
        futures.complete("all", out)

    # An ElectionType other than PREFERRED needs v1 (v0 has no election_type field).
    min_version = 1 if election_type != ElectionType.PREFERRED else None
    rt.submit(Call("electLeaders", rt.calc_deadline(timeout_ms), ControllerNodeProvider(), request, response,
                   futures.fail_all, min_version=min_version))
    return ElectLeadersResult(result)
