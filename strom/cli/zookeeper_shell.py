"""ZooKeeper's command-line client on a ZooKeeper server (Kafka's zookeeper-shell.sh).

Examples:
  strom zookeeper-shell localhost:2181 ls /brokers/ids               # the live brokers: [0, 1, 2]
  strom zookeeper-shell localhost:2181/kafka get /controller         # which broker is the controller
  strom zookeeper-shell localhost:2181/kafka get /brokers/topics/sanguo/partitions/0/state
  strom zookeeper-shell localhost:2181                               # interactive (commands from stdin)

It is ZooKeeper's own client (org.apache.zookeeper.ZooKeeperMain from Debian's zookeeper package), so commands
and output are ZooKeeper's: ls, get, stat, create, set, delete, deleteall, ...; a ZooKeeper error such as
"Node does not exist" exits 1.
"""

from __future__ import annotations

import argparse
import os
import sys

from strom.cli.errors import CliError
from strom.cli.zookeeper_server import shell_command
from strom.common.errors import ConfigError

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("server", metavar="zookeeper_host:port[/path]", help="the ZooKeeper to talk to")
    p.add_argument("zk_command", nargs=argparse.REMAINDER, metavar="command",
                   help="a ZooKeeper CLI command (none: interactive)")


def run(args: argparse.Namespace) -> int:
    server = args.server
    if ":" not in server.split("/", 1)[0] or server.startswith("-"):
        raise CliError(f"Invalid ZooKeeper address {server!r}: expected host:port[/path]", code=2)
    try:
        cmd = shell_command(["-server", server, *args.zk_command])
    except ConfigError as e:
        raise CliError(str(e), code=1) from None
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(cmd[0], cmd)  # exec, as Kafka's script does: ZooKeeper's exit code and signals are the user's
