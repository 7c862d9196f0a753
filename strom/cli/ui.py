"""Start the web console: cluster overview, brokers, topics with partitions and a message browser, consumer
groups with per-partition lag, and rate charts. It reads the cluster only through the AdminClient and a
consumer, so it also watches a Kafka cluster.

Examples:
  strom ui --bootstrap-server 127.0.0.1:9092
  strom ui --bootstrap-server 127.0.0.1:9092 --port 8080 --allow-writes

Bound to 127.0.0.1 unless --host says otherwise; read-only unless --allow-writes (create/delete topic and
reset offsets forms, each asking for confirmation). Stop it with Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from strom.cli.common import add_connection_options, check_reachable, client_properties
from strom.cli.errors import CliError

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_connection_options(p, required=False)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="HTTP port (default 8080; 0 picks a free one)")
    p.add_argument("--allow-writes", action="store_true", help="enable create/delete topic and reset offsets")
    p.add_argument("--sample-interval", type=float, default=5.0, metavar="SECONDS",
                   help="how often rates and lag are sampled for the charts (default 5)")


def run(args: argparse.Namespace) -> int:
    from werkzeug.serving import make_server

    from strom.ui.app import create_app
    from strom.ui.cluster_view import ClusterView

    if not 0 <= args.port <= 65535:
        raise CliError(f"--port must be between 0 and 65535, not {args.port}", 2)
    if args.sample_interval <= 0:
        raise CliError(f"--sample-interval must be positive, not {args.sample_interval}", 2)
    props: dict[str, Any] = client_properties(args)
    bootstrap = props.pop("bootstrap.servers")
    check_reachable(bootstrap)
    view = ClusterView(bootstrap, client_configs=props, sample_interval_s=args.sample_interval)
    try:
        try:
            server = make_server(args.host, args.port, create_app(view, allow_writes=args.allow_writes),
                                 threaded=True)
        except OSError as e:
            raise CliError(f"Cannot listen on {args.host}:{args.port}: {e.strerror or e}", 1) from None
        view.start_sampling()
        stop = threading.Event()

        def shutdown(*_: Any) -> None:
            stop.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, shutdown)
        print(f"strom console on http://{args.host}:{server.server_port}/ "
              f"({'read-write' if args.allow_writes else 'read-only'})", flush=True)
        server.serve_forever()
        server.server_close()
    finally:
        view.close()
    print("strom console stopped", file=sys.stderr)
    return 0
