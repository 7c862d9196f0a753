"""Spark fixtures: one ``local[2]`` session per module, strom registered, Python workers on this interpreter.

Tests that need Spark take the ``spark`` fixture and are skipped when pyspark (>= 4.2), pyarrow or Java is
missing; the unit tests of the pure modules (options, offsets, planning) run everywhere. Modules share the JVM
(a new SparkContext per module); it is shut down when the test session ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def _jvm() -> Iterator[None]:
    yield
    from strom.spark.local import shutdown_jvm

    shutdown_jvm()


@pytest.fixture(scope="module")
def spark(request: pytest.FixtureRequest, _jvm: None) -> Iterator[Any]:
    pytest.importorskip("pyspark", minversion="4.2")
    pytest.importorskip("pyarrow")
    from strom.spark.local import check_requirements, local_session

    problem = check_requirements()
    if problem:
        pytest.skip(problem)
    session = local_session(f"strom-tests-{request.module.__name__}",
                            conf={"spark.driver.memory": "1g"})
    try:
        yield session
    finally:
        for q in session.streams.active:
            q.stop()
        session.stop()
