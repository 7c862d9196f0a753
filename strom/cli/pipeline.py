"""Run the clickstream pipeline of "make demo": strom + Spark Structured Streaming with format("strom").

Examples:
  strom pipeline demo                                  # embedded broker, 3000 events
  strom pipeline demo --events 500 --rate 0            # small and unpaced
  strom pipeline demo --bootstrap-server host:9092     # against an existing cluster (topics 'clicks', 'page-counts')
  strom pipeline demo --workdir /tmp/demo              # keep the Parquet output and checkpoints

Needs Java 17+ and the 'spark' extra (pip install 'strom[spark]'). Prints progress while Spark starts and for
every micro-batch, then the windowed page counts, checked against a plain-Python count of the same events.
Exit code 0 when the counts read back from the topic and from Parquet both match.
"""

from __future__ import annotations

import argparse

from strom.cli.errors import CliError

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pipeline", choices=["demo"], help="the pipeline to run")
    p.add_argument("--events", type=int, default=3000, help="click events to generate (default 3000)")
    p.add_argument("--rate", type=float, default=150.0,
                   help="events per second the generator produces; 0 = as fast as possible (default 150)")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT",
                   help="use this cluster instead of an embedded broker")
    p.add_argument("--workdir", metavar="DIR", help="keep checkpoints and Parquet output here (default: a temp dir)")


def run(args: argparse.Namespace) -> int:
    if args.events < 1:
        raise CliError("--events must be at least 1")
    if args.rate < 0:
        raise CliError("--rate must not be negative")
    from strom.demo import run_demo

    return run_demo(events=args.events, events_per_s=args.rate or None, bootstrap=args.bootstrap_server,
                    workdir=args.workdir)
