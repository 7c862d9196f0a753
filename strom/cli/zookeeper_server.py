"""Run a ZooKeeper server from Debian's ``zookeeper`` package: the code behind ``strom zookeeper-server-start``
and ``strom zookeeper-server-stop`` (Kafka's ``bin/zookeeper-server-start.sh`` / ``zookeeper-server-stop.sh``).

strom ships no consensus of its own: cluster mode runs on a real ZooKeeper 3.8 server, started here as
``java -cp <jars> org.apache.zookeeper.server.quorum.QuorumPeerMain <zookeeper.properties>``, exactly the main
class Kafka's script runs. ZooKeeper reads the properties file itself; this module only checks it first so a
typo or a taken port is one clear line instead of a Java stack trace.

Where things are:
- jars: ``$ZOOKEEPER_CLASSPATH`` when set, else ``/usr/share/java/zookeeper.jar`` (Debian's ``libzookeeper-java``;
  its manifest's ``Class-Path`` names its dependencies) or ``$ZOOKEEPER_HOME/lib/*.jar`` (Apache's tarball);
  ``slf4j-simple`` is added as the logging binding when present (log lines go to stderr);
- pid file: ``<dataDir>/zookeeper_server.pid`` (where ZooKeeper's own ``zkServer.sh`` keeps it), written for
  both foreground and ``-daemon`` runs, so ``zookeeper-server-stop`` finds either;
- ``-daemon`` log: ``$LOG_DIR/zookeeper.out`` (``LOG_DIR`` defaults to ``./logs``, as Kafka's scripts do);
- JVM options: Kafka's variables ``KAFKA_HEAP_OPTS`` (default ``-Xmx512M -Xms512M``, Kafka's for ZooKeeper),
  ``KAFKA_JVM_PERFORMANCE_OPTS`` and ``KAFKA_OPTS``.

Every java process started here carries ``-Dstrom.zookeeper=true``: ``zookeeper-server-stop`` without a file
stops those (Kafka's script stops every ``QuorumPeerMain`` on the machine; strom leaves ZooKeepers it did not
start alone).

Functions, no shared state; thread-safe.
"""

from __future__ import annotations

import difflib
import errno
import os
import shlex
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from strom.cli.processes import cmdline, terminate_and_wait
from strom.common.errors import ConfigError
from strom.config.properties import load_properties_file

__all__ = [
    "ZooKeeperConfig", "ZooKeeperNotInstalledError", "parse_zookeeper_config", "load_zookeeper_config",
    "java_command", "shell_command", "check_port_free", "pid_file", "write_pid_file", "start_daemon", "wait_until_serving",
    "find_server_pids", "stop_servers", "MAIN_CLASS", "STROM_MARKER",
]

MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
SHELL_CLASS = "org.apache.zookeeper.ZooKeeperMain"
STROM_MARKER = "-Dstrom.zookeeper=true"
PID_FILE_NAME = "zookeeper_server.pid"
DEFAULT_HEAP_OPTS = "-Xmx512M -Xms512M"

