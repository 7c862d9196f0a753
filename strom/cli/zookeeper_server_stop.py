"""Stop ZooKeeper servers started by strom (Kafka's zookeeper-server-stop.sh).

Examples:
  strom zookeeper-server-stop                                  # every ZooKeeper strom started as this user
  strom zookeeper-server-stop config/zookeeper.properties      # the one serving that file (its pid file)

Sends SIGTERM and waits for the process to exit. With no server to stop it prints Kafka's
"No zookeeper server to stop" and exits 1.
"""

from __future__ import annotations

import argparse

from strom.cli.errors import CliError
from strom.cli.zookeeper_server import find_server_pids, load_zookeeper_config, pid_file, stop_servers
from strom.common.errors import ConfigError

__all__ = ["add_arguments", "run"]

STOP_TIMEOUT_S = 30.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config_file", nargs="?", help="zookeeper.properties of the server to stop (default: all)")


def run(args: argparse.Namespace) -> int:
    try:
        config = load_zookeeper_config(args.config_file) if args.config_file else None
    except ConfigError as e:
        raise CliError(str(e), code=1) from None
    pids = find_server_pids(config)
    if not pids:
        raise CliError("No zookeeper server to stop", code=1, plain=True)
    alive = stop_servers(pids, STOP_TIMEOUT_S)
    if alive:
        raise CliError(f"ZooKeeper (pid {', '.join(map(str, alive))}) did not exit within "
                       f"{STOP_TIMEOUT_S:.0f} s of SIGTERM")
    if config is not None:
        pid_file(config).unlink(missing_ok=True)
    for pid in pids:
        print(f"Stopped ZooKeeper (pid {pid})")
    return 0
