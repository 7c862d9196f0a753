"""Shared fixtures (a real broker subprocess on loopback) and the skip report.

A test that skips did not run. At the end of every run the skips are counted and grouped by reason, and the
run fails (exit status 1) when any test under tests/spark, tests/interop, tests/cluster or tests/integration
skipped: whatever those need (Java, kcat, third-party clients) is installed by the project's own files
(pyproject extras, the Makefile), so a skip there means the set-up is broken, not that the test may pass.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.broker_process import BrokerProcess

MUST_NOT_SKIP = ("spark", "interop", "cluster", "integration")
_TESTS = Path(__file__).parent
_skips: list[tuple[str, str]] = []  # (node id, reason)
_WORKER_SKIPS = "strom_collect_skips"  # key of xdist's workeroutput: collection-time skips seen by a worker


def _skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


_collect_skips: list[tuple[str, str]] = []  # the part of _skips found while collecting


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:
        _skips.append((report.nodeid, _skip_reason(report)))
        _collect_skips.append(_skips[-1])


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skips.append((report.nodeid, _skip_reason(report)))


def _must_not_skip(nodeid: str, rootpath: Path) -> bool:
    path = (rootpath / nodeid.split("::")[0]).resolve()
    try:
        parts = path.relative_to(_TESTS).parts
    except ValueError:
        return False
    return bool(parts) and parts[0] in MUST_NOT_SKIP


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    write = terminalreporter.write_line
    if not _skips:
        write("skipped: 0")
        return
    write(f"skipped: {len(_skips)}, by reason:")
    for reason, n in Counter(reason for _, reason in _skips).most_common():
        write(f"  {n:4d}  {reason}")
    forbidden = [nodeid for nodeid, _ in _skips if _must_not_skip(nodeid, config.rootpath)]
    if forbidden:
        write(f"FAILED: {len(forbidden)} test(s) under tests/{{{','.join(MUST_NOT_SKIP)}}} skipped "
              "(they must run; install what they need):", red=True)
        for nodeid in forbidden:
            write(f"  {nodeid}", red=True)


# The longest test files, started first: with two xdist workers a long file that starts last is the run's tail.
SLOW_FIRST = ("tests/spark/test_discovery.py", "tests/integration/test_readme.py", "tests/interop/test_security_clients.py",
              "tests/spark/test_demo.py", "tests/cluster/test_transactions_cluster.py",
              "tests/cluster/test_inter_broker_security.py")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow files first, in SLOW_FIRST's order; every other test keeps its place (the sort is stable, so each
    file's tests stay together and in order)."""
    rank = {path: i for i, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """pytest-xdist: a worker's collection-time skips (a module skipped at import) are reported in the worker
    only; the worker hands them over in its ``workeroutput`` (every worker collects every module: deduplicated)."""
    seen = set(_skips)
    for nodeid, reason in getattr(node, "workeroutput", {}).get(_WORKER_SKIPS, []):
        if (nodeid, reason) not in seen:
            seen.add((nodeid, reason))
            _skips.append((nodeid, reason))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller reports (test-level skips reach it directly)
        workeroutput[_WORKER_SKIPS] = _collect_skips
        return
    if any(_must_not_skip(nodeid, session.config.rootpath) for nodeid, _ in _skips) \
            and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED



# What Kafka's own integration tests set: a new group's first member is not held 3 s waiting for others (tests of
# the delay itself configure it).
TEST_BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker per test module (data in a fresh temp dir)."""
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("broker") / "data", overrides=TEST_BROKER_OVERRIDES)
    b.start()
    yield b
    b.stop()
    b.cleanup()


@pytest.fixture
def fresh_broker(tmp_path) -> Iterator[BrokerProcess]:  # type: ignore[no-untyped-def]
    """A broker for one test (restart/crash tests)."""
    b = BrokerProcess(data_dir=tmp_path / "data", overrides=TEST_BROKER_OVERRIDES)
    yield b
    b.cleanup()


def have_kcat() -> bool:
    return shutil.which("kcat") is not None