# ZooKeeper 3.8's QuorumPeerConfig keys, with the type each value must parse as.
_INT_KEYS = {
    "clientPort", "secureClientPort", "observerMasterPort", "tickTime", "maxClientCnxns", "minSessionTimeout",
    "maxSessionTimeout", "initLimit", "syncLimit", "connectToLearnerMasterLimit", "electionAlg",
    "autopurge.snapRetainCount", "autopurge.purgeInterval", "clientPortListenBacklog", "admin.serverPort",
    "admin.idleTimeout", "snapCount", "snapSizeLimitInKb", "preAllocSize", "globalOutstandingLimit",
    "fsync.warningthresholdms", "maxResponseCacheSize", "maxGetChildrenResponseCacheSize", "commitLogCount",
    "quorum.cnxn.threads.size", "jvm.pause.info-threshold.ms", "jvm.pause.warn-threshold.ms",
    "jvm.pause.sleep.time.ms", "electionPortBindRetry", "connectionMaxTokens", "connectionTokenFillTime",
    "connectionTokenFillCount", "connectionFreezeTime", "flushDelay", "maxWriteQueuePollTime", "maxBatchSize",
    "requestThrottleLimit", "requestThrottleStallTime", "largeRequestMaxBytes", "largeRequestThreshold",
    "nodeCount",
}
_BOOL_KEYS = {
    "admin.enableServer", "standaloneEnabled", "reconfigEnabled", "quorumListenOnAllIPs", "syncEnabled",
    "localSessionsEnabled", "localSessionsUpgradingEnabled", "sslQuorum", "portUnification",
    "sslQuorumReloadCertFiles", "client.portUnification", "multiAddress.enabled",
    "multiAddress.reachabilityCheckEnabled", "jvm.pause.monitor", "digest.enabled", "leaderServes",
    "skipACL", "forceSync", "quorum.auth.enableSasl", "quorum.auth.learnerRequireSasl",
    "quorum.auth.serverRequireSasl", "audit.enable", "enforceQuota", "serializeLastProcessedZxid.enabled",
    "ssl.clientAuth.enabled", "zookeeper.enforceQuota",
}
_STRING_KEYS = {
    "dataDir", "dataLogDir", "clientPortAddress", "secureClientPortAddress", "peerType", "dynamicConfigFile",
    "4lw.commands.whitelist", "admin.serverAddress", "admin.commandURL", "serverCnxnFactory",
    "metricsProvider.className", "quorum.auth.learner.saslLoginContext", "quorum.auth.server.saslLoginContext",
    "quorum.auth.kerberos.servicePrincipal", "multiAddress.reachabilityCheckTimeoutMs",
    "DigestAuthenticationProvider.superDigest", "jute.maxbuffer", "sessionRequireClientSASLAuth",
}
# Families of keys ZooKeeper accepts under a prefix (ensemble members, TLS, auth and metrics plug-ins).
_PREFIXES = ("server.", "group.", "weight.", "ssl.", "ssl.quorum.", "authProvider.", "metricsProvider.",
             "zookeeper.", "admin.", "quorum.", "multiAddress.", "kerberos.", "sasl.")
_KNOWN = _INT_KEYS | _BOOL_KEYS | _STRING_KEYS


class ZooKeeperNotInstalledError(ConfigError):
    """No java or no ZooKeeper jars on this machine (``make test`` installs both with apt-get)."""


@dataclass(frozen=True, slots=True)
class ZooKeeperConfig:
    """The checked settings of one ``zookeeper.properties`` (what strom itself needs of them)."""

    path: Path
    data_dir: Path
    client_port: int
    client_port_address: str | None
    tick_time_ms: int
    properties: Mapping[str, str]

    @property
    def is_ensemble_member(self) -> bool:
        """A ``server.N`` line makes this server one member of a replicated ensemble (quorum mode)."""
        return any(k.startswith("server.") for k in self.properties)

    @property
    def connect_host(self) -> str:
        """Where a local client reaches the server (the wildcard address binds every interface)."""
        addr = self.client_port_address
        return "127.0.0.1" if addr in (None, "", "0.0.0.0", "::") else str(addr)


def _int(key: str, value: str, low: int, high: int = 2**31 - 1) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise ConfigError(f"Invalid value {value!r} for ZooKeeper config '{key}': expected an integer") from None
    if not low <= n <= high:
        raise ConfigError(f"Invalid value {n} for ZooKeeper config '{key}': must be in [{low}, {high}]")
    return n


