"""The client network layer: Selector, KafkaChannel, NetworkReceive/Send, NetworkClient, InFlightRequests,
ClusterConnectionStates, Metadata, ApiVersions (Kafka's ``org.apache.kafka.clients`` and
``org.apache.kafka.common.network``). Shared by the producer, consumer and admin clients."""

from __future__ import annotations

from strom.network.api_versions import ApiVersions, NodeApiVersions
from strom.network.client_request import ClientRequest, ClientResponse
from strom.network.cluster import Cluster, PartitionInfo
from strom.network.connection_states import ClusterConnectionStates, ConnectionState
from strom.network.in_flight_requests import InFlightRequests
from strom.network.kafka_client import KafkaClient
from strom.network.metadata import Metadata
from strom.network.network_client import NetworkClient
from strom.network.network_receive import NetworkReceive, NetworkSend
from strom.network.selector import Selector

__all__ = [
    "ApiVersions",
    "NodeApiVersions",
    "ClientRequest",
    "ClientResponse",
    "Cluster",
    "PartitionInfo",
    "ClusterConnectionStates",
    "ConnectionState",
    "InFlightRequests",
    "KafkaClient",
    "Metadata",
    "NetworkClient",
    "NetworkReceive",
    "NetworkSend",
    "Selector",
]
