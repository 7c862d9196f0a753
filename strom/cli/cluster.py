"""Start or stop a local ZooKeeper + N-broker strom cluster in one command (for trying cluster mode).

Examples:
  strom cluster up --brokers 3                  # ZooKeeper on 2181, brokers 0,1,2 on 9092,9093,9094
  strom cluster up --brokers 3 --dir /tmp/c1 --zookeeper-port 0 --broker-port 0   # any free ports
  strom topics --bootstrap-server 127.0.0.1:9092 --create --topic sanguo --partitions 1 --replication-factor 3
  strom cluster down                            # brokers one at a time (SIGTERM: controlled shutdown), then ZooKeeper
  strom cluster down --dir /tmp/c1

'up' writes readable config files under --dir (default ./strom-cluster): zookeeper.properties and
server-<id>.properties (broker.id, listeners, log.dirs, zookeeper.connect with the /kafka chroot), then runs
'strom zookeeper-server-start -daemon' and 'strom broker -daemon' with them, exactly as a user would, and prints
each daemon's pid, port and data dir. Broker ids are 0..N-1, as in Kafka's quickstart. A port of 0 picks a free
one. 'down' runs 'strom broker-stop' for each server-<id>.properties of the dir and then
'strom zookeeper-server-stop'. The data stays in the dir; 'up' again restarts the same cluster (the same
ports and ids are read back from the files, so other options are ignored then).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from strom.broker_process import free_port
from strom.cli.errors import CliError

__all__ = ["add_arguments", "run", "write_configs", "CHROOT"]

CHROOT = "/kafka"
HOST = "127.0.0.1"
ZK_FILE = "zookeeper.properties"
STEP_TIMEOUT_S = 180.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("up", "down"), help="'up' starts the cluster, 'down' stops it")
    p.add_argument("--dir", default="strom-cluster", metavar="DIR",
                   help="where the config files, data and logs live (default: ./strom-cluster)")
    p.add_argument("--brokers", type=int, default=3, metavar="N", help="number of brokers for 'up' (default 3)")
    p.add_argument("--zookeeper-port", type=int, default=2181, metavar="PORT",
                   help="ZooKeeper's client port (default 2181; 0 = any free port)")
    p.add_argument("--broker-port", type=int, default=9092, metavar="PORT",
                   help="the first broker's port; broker i listens on PORT+i (default 9092; 0 = free ports)")


def _check_free(port: int, what: str) -> None:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            raise CliError(f"Port {port} for {what} is already in use on {HOST} (choose another with "
                           f"--{'zookeeper' if what == 'ZooKeeper' else 'broker'}-port, or 0 for a free one)") \
                from None


def _write(path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _broker_files(base: Path) -> list[Path]:
    def broker_id(p: Path) -> int:
        try:
            return int(p.stem.removeprefix("server-"))
        except ValueError:
            return 1 << 30

    return sorted(base.glob("server-*.properties"), key=broker_id)


def write_configs(base: Path, brokers: int, zookeeper_port: int, broker_port: int) -> tuple[Path, list[Path]]:
    """Write zookeeper.properties and server-<id>.properties under ``base``; the files' paths."""
    zk_port = zookeeper_port or free_port()
    _check_free(zk_port, "ZooKeeper")
    ports = [free_port() for _ in range(brokers)] if broker_port == 0 else [broker_port + i for i in range(brokers)]
    for i, port in enumerate(ports):
        _check_free(port, f"broker {i}")
    zk = base / ZK_FILE
    _write(zk, ["# ZooKeeper for the local strom cluster (strom cluster up)",
                f"dataDir={(base / 'zookeeper' / 'data').resolve()}", f"clientPort={zk_port}",
                f"clientPortAddress={HOST}", "tickTime=2000", "maxClientCnxns=0", "admin.enableServer=false"])
    replication = str(min(3, brokers))
    files = []
    for i, port in enumerate(ports):
        f = base / f"server-{i}.properties"
        _write(f, [f"# strom broker {i} of the local cluster (strom cluster up)",
                   f"broker.id={i}", f"listeners=PLAINTEXT://{HOST}:{port}",
                   f"log.dirs={(base / f'broker-{i}' / 'data').resolve()}",
                   f"zookeeper.connect={HOST}:{zk_port}{CHROOT}", "zookeeper.connection.timeout.ms=18000",
                   f"offsets.topic.replication.factor={replication}",
                   f"transaction.state.log.replication.factor={replication}",
                   "group.initial.rebalance.delay.ms=0"])
        files.append(f)
    return zk, files


