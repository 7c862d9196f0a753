"""Errors of strom's ZooKeeper layer (Kafka's ``kafka.zookeeper`` / ``kafka.zk`` exceptions).

Every error is a :class:`strom.common.errors.KafkaError` with a message that names what failed, so the broker
can print it as its one-line start-up error.
"""

from __future__ import annotations

from strom.common.errors import KafkaError

__all__ = [
    "ZooKeeperClientError", "ZooKeeperClientTimeoutError", "BrokerIdAlreadyRegisteredError",
    "ControllerMovedError", "ZkNodeExistsError", "ZkNoNodeError", "ZkVersionConflictError",
    "ProducerIdsExhaustedError",
]


class ZooKeeperClientError(KafkaError):
    """A ZooKeeper request failed (Kafka's ``ZooKeeperClientException``)."""


class ZooKeeperClientTimeoutError(ZooKeeperClientError, TimeoutError):
    """No ZooKeeper connection within ``zookeeper.connection.timeout.ms`` (Kafka's
    ``ZooKeeperClientTimeoutException``)."""

    retriable = True


class BrokerIdAlreadyRegisteredError(ZooKeeperClientError):
    """``/brokers/ids/<id>`` is held by another live session: another broker runs with this ``broker.id``."""


class ControllerMovedError(ZooKeeperClientError):
    """``/controller_epoch`` changed under a controller's write: another broker became controller (Kafka's
    ``ControllerMovedException``); the write was not applied."""


class ZkNodeExistsError(ZooKeeperClientError):
    """A create found the znode already there (e.g. a topic assignment for an existing topic)."""


class ZkNoNodeError(ZooKeeperClientError):
    """A znode an update needs does not exist."""


class ZkVersionConflictError(ZooKeeperClientError):
    """A conditional set lost: the znode's version is not the one expected (someone else wrote it)."""


class ProducerIdsExhaustedError(ZooKeeperClientError):
    """Every producer id up to 2**63-1 has been handed out."""
