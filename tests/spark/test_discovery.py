"""``spark.read.format("strom")`` works without ``strom.spark.register(spark)`` in every install mode, as a
new user would try it: strom installed into a fresh venv, editable (``pip install -e``, read on ``local[*]``)
and as a regular wheel (read on a Spark standalone master with one worker, started with pyspark's own
``spark-class``). Spark finds Python data sources by listing the modules on ``sys.path`` (``pyspark_*``
with a ``DefaultSource``); an editable install must therefore put ``pyspark_strom`` on ``sys.path``
(see ``pyproject.toml``).

Each driver runs in the venv's Python from a directory outside the repository (so nothing is imported from
the checkout by accident), with ``PYSPARK_PYTHON`` naming that same interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.broker_process import BrokerProcess, free_port
from tests.repository import copy_repository

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

TOPIC, VALUES = "discovery", [f"v{i}" for i in range(20)]

DRIVER = textwrap.dedent("""
    import json, os, sys
    from pyspark.sql import SparkSession

    master, bootstrap, topic = sys.argv[1:4]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master(master).appName("strom-discovery")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.executor.memory", "512m").config("spark.cores.max", "1")
             .config("spark.ui.enabled", "false").getOrCreate())
    import strom  # only to report where it was imported from
    rows = (spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .load().selectExpr("CAST(value AS STRING) AS v").collect())
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
    on_executor = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("strom").__file__).collect()[0]
    print(json.dumps({"values": sorted(r.v for r in rows), "strom": strom.__file__, "executors": executors,
                      "executor_strom": on_executor}))
    spark.stop()
""")


@pytest.fixture(scope="module")
def topic_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    from strom import KafkaProducer, ProducerRecord

    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("discovery") / "data").start()
    try:
        with KafkaProducer({"bootstrap.servers": b.bootstrap, "key.serializer": "str",
                            "value.serializer": "str"}) as producer:
            for v in VALUES:
                producer.send(ProducerRecord(TOPIC, v))
        yield b
    finally:
        b.stop()
        b.cleanup()


def _venv(path: Path, *install: str) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    python = path / "bin" / "python"
    # --no-compile: pip byte-compiles the ~500 MB of pyspark and pyarrow it installs (about 10 of 23 s here);
    # the modules a run imports are compiled on first use instead
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-compile", *install], capture_output=True,
                          text=True, cwd=path, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return python


@pytest.fixture(scope="module")
def install(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Path]:
    """A fresh venv with strom and its spark extra from a clone of the repository: ``pip install -e clone[spark]``
    or ``pip install clone[spark]`` (pip builds the wheel and installs it into site-packages)."""
    where = tmp_path_factory.mktemp(f"venv-{request.param}")
    source = copy_repository(where / "strom-clone")  # (an editable install builds into its source tree)
    spec = f"{source}[spark]"
    python = _venv(where / "venv", *(["-e", spec] if request.param == "editable" else [spec]))
    return request.param, python, source


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark standalone master with one worker on loopback, from the running pyspark's ``spark-class``."""
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    logs = tmp_path_factory.mktemp("standalone")
    port, ui, worker_ui = free_port(), free_port(), free_port()
    # No PYSPARK_PYTHON here: the executor's Python workers must run the interpreter the driver names.
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env.update({"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(logs / "work")})
    procs = [subprocess.Popen([str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)], env=env,
                              stdout=open(logs / "master.log", "wb"), stderr=subprocess.STDOUT)]
    master = f"spark://127.0.0.1:{port}"
    try:
        procs.append(subprocess.Popen([str(spark_class), "org.apache.spark.deploy.worker.Worker", "--host",
                                       "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port",
                                       str(worker_ui), master], env=env,
                                      stdout=open(logs / "worker.log", "wb"), stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 120
        while True:  # until the master lists one ALIVE worker
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
                    state = json.load(r)
                if [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]:
                    break
            except (OSError, ValueError):  # not listening yet, or a page that is not the JSON (seen once in CI)
                pass
            for p in procs:
                assert p.poll() is None, (logs / "master.log").read_text() + (logs / "worker.log").read_text()
            assert time.monotonic() < deadline, "the standalone worker never registered"
            time.sleep(0.5)
        yield master
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


# Each install mode once and each cluster kind once (a driver run costs a JVM start; the two axes are independent:
# the install decides what is on sys.path, the cluster where the Python workers run).
@pytest.mark.parametrize(("install", "cluster"), [("editable", "local[*]"), ("wheel", "standalone")],
                         indirect=["install"])
def test_format_strom_is_found_without_register(install: tuple[str, Path, Path], cluster: str,
                                                topic_broker: BrokerProcess, request: pytest.FixtureRequest,
                                                tmp_path: Path) -> None:
    mode, python, source = install
    master = request.getfixturevalue("standalone") if cluster == "standalone" else cluster
    script = tmp_path / "driver.py"
    script.write_text(DRIVER, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                                                            "VIRTUAL_ENV", "SPARK_HOME")}
    done = subprocess.run([str(python), str(script), master, topic_broker.bootstrap, TOPIC], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    errors = [line for line in done.stderr.splitlines() if "Exception" in line or "Error" in line]
    assert done.returncode == 0, "\n".join(dict.fromkeys(errors)) or done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["values"] == sorted(VALUES)
    strom_dir = Path(result["strom"]).resolve().parent
    assert Path(result["executor_strom"]).resolve().parent == strom_dir  # executors run the same install
    if mode == "editable":
        assert strom_dir == source / "strom"
    else:
        assert "site-packages" in strom_dir.parts and source not in strom_dir.parents
    if cluster == "standalone":
        assert result["executors"] == 2  # the driver's block manager and the worker's executor
