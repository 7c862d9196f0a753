"""The ``strom`` command: one entry point, one module per sub-command (Kafka's ``bin/*.sh`` tools).

Every command prints one clear line on stderr and exits non-zero on bad input; ``--verbose`` shows tracebacks.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from strom.cli.errors import CliError

__all__ = ["main", "CliError"]

# sub-command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "broker": ("strom.cli.broker", "start a broker in the foreground (kafka-server-start.sh)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="strom",
        description="strom: a Kafka-compatible broker and tools in Python.",
        epilog="Run 'strom COMMAND --help' for a command's options and examples.",
    )
    parser.add_argument("--verbose", action="store_true", help="show tracebacks and debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        mod = importlib.import_module(module)
        p = sub.add_parser(name, help=help_text, description=mod.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--verbose", action="store_true", help="show tracebacks and debug logging")
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args._run(args) or 0)
    except CliError as e:
        if args.verbose:
            raise
        print(f"Error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