def _strom(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([sys.executable, "-m", "strom.cli.main", *args], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, env=env, timeout=STEP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CliError(f"'strom {' '.join(args)}' did not finish within {STEP_TIMEOUT_S:.0f} s") from None


def _last_line(out: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in (out.stderr or out.stdout).splitlines() if line.strip()]
    return lines[-1].strip().removeprefix("Error: ") if lines else f"exit code {out.returncode}"


def _up(args: argparse.Namespace, base: Path) -> int:
    zk_file = base / ZK_FILE
    if zk_file.exists() and _broker_files(base):
        zk, files = zk_file, _broker_files(base)
        print(f"Restarting the cluster of {base} ({len(files)} brokers)")
    else:
        if args.brokers < 1:
            raise CliError("--brokers must be at least 1", 2)
        for port, flag in ((args.zookeeper_port, "--zookeeper-port"), (args.broker_port, "--broker-port")):
            if not 0 <= port <= 65535 - args.brokers:
                raise CliError(f"Invalid {flag} {port}: expected 0 (any free port) or a port up to 65535", 2)
        base.mkdir(parents=True, exist_ok=True)
        zk, files = write_configs(base, args.brokers, args.zookeeper_port, args.broker_port)
    (base / "zookeeper").mkdir(exist_ok=True)
    env = {**os.environ, "LOG_DIR": str((base / "zookeeper").resolve())}
    out = _strom("zookeeper-server-start", "-daemon", str(zk), env=env)
    if out.returncode != 0:
        raise CliError(f"ZooKeeper did not start: {_last_line(out)}")
    print(out.stdout.strip())
    broker_env = {k: v for k, v in os.environ.items() if k != "LOG_DIR"}  # stromServer.out beside each pid file
    # The brokers start together: each waits for ZooKeeper, not for the others.
    with ThreadPoolExecutor(len(files)) as pool:
        results = list(pool.map(lambda f: _strom("broker", "-daemon", str(f), env=broker_env), files))
    failed = [(f, r) for f, r in zip(files, results, strict=True) if r.returncode != 0]
    for f, r in zip(files, results, strict=True):
        if r.returncode == 0:
            print(f"{r.stdout.strip()}; config: {f}")
    if failed:
        problems = "; ".join(f"{f.name}: {_last_line(r)}" for f, r in failed)
        raise CliError(f"{len(failed)} broker(s) did not start ({problems}); 'strom cluster down --dir {base}' "
                       "stops the rest")
    bootstrap = ",".join(_listener(f) for f in files)
    print(f"Cluster up: {len(files)} broker(s), ZooKeeper {_zk_connect(files[0])}, data and configs in {base}")
    print(f"bootstrap.servers={bootstrap}")
    return 0


def _props(path: Path) -> dict[str, str]:
    from strom.config.properties import load_properties_file

    return {k: v.strip() for k, v in load_properties_file(path).items()}


def _listener(f: Path) -> str:
    return _props(f)["listeners"].split("://", 1)[1]


def _zk_connect(f: Path) -> str:
    return _props(f)["zookeeper.connect"]


def _down(base: Path) -> int:
    zk_file = base / ZK_FILE
    files = _broker_files(base)
    if not zk_file.exists() and not files:
        raise CliError(f"No strom cluster in {base} (no {ZK_FILE} or server-*.properties there)")
    stopped = 0
    # One broker at a time: each moves its leaderships away (controlled shutdown) while the others still run.
    for f in files:
        out = _strom("broker-stop", str(f))
        if out.returncode == 0:
            print(f"{out.stdout.strip()} ({f.name})")
            stopped += 1
        elif "No kafka server to stop" not in out.stdout + out.stderr:
            raise CliError(f"Cannot stop the broker of {f}: {_last_line(out)}")
    if zk_file.exists():
        out = _strom("zookeeper-server-stop", str(zk_file))
        if out.returncode == 0:
            print(out.stdout.strip())
            stopped += 1
        elif "No zookeeper server to stop" not in out.stdout + out.stderr:
            raise CliError(f"Cannot stop ZooKeeper: {_last_line(out)}")
    if not stopped:
        raise CliError(f"Nothing to stop: the cluster of {base} is not running", plain=False)
    print(f"Cluster down ({base}); its data stays there")
    return 0


def run(args: argparse.Namespace) -> int:
    base = Path(args.dir).resolve()
    return _up(args, base) if args.action == "up" else _down(base)
