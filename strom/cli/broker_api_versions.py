"""Print the API versions every broker supports (Kafka's kafka-broker-api-versions.sh, ``BrokerApiVersionsCommand``).

Examples:
  strom broker-api-versions --bootstrap-server 127.0.0.1:9092
  strom broker-api-versions --bootstrap-server 127.0.0.1:9093 --command-config client-ssl.properties

For each live broker, Kafka's text: ``host:port (id: N rack: R) -> (`` then one API per line, ``Name(key): min to
max [usable: v]`` where v is the version strom's clients would use with that broker (``[unusable: node too
new|old]`` when the ranges do not meet, ``UNSUPPORTED`` for an API strom knows and the broker does not offer,
``UNKNOWN(key)`` for one the broker offers and strom does not know). A broker that does not answer gets
``-> ERROR: <reason>`` and the command exits 1.
"""

from __future__ import annotations

import argparse

from strom.cli.common import add_connection_options, error_message, new_admin, wait
from strom.cli.errors import CliError
from strom.common.structs import Node

__all__ = ["add_arguments", "run", "node_text"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_connection_options(p)


def node_text(node: Node) -> str:
    """Kafka's ``Node.toString``: ``host:port (id: 1 rack: null)``."""
    return f"{node.host}:{node.port} (id: {node.node_id} rack: {node.rack if node.rack is not None else 'null'})"


def run(args: argparse.Namespace) -> int:
    admin = new_admin(args)
    try:
        try:
            nodes = wait(admin.describe_cluster().nodes())
        except Exception as e:
            if args.verbose:
                raise
            raise CliError(f"Describing the cluster failed: {error_message(e)}") from None
        futures = admin.describe_broker_api_versions([n.node_id for n in nodes]).values()
        failed = 0
        for node in nodes:
            try:
                versions = wait(futures[node.node_id])
            except Exception as e:
                failed += 1
                print(f"{node_text(node)} -> ERROR: {error_message(e)}")
                continue
            print(f"{node_text(node)} -> {versions.to_text(line_breaks=True)}")
        return 1 if failed else 0
    finally:
        admin.close(timeout=5)
