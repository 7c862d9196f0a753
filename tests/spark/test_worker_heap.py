"""``freeze_worker_heap``: in a Spark Python worker the objects alive before the first read or write, and again
after a task imported modules, go to the collector's permanent generation (PySpark's daemon runs a full
``gc.collect()`` after every task); nothing is frozen in any other process. Each case runs in a fresh
interpreter: freezing is process-wide."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(120)]


def _run(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_a_spark_worker_freezes_once_what_its_imports_made() -> None:
    got = _run("""
import gc, sys, types
sys.modules["pyspark.worker"] = types.ModuleType("pyspark.worker")  # as in a process PySpark's daemon forked
from strom.spark.reader import freeze_worker_heap
tracked = len(gc.get_objects())
print(freeze_worker_heap(), gc.get_freeze_count() >= tracked, len(gc.get_objects()) < 1000)
later = [[i] for i in range(5000)]  # made after the freeze: still tracked, still collected
print(freeze_worker_heap(), len(gc.get_objects()) >= 5000)
""")
    assert got == ["True", "True", "True", "False", "True"]


def test_a_worker_freezes_again_after_a_task_imported_modules() -> None:
    got = _run("""
import gc, sys, types
sys.modules["pyspark.worker"] = types.ModuleType("pyspark.worker")
from strom.spark.reader import freeze_worker_heap
print(freeze_worker_heap())
assert "xml.dom.minidom" not in sys.modules
import xml.dom.minidom  # as a task importing pandas would
tracked = len(gc.get_objects())
frozen = gc.get_freeze_count()
print(tracked > 100, freeze_worker_heap(), gc.get_freeze_count() - frozen >= tracked, len(gc.get_objects()) < 100)
later = [[i] for i in range(5000)]  # no import since: nothing frozen
print(freeze_worker_heap(), len(gc.get_objects()) >= 5000)
""")
    assert got == ["True", "True", "True", "True", "True", "False", "True"]


def test_nothing_is_frozen_outside_a_spark_worker() -> None:
    got = _run("""
import gc
from strom.spark.reader import freeze_worker_heap
print(freeze_worker_heap(), gc.get_freeze_count())
""")
    assert got == ["False", "0"]
