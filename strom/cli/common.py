"""What every client command shares: connection options, ``--command-config``, ``k=v`` lists, error lines.

Kafka counterpart: ``org.apache.kafka.server.util.CommandLineUtils`` / ``CommandDefaultOptions`` (option
checks, ``parseKeyValueArgs``) and the ``--bootstrap-server`` / ``--command-config`` handling of the tools.

Before a command builds a client it checks that one of the bootstrap servers accepts a TCP connection, so an
unreachable broker is one line ("Cannot connect to ...") at once instead of a timeout later. Thread-safety:
functions only.
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import Any

from strom.cli.errors import CliError
from strom.common.errors import BrokerResponseError, ConfigError, KafkaError, KafkaTimeoutError

__all__ = [
    "add_connection_options",
    "parse_key_values",
    "load_config_file",
    "client_properties",
    "check_reachable",
    "new_admin",
    "error_message",
    "named_error_message",
    "wait",
    "silence_stdout",
    "CLI_ADMIN_DEFAULTS",
]

# The command-line tools wait less than a long-lived client would (Kafka's tools use the admin defaults; we
# keep them overridable through --command-config).
CLI_ADMIN_DEFAULTS = {"default.api.timeout.ms": "30000", "request.timeout.ms": "15000"}
PROBE_TIMEOUT_S = 5.0


def add_connection_options(p: argparse.ArgumentParser, *, config_flags: Iterable[str] = ("--command-config",),
                           required: bool = False) -> None:
    p.add_argument("--bootstrap-server", metavar="<String: server to connect to>", required=required,
                   help="REQUIRED (unless the config file sets bootstrap.servers): the Kafka server(s) to connect "
                        "to, host:port[,host:port...]")
    flags = list(config_flags)
    p.add_argument(*flags, dest="command_config", metavar="<String: config file>",
                   help="a properties file with client configs (bootstrap.servers, request.timeout.ms, ...)")


def parse_key_values(items: Iterable[str] | None, option: str) -> dict[str, str]:
    """``["a=1", "b=x=y"]`` → ``{"a": "1", "b": "x=y"}``; a missing ``=`` is a CliError naming ``option``."""
    out: dict[str, str] = {}
    for item in items or ():
        if "=" not in item:
            raise CliError(f"Invalid {option} value '{item}': expected key=value", 2)
        key, value = item.split("=", 1)
        key = key.strip()
        if not key:
            raise CliError(f"Invalid {option} value '{item}': empty key", 2)
        out[key] = value  # values verbatim: separators such as ' => ' keep their blanks (as in Kafka)
    return out


def load_config_file(path: str | None) -> dict[str, str]:
    if not path:
        return {}
    from strom.config.properties import load_properties_file

    try:
        return {k: v.strip() for k, v in load_properties_file(path).items()}
    except ConfigError as e:
        raise CliError(str(e), 2) from None


def client_properties(args: argparse.Namespace, *overrides: Mapping[str, str]) -> dict[str, str]:
    """``--command-config`` file, then each override mapping, then ``--bootstrap-server`` (which wins)."""
    props = load_config_file(getattr(args, "command_config", None))
    for extra in overrides:
        props.update(extra)
    bootstrap = getattr(args, "bootstrap_server", None)
    if bootstrap:
        props["bootstrap.servers"] = bootstrap
    if not props.get("bootstrap.servers"):
        raise CliError("Missing required argument \"[bootstrap-server]\"", 2)
    return props


def _addresses(bootstrap: str) -> list[tuple[str, int]]:
    from strom.config.common_client_configs import parse_bootstrap_servers

    try:
        return parse_bootstrap_servers([s for s in bootstrap.split(",") if s.strip()])
    except ConfigError as e:
        raise CliError(str(e), 2) from None


def check_reachable(bootstrap: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail fast with one line when no bootstrap server accepts a TCP connection."""
    problems = []
    for host, port in _addresses(bootstrap):
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return
        except OSError as e:
            reason = e.strerror or type(e).__name__
            if isinstance(e, socket.gaierror):
                reason = f"unknown host ({e.strerror})"
            elif isinstance(e, TimeoutError):
                reason = "connection timed out"
            problems.append(f"{host}:{port} ({reason})")
    raise CliError(f"Cannot connect to the broker at {', '.join(problems)}. Is the broker running?", 1)


def new_admin(args: argparse.Namespace, *, lenient: bool = False) -> Any:
    """An AdminClient for the command's ``--bootstrap-server`` / ``--command-config``. ``lenient`` drops keys
    the admin client does not know (a producer or consumer config file used by the console tools)."""
    from strom.admin import AdminClient
    from strom.admin.config import ADMIN_CONFIG_DEF

    props = dict(CLI_ADMIN_DEFAULTS)
    given = client_properties(args)
    if lenient:
        given = {k: v for k, v in given.items() if ADMIN_CONFIG_DEF.canonical_name(k) is not None}
    props.update(given)
    check_reachable(props["bootstrap.servers"])
    try:
        return AdminClient(props)
    except ConfigError as e:
        raise CliError(f"Invalid client configuration: {e}", 2) from None


def error_message(e: BaseException) -> str:
    """The one line a user sees for a client error: the broker's own message when it sent one."""
    if isinstance(e, BrokerResponseError):
        return e.message or e.name
    if isinstance(e, KafkaTimeoutError):
        return f"Timed out: {e}" if "imed out" not in str(e) else str(e)
    if isinstance(e, KafkaError):
        cause = e.__cause__
        return f"{e}: {error_message(cause)}" if cause is not None and str(cause) else str(e)
    return str(e) or type(e).__name__


def named_error_message(e: BaseException) -> str:
    """:func:`error_message` led by the error code's name for a broker's error (``INVALID_REQUEST: ...``), as
    Kafka's config and ACL tools print them."""
    return f"{e.name}: {error_message(e)}" if isinstance(e, BrokerResponseError) else error_message(e)


def silence_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so the interpreter's final flush stays quiet."""
    import os
    import sys

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def wait(future: Future[Any], timeout_s: float | None = None) -> Any:
    """``future.result()``; a concurrent.futures timeout becomes :class:`KafkaTimeoutError`."""
    from concurrent.futures import TimeoutError as FutureTimeout

    try:
        return future.result(timeout_s)
    except FutureTimeout:
        raise KafkaTimeoutError("Timed out waiting for the operation to complete") from None