def parse_zookeeper_config(props: Mapping[str, str], path: str | os.PathLike[str] = "zookeeper.properties",
                           ) -> ZooKeeperConfig:
    """Check ``props`` as ZooKeeper 3.8 will read them; raise :class:`ConfigError` naming the bad key."""
    for key, value in props.items():
        if key in _INT_KEYS:
            _int(key, value, 0 if key not in ("tickTime", "clientPort") else 1,
                 65535 if key.endswith("Port") or key == "admin.serverPort" else 2**31 - 1)
        elif key in _BOOL_KEYS:
            if value.strip().lower() not in ("true", "false"):
                raise ConfigError(f"Invalid value {value!r} for ZooKeeper config '{key}': expected true or false")
        elif key not in _STRING_KEYS and not key.startswith(_PREFIXES):
            close = difflib.get_close_matches(key, sorted(_KNOWN), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"Unknown ZooKeeper config key '{key}' in {path}{hint}")
    data_dir = props.get("dataDir", "").strip()
    if not data_dir:
        raise ConfigError(f"Missing required ZooKeeper config 'dataDir' in {path}")
    if "clientPort" not in props:
        raise ConfigError(f"Missing required ZooKeeper config 'clientPort' in {path}")
    tick = _int("tickTime", props.get("tickTime", "3000"), 1)
    for key in ("initLimit", "syncLimit"):
        if key in props and int(props[key]) < 1:
            raise ConfigError(f"Invalid value {props[key]} for ZooKeeper config '{key}': must be at least 1")
    min_s = int(props.get("minSessionTimeout", str(2 * tick)))
    max_s = int(props.get("maxSessionTimeout", str(20 * tick)))
    if min_s > max_s:
        raise ConfigError(f"ZooKeeper config minSessionTimeout ({min_s}) must not exceed maxSessionTimeout ({max_s})")
    addr = props.get("clientPortAddress", "").strip() or None
    return ZooKeeperConfig(path=Path(path), data_dir=Path(data_dir), client_port=int(props["clientPort"]),
                           client_port_address=addr, tick_time_ms=tick, properties=dict(props))


def load_zookeeper_config(path: str | os.PathLike[str]) -> ZooKeeperConfig:
    """Read and check a ``zookeeper.properties`` file (a missing file is a :class:`ConfigError`)."""
    if not Path(path).is_file():
        raise ConfigError(f"ZooKeeper config file {path} does not exist")
    return parse_zookeeper_config(load_properties_file(path), path)


def _classpath() -> str:
    explicit = os.environ.get("ZOOKEEPER_CLASSPATH")
    if explicit:
        return explicit
    jars: list[str] = []
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:  # an explicit installation: only its jars
        jars = sorted(str(p) for p in Path(home, "lib").glob("*.jar"))
    elif Path("/usr/share/java/zookeeper.jar").is_file():
        jars = ["/usr/share/java/zookeeper.jar"]
        if Path("/usr/share/java/slf4j-simple.jar").is_file():
            jars.append("/usr/share/java/slf4j-simple.jar")
    if not jars:
        raise ZooKeeperNotInstalledError(
            f"ZooKeeper is not installed: no jars in {home}/lib" if home else
            "ZooKeeper is not installed: no /usr/share/java/zookeeper.jar (install it with "
            "'apt-get install zookeeper' or 'make system-deps', or set ZOOKEEPER_HOME to Apache's tarball)")
    return ":".join(jars)


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").is_file():
        return str(Path(home, "bin", "java"))
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if d and os.access(Path(d, "java"), os.X_OK):
            return str(Path(d, "java"))
    raise ZooKeeperNotInstalledError("java is not installed (ZooKeeper needs a Java runtime: "
                                     "'apt-get install default-jre-headless' or 'make system-deps')")


