"""Start or stop a local cluster to try cluster mode: one ZooKeeper and N brokers on this machine.

Examples:
  strom cluster up                       # ZooKeeper on 127.0.0.1:2181, brokers 0,1,2 on 9092..9094
  strom cluster up --brokers 3 --dir /tmp/strom-cluster --port 19092 --zookeeper-port 12181
  strom cluster up --override min.insync.replicas=2 --override default.replication.factor=3
  strom cluster down                     # brokers first (SIGTERM, controlled shutdown), then ZooKeeper

'up' writes zookeeper.properties and server-<id>.properties into --dir (default ./strom-cluster), then runs
what a start script runs: 'strom zookeeper-server-start -daemon' and 'strom broker -daemon' for each broker.
The files stay: edit them and run 'up' again, or start single brokers with 'strom broker -daemon FILE'.
ZooKeeper ticks are 500 ms and zookeeper.session.timeout.ms is 6000, so a killed broker is noticed in seconds.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from pathlib import Path

from strom.cli.errors import CliError

__all__ = ["add_arguments", "run"]

ZK_FILE = "zookeeper.properties"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["up", "down"], help="start or stop the cluster")
    p.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    p.add_argument("--dir", default="strom-cluster", help="where configs, data and logs go (default ./strom-cluster)")
    p.add_argument("--port", type=int, default=9092, help="first broker's port; broker i listens on PORT+i")
    p.add_argument("--zookeeper-port", type=int, default=2181, help="ZooKeeper's client port (default 2181)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker property for every broker (repeatable)")


def _strom(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [x for x in (result.stderr or result.stdout).strip().splitlines() if x.strip()]
    return lines[-1].removeprefix("Error: ") if lines else f"exit code {result.returncode}"


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _broker_configs(base: Path) -> list[Path]:
    return sorted(base.glob("server-*.properties"), key=lambda p: int(p.stem.split("-")[1]))


def _up(args: argparse.Namespace, base: Path) -> int:
    if not 1 <= args.brokers <= 32:
        raise CliError(f"--brokers must be between 1 and 32, got {args.brokers}", code=2)
    overrides = {}
    for item in args.override:
        if "=" not in item:
            raise CliError(f"Invalid --override {item!r}: expected KEY=VALUE", code=2)
        k, v = item.split("=", 1)
        overrides[k.strip()] = v.strip()
    ports = [args.port + i for i in range(args.brokers)]
    if not (0 < args.port and ports[-1] < 65536):
        raise CliError(f"Invalid --port {args.port}", code=2)
    from strom.cli.broker_daemon import PID_FILE_NAME, find_broker_pids

    running = [c for c in _broker_configs(base)
               if find_broker_pids(base / f"broker-{c.stem.split('-')[1]}" / PID_FILE_NAME)]
    if running:
        raise CliError(f"A cluster is already running in {base} (stop it with 'strom cluster down --dir {base}')")
    taken = [p for p in [args.zookeeper_port, *ports] if not _port_free(p)]
    if taken:
        raise CliError(f"Port(s) {', '.join(map(str, taken))} already in use on 127.0.0.1 "
                       "(choose others with --port / --zookeeper-port)")
    base.mkdir(parents=True, exist_ok=True)
    for old in _broker_configs(base):
        old.unlink()
    zk_file = base / ZK_FILE
    zk_file.write_text(
        "# ZooKeeper of the local cluster made by 'strom cluster up'\n"
        f"dataDir={base / 'zookeeper'}\nclientPort={args.zookeeper_port}\nclientPortAddress=127.0.0.1\n"
        "tickTime=500\nmaxClientCnxns=0\nadmin.enableServer=false\n")
    connect = f"127.0.0.1:{args.zookeeper_port}/kafka"
    for i, port in enumerate(ports):
        props = {"broker.id": str(i), "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                 "log.dirs": str(base / f"broker-{i}"), "zookeeper.connect": connect,
                 "zookeeper.session.timeout.ms": "6000", **overrides}
        (base / f"server-{i}.properties").write_text(
            "# broker of the local cluster made by 'strom cluster up'\n"
            + "".join(f"{k}={v}\n" for k, v in props.items()))
    zk = _strom("zookeeper-server-start", "-daemon", str(zk_file), env={"LOG_DIR": str(base / "logs")})
    if zk.returncode != 0:
        raise CliError(f"ZooKeeper did not start: {_one_line(zk)}")
    for cfg in _broker_configs(base):
        started = _strom("broker", "-daemon", str(cfg))
        if started.returncode != 0:
            _down(base, quiet=True)
            raise CliError(f"Broker {cfg.stem.split('-')[1]} did not start: {_one_line(started)} "
                           "(the cluster was stopped again)")
    print(f"ZooKeeper: {connect}")
    print(f"Brokers {','.join(str(i) for i in range(args.brokers))}: "
          f"--bootstrap-server {','.join(f'127.0.0.1:{p}' for p in ports)}")
    print(f"Configs, data and logs in {base}; stop with 'strom cluster down --dir {base}'")
    return 0


def _down(base: Path, quiet: bool = False) -> int:
    stopped = 0
    for cfg in _broker_configs(base):
        result = _strom("broker-stop", str(cfg))
        if result.returncode == 0:
            stopped += 1
            if not quiet:
                print(f"Stopped broker {cfg.stem.split('-')[1]}")
        elif "No kafka server to stop" not in result.stderr and not quiet:
            print(f"Broker {cfg.stem.split('-')[1]}: {_one_line(result)}", file=sys.stderr)
    zk_file = base / ZK_FILE
    if zk_file.exists():
        result = _strom("zookeeper-server-stop", str(zk_file))
        if result.returncode == 0:
            stopped += 1
            if not quiet:
                print("Stopped ZooKeeper")
    if stopped == 0 and not quiet:
        raise CliError(f"No cluster running in {base}")
    return 0


def run(args: argparse.Namespace) -> int:
    base = Path(args.dir).resolve()
    if args.action == "up":
        return _up(args, base)
    return _down(base)
