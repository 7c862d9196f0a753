"""Stop strom brokers started with 'strom broker -daemon' (Kafka's kafka-server-stop.sh).

Examples:
  strom broker-stop                                  # every broker this user started with -daemon
  strom broker-stop config/server.properties         # the broker of that file's log dir
  strom broker-stop --override log.dirs=/tmp/strom-1

SIGTERM is the broker's clean shutdown; the command waits for the process to exit. With no broker to stop it
prints Kafka's "No kafka server to stop" and exits 1.
"""

from __future__ import annotations

import argparse

from strom.cli.errors import CliError
from strom.common.errors import ConfigError

__all__ = ["add_arguments", "run"]

STOP_TIMEOUT_S = 120.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config_file", nargs="?", help="server.properties of the broker to stop (default: all)")
    p.add_argument("--config", dest="config_opt", metavar="FILE", help="server.properties file")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="override one property, as given to 'strom broker' (repeatable)")


def run(args: argparse.Namespace) -> int:
    from strom.cli.broker import _props
    from strom.cli.broker_daemon import find_broker_pids, pid_file_for, stop_brokers

    pid_file = None
    if args.config_opt or args.config_file or args.override:
        try:
            pid_file, _ = pid_file_for(_props(args))
        except ConfigError as e:
            raise CliError(str(e), code=2) from None
    pids = find_broker_pids(pid_file)
    if not pids:
        raise CliError("No kafka server to stop", code=1, plain=True)
    alive = stop_brokers(pids, STOP_TIMEOUT_S)
    if alive:
        raise CliError(f"strom broker (pid {', '.join(map(str, alive))}) did not exit within "
                       f"{STOP_TIMEOUT_S:.0f} s of SIGTERM")
    if pid_file is not None:
        pid_file.unlink(missing_ok=True)
    for pid in pids:
        print(f"Stopped strom broker (pid {pid})")
    return 0
