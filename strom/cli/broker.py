"""Start one strom broker in the foreground.

Examples:
  strom broker                                   # PLAINTEXT://127.0.0.1:9092, data in ./strom-data
  strom broker --config config/server.properties
  strom broker --override log.dirs=/tmp/strom --override listeners=PLAINTEXT://127.0.0.1:9093
  strom broker -daemon config/server.properties  # detached (kafka-server-start.sh -daemon); strom broker-stop

SIGTERM or SIGINT (Ctrl-C) stops it cleanly: it stops accepting connections, finishes the requests in flight,
flushes and closes the logs, and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from strom.cli.errors import CliError
from strom.common.errors import ConfigError

__all__ = ["add_arguments", "run", "serve"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config_file", nargs="?", help="server.properties (as kafka-server-start.sh takes it)")
    p.add_argument("--config", dest="config_opt", metavar="FILE", help="server.properties file")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="override one property (repeatable)")
    p.add_argument("-daemon", dest="daemon", action="store_true",
                   help="run detached: pid in <log dir>/strom-broker.pid, output in stromServer.out "
                        "(stop it with 'strom broker-stop')")
    p.add_argument("--daemonized", action="store_true", help=argparse.SUPPRESS)  # marks a -daemon child


def _props(args: argparse.Namespace) -> dict[str, str]:
    from strom.server.broker_config import load_properties_file

    path = args.config_opt or args.config_file
    props = load_properties_file(path) if path else {}
    for item in args.override:
        if "=" not in item:
            raise ConfigError(f"Invalid --override {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        props[k.strip()] = v.strip()
    return props


async def serve(props: dict[str, str], ready_line: bool = True) -> None:
    from strom.server.broker import BrokerServer
    from strom.server.broker_config import BrokerConfig

    broker = BrokerServer(BrokerConfig(props))
    try:
        await broker.start()
    except OSError as e:
        await _stop_quietly(broker)
        raise CliError(f"Cannot start the broker: {e}", code=1) from None
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready_line:
        a = broker.advertised[0]
        print(f"strom broker {broker.node_id} ready on {a.host}:{a.port}", flush=True)
    await stop.wait()
    try:
        await broker.stop()
    except OSError as e:
        raise CliError(f"The broker did not shut down cleanly: {e} (the next start recovers the logs)",
                       code=1) from None


async def _stop_quietly(broker: object) -> None:
    try:
        await broker.stop()  # type: ignore[attr-defined]
    except Exception:  # the start failed half-way: release what was opened, report the start error
        pass


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="[%(asctime)s] %(levelname)s %(message)s", stream=sys.stderr)
    try:
        props = _props(args)
        if args.daemon:
            from strom.cli.broker_daemon import start_daemon

            return start_daemon(args, props)
        try:
            import uvloop  # type: ignore[import-not-found]

            runner = uvloop.run
        except ImportError:
            runner = asyncio.run
        runner(serve(props))
    except ConfigError as e:
        raise CliError(str(e), code=2) from None
    return 0
