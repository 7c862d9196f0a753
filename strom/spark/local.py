"""A quiet ``local[N]`` SparkSession with ``format("strom")`` registered (demo, CLI, benchmarks)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["check_requirements", "local_session", "stop_session", "shutdown_jvm"]

_LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def check_requirements() -> str | None:
    """Why Spark cannot run here (no Java, no pyspark/pyarrow), or ``None``."""
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        return "Java was not found (Spark needs Java 17 or 21 on PATH or JAVA_HOME)"
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as e:
        return f"{e.name} is not installed: pip install 'strom[spark]' (or run 'make demo')"
    return None


def local_session(app: str = "strom", cores: int = 2, conf: Mapping[str, str] | None = None,
                  say: Callable[[str], None] | None = None, log_dir: str | os.PathLike[str] | None = None) -> Any:
    """Start (or get) a local session; ``say`` gets a line every few seconds while the JVM starts."""
    os.environ["PYSPARK_PYTHON"] = sys.executable  # executors' Python workers must be this interpreter
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import strom.spark

    log4j = Path(log_dir or tempfile.gettempdir()) / "strom-spark-log4j2.properties"
    log4j.write_text(_LOG4J)
    builder = (SparkSession.builder.master(f"local[{cores}]").appName(app)
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(cores)).config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
               .config("spark.sql.streaming.stopTimeout", "30s"))
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    done = threading.Event()
    if say is not None:
        t0 = time.monotonic()

        def tick() -> None:
            while not done.wait(2.0):
                say(f"  ... still starting Spark ({time.monotonic() - t0:.0f}s)")

        threading.Thread(target=tick, name="spark-start-ticker", daemon=True).start()
    try:
        spark = builder.getOrCreate()
    finally:
        done.set()
    spark.sparkContext.setLogLevel("ERROR")
    strom.spark.register(spark)
    return spark


def stop_session(spark: Any, timeout: float = 30.0) -> None:
    """Stop the session's queries and context, then the JVM itself (and wait for it to exit)."""
    for q in spark.streams.active:
        q.stop()
    spark.stop()
    shutdown_jvm(timeout)


def shutdown_jvm(timeout: float = 30.0) -> None:
    """End the JVM PySpark started in this process, if any (after ``spark.stop()``)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    # spark.stop() asked PySpark's accumulator server to stop; its handler notices within a second. Ending the
    # JVM before that makes the handler read EOF and print a traceback.
    time.sleep(1.2)
    proc = getattr(gateway, "proc", None)
    try:
        gateway.shutdown()
    finally:
        SparkContext._gateway = None
        SparkContext._jvm = None
    if proc is not None:
        if proc.stdin is not None:
            proc.stdin.close()  # the JVM exits when this pipe closes
        try:
            proc.wait(timeout)
        except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired
            proc.kill()
            proc.wait(10)
