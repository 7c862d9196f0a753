"""Describe the cluster: brokers, controller, cluster id; and each broker's API versions.

Kafka counterpart: ``KafkaAdminClient.describeCluster``: a DescribeCluster request (KIP-700) to the least loaded
broker, or — when the broker does not support it — a Metadata request for no topics (Kafka's
``useMetadataRequest`` downgrade in ``handleUnsupportedVersionException``).

I/O: the call runs on the admin client's I/O thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.admin._support import FutureMap
from strom.admin.calls import Call, ConstantNodeProvider, LeastLoadedNodeProvider, raise_for
from strom.admin.models import ClusterDescription, sorted_nodes
from strom.admin.results import DescribeClusterResult, KeyedResult
from strom.common.structs import Node
from strom.network.api_versions import NodeApiVersions
from strom.network.network_client import CLIENT_SOFTWARE_NAME, CLIENT_SOFTWARE_VERSION
from strom.protocol.messages import ApiVersionsRequest, DescribeClusterRequest, MetadataRequest

if TYPE_CHECKING:
    from strom.admin.runnable import AdminClientRunnable

__all__ = ["describe_cluster", "describe_broker_api_versions"]

_OMITTED = -(2**31)


def describe_cluster(rt: AdminClientRunnable, include_authorized_operations: bool,
                     timeout_ms: int | None) -> DescribeClusterResult:
    futures: FutureMap[str] = FutureMap(["cluster"])
    use_metadata = [False]

    def request(_timeout: int) -> Any:
        if use_metadata[0]:
            return MetadataRequest(topics=[], allow_auto_topic_creation=True,
                                   include_cluster_authorized_operations=include_authorized_operations)
        return DescribeClusterRequest(include_cluster_authorized_operations=include_authorized_operations,
                                      endpoint_type=1)

    def response(body: Any, version: int) -> None:
        if use_metadata[0]:
            nodes = [Node(b.node_id, b.host, b.port, b.rack) for b in body.brokers]
            controller_id, ops = body.controller_id, None
        else:
            raise_for(body.error_code, body.error_message)
            nodes = [Node(b.broker_id, b.host, b.port, b.rack) for b in body.brokers]
            controller_id = body.controller_id
            ops = body.cluster_authorized_operations
        authorized = None
        if include_authorized_operations and ops is not None and ops != _OMITTED:
            authorized = frozenset(i for i in range(32) if ops & (1 << i))
        controller = next((n for n in nodes if n.node_id == controller_id), None)
        futures.complete("cluster", ClusterDescription(body.cluster_id, controller, sorted_nodes(nodes), authorized))

    def unsupported(_e: BaseException) -> bool:
        if use_metadata[0]:
            return False
        use_metadata[0] = True
        call.min_version, call.max_version = 1, None
        return True

    call = Call("describeCluster", rt.calc_deadline(timeout_ms), LeastLoadedNodeProvider(), request, response,
                futures.fail_all, on_unsupported_version=unsupported)
    rt.submit(call)
    return DescribeClusterResult(futures.futures["cluster"])


def describe_broker_api_versions(rt: AdminClientRunnable, broker_ids: list[int],
                                 timeout_ms: int | None) -> KeyedResult[int, NodeApiVersions]:
    """One ApiVersions request to each broker (what kafka-broker-api-versions.sh asks): per broker id, the API
    versions it supports."""
    futures: FutureMap[int] = FutureMap(dict.fromkeys(broker_ids))
    deadline = rt.calc_deadline(timeout_ms)
    for broker in futures.undone():
        def response(body: Any, _version: int, broker: int = broker) -> None:
            raise_for(body.error_code)
            futures.complete(broker, NodeApiVersions.from_response(body))

        rt.submit(Call("describeBrokerApiVersions", deadline, ConstantNodeProvider(broker),
                       lambda _t: ApiVersionsRequest(client_software_name=CLIENT_SOFTWARE_NAME,
                                                     client_software_version=CLIENT_SOFTWARE_VERSION),
                       response, lambda e, broker=broker: futures.fail(broker, e)))
    return KeyedResult(futures.futures)
