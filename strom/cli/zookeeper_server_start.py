"""Start a ZooKeeper server (Kafka's zookeeper-server-start.sh), from Debian's zookeeper package.

Examples:
  strom zookeeper-server-start config/zookeeper.properties           # foreground; Ctrl-C or SIGTERM stops it
  strom zookeeper-server-start -daemon config/zookeeper.properties   # detached; log in $LOG_DIR/zookeeper.out
  strom zookeeper-server-stop

The file is ZooKeeper's own (dataDir, clientPort, tickTime, maxClientCnxns, admin.enableServer, initLimit,
syncLimit, 4lw.commands.whitelist, ...); it is checked first so a typo, a taken port or a missing java is one
clear line. In the foreground the process becomes the java process (as Kafka's script execs java), so
signals reach ZooKeeper directly. The pid is kept in <dataDir>/zookeeper_server.pid.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from strom.cli.errors import CliError
from strom.cli.zookeeper_server import (
    load_zookeeper_config,
    prepare,
    start_daemon,
    wait_until_serving,
    write_pid_file,
)
from strom.common.errors import ConfigError

__all__ = ["add_arguments", "run"]

START_TIMEOUT_S = 60.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-daemon", dest="daemon", action="store_true",
                   help="run in the background (log in $LOG_DIR/zookeeper.out, LOG_DIR defaults to ./logs)")
    p.add_argument("config_file", help="zookeeper.properties")


def _failure_line(log: Path, offset: int) -> str:
    """The most telling line ZooKeeper logged since ``offset`` (its exception), for a one-line error."""
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if "Exception" in line or "Error:" in line or ("ERROR" in line and "Exiting JVM" not in line):
            return line.strip()
    return lines[-1].strip() if lines else ""


def run(args: argparse.Namespace) -> int:
    try:
        config = load_zookeeper_config(args.config_file)
        if not args.daemon:
            cmd = prepare(config)
            write_pid_file(config, os.getpid())  # exec keeps the pid: the file names the java process
            sys.stdout.flush()
            sys.stderr.flush()
            os.execv(cmd[0], cmd)
        log_dir = Path(os.environ.get("LOG_DIR", "logs"))
        log = log_dir / "zookeeper.out"
        offset = log.stat().st_size if log.exists() else 0
        proc = start_daemon(config, log_dir)
    except ConfigError as e:
        raise CliError(str(e), code=1) from None
    except OSError as e:
        raise CliError(f"Cannot start ZooKeeper: {e.strerror or e}", code=1) from None
    if wait_until_serving(config, proc, START_TIMEOUT_S):
        print(f"ZooKeeper started (pid {proc.pid}) on {config.connect_host}:{config.client_port}; log: {log}")
        return 0
    if proc.poll() is None:
        proc.terminate()
        raise CliError(f"ZooKeeper did not accept connections on port {config.client_port} within "
                       f"{START_TIMEOUT_S:.0f} s (see {log})")
    detail = _failure_line(log, offset)
    raise CliError(f"ZooKeeper exited with code {proc.returncode}" + (f": {detail}" if detail else "")
                   + f" (see {log})")