def java_command(config_path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> list[str]:
    """The command line that runs ZooKeeper on ``config_path`` (Kafka's kafka-run-class.sh equivalent)."""
    return _run_class(MAIN_CLASS, [str(Path(config_path).resolve())], env, server=True)


def shell_command(args: list[str], env: Mapping[str, str] | None = None) -> list[str]:
    """The command line of ZooKeeper's own command-line client (``ZooKeeperMain``), as Kafka's
    zookeeper-shell.sh runs it: warnings only on stderr, a small heap."""
    return _run_class(SHELL_CLASS, args, env, server=False)


def _run_class(main_class: str, args: list[str], env: Mapping[str, str] | None, server: bool) -> list[str]:
    env = os.environ if env is None else env
    opts = shlex.split(env.get("KAFKA_HEAP_OPTS", DEFAULT_HEAP_OPTS if server else "-Xmx256M"))
    opts += shlex.split(env.get("KAFKA_JVM_PERFORMANCE_OPTS", ""))
    opts += shlex.split(env.get("KAFKA_OPTS", ""))
    # slf4j-simple: time-stamped lines on stderr, like Kafka's console log4j appender (tools: warnings only).
    logging_opts = ["-Dorg.slf4j.simpleLogger.showDateTime=true",
                    "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss,SSS"]
    marker = [STROM_MARKER] if server else []
    if not server:  # ServiceUtils logs every exit at ERROR, even a clean one
        logging_opts += ["-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                         "-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.util.ServiceUtils=off"]
    return [_java(), *opts, *logging_opts, *marker, "-cp", _classpath(), main_class, *args]


def check_port_free(host: str | None, port: int) -> None:
    """Raise :class:`ConfigError` when ``host:port`` cannot be bound (as ZooKeeper binds it, SO_REUSEADDR on)."""
    family = socket.AF_INET6 if host and ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host or "", port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ConfigError(f"Cannot start ZooKeeper: port {port} is already in use "
                                  f"(clientPort in the config)") from None
            raise ConfigError(f"Cannot start ZooKeeper on {host or '0.0.0.0'}:{port}: {e.strerror or e}") from None


def pid_file(config: ZooKeeperConfig) -> Path:
    return config.data_dir / PID_FILE_NAME


def write_pid_file(config: ZooKeeperConfig, pid: int) -> None:
    config.data_dir.mkdir(parents=True, exist_ok=True)
    tmp = pid_file(config).with_suffix(".tmp")
    tmp.write_text(f"{pid}\n")
    os.replace(tmp, pid_file(config))


def prepare(config: ZooKeeperConfig) -> list[str]:
    """Everything that can fail before java runs: tools installed, dataDir writable, port free."""
    cmd = java_command(config.path)
    try:
        config.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"Cannot create ZooKeeper dataDir {config.data_dir}: {e.strerror or e}") from None
    if not os.access(config.data_dir, os.W_OK):
        raise ConfigError(f"ZooKeeper dataDir {config.data_dir} is not writable")
    check_port_free(config.client_port_address, config.client_port)
    return cmd


def start_daemon(config: ZooKeeperConfig, log_dir: str | os.PathLike[str]) -> subprocess.Popen[bytes]:
    """Start ZooKeeper detached (own session, stdin closed, output to ``<log_dir>/zookeeper.out``)."""
    cmd = prepare(config)
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(log_dir) / "zookeeper.out", "ab") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    write_pid_file(config, proc.pid)
    return proc


def wait_until_serving(config: ZooKeeperConfig, proc: subprocess.Popen[bytes] | None, timeout_s: float) -> bool:
    """Poll until the server is up; False when ``proc`` exited or the deadline passed. A standalone server must
    serve; a member of an ensemble only has to answer on its client port, since it cannot serve before a quorum
    of its peers runs (and a script starts the members one after another)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        if _answers_srvr(config.connect_host, config.client_port, require_serving=not config.is_ensemble_member):
            return True
        time.sleep(0.05)
    return False


def _answers_srvr(host: str, port: int, require_serving: bool = True) -> bool:
    """Ask ZooKeeper's ``srvr`` four-letter word (whitelisted by default): a server still loading its
    database answers "not currently serving"; one that excludes srvr from its whitelist still answers, and
    that too means it is up. A bare connect-and-close would make ZooKeeper log an exception."""
    try:
        with socket.create_connection((host, port), timeout=1.0) as s:
            s.sendall(b"srvr")
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
    except OSError:
        return False
    if not require_serving and b"not currently serving" in reply:
        return True
    return reply.startswith(b"Zookeeper version") or b"whitelist" in reply


def _is_strom_zookeeper(pid: int, config_path: Path | None = None) -> bool:
    args = cmdline(pid)
    if MAIN_CLASS not in args or STROM_MARKER not in args:
        return False
    return config_path is None or str(config_path.resolve()) in args


def find_server_pids(config: ZooKeeperConfig | None = None) -> list[int]:
    """ZooKeeper servers strom started: the one of ``config`` (its pid file), or all of this user's."""
    if config is not None:
        try:
            pid = int(pid_file(config).read_text().strip())
        except (OSError, ValueError):
            return []
        return [pid] if _is_strom_zookeeper(pid, config.path) else []
    uid = os.getuid()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid != uid:
                    continue
            except OSError:
                continue
            if _is_strom_zookeeper(int(entry.name)):
                pids.append(int(entry.name))
    return sorted(pids)


def stop_servers(pids: list[int], timeout_s: float = 30.0) -> list[int]:
    """SIGTERM each pid and wait for it to exit; returns the pids still alive at the deadline."""
    return terminate_and_wait(pids, timeout_s)
