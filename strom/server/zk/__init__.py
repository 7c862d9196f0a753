"""Cluster coordination through ZooKeeper (Kafka's ``kafka.zk`` package): znode paths and JSON
(:mod:`strom.server.zk.znodes`) and the blocking kazoo-based :class:`KafkaZkClient`."""

from strom.server.zk.errors import (
    BrokerIdAlreadyRegisteredError,
    ControllerMovedError,
    ProducerIdsExhaustedError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkVersionConflictError,
    ZooKeeperClientError,
    ZooKeeperClientTimeoutError,
)
from strom.server.zk.kafka_zk_client import KafkaZkClient, WatchHandle, ZkSessionState, parse_connect_string
from strom.server.zk.znodes import (
    BrokerRegistration,
    EndPoint,
    LeaderAndIsr,
    ProducerIdsBlock,
    ReplicaAssignment,
    TopicAssignment,
    ZkVersion,
)

__all__ = [
    "KafkaZkClient", "WatchHandle", "ZkSessionState", "parse_connect_string",
    "BrokerRegistration", "EndPoint", "LeaderAndIsr", "ProducerIdsBlock", "ReplicaAssignment", "TopicAssignment",
    "ZkVersion",
    "BrokerIdAlreadyRegisteredError", "ControllerMovedError", "ProducerIdsExhaustedError", "ZkNodeExistsError",
    "ZkNoNodeError", "ZkVersionConflictError", "ZooKeeperClientError", "ZooKeeperClientTimeoutError",
]
