from __future__ import annotations

import pytest

from strom.storage import log_validator
from strom.storage.log import Log
from strom.storage.log_config import LogConfig
from strom.testing.log_dirs import mount_tmpfs, unmount  # noqa: F401 - used by the tests of this package
from strom.testing.mock_time import MockTime


@pytest.fixture
def mock_time() -> MockTime:
    return MockTime()


@pytest.fixture
def make_log(tmp_path, mock_time):
    """``make_log(**config_props)`` opens (or reopens) ``<tmp>/topic-0`` with MockTime."""
    opened: list[Log] = []

    def factory(props: dict[str, str] | None = None, *, dir_name: str = "topic-0", **kwargs) -> Log:
        config = LogConfig.from_props(props or {})
        lg = Log(str(tmp_path / dir_name), config, mock_time, **kwargs)
        opened.append(lg)
        return lg

    yield factory
    for lg in opened:
        lg.close()




@pytest.fixture
def fast_dir(tmp_path):
    """A directory on tmpfs when it can be mounted (fsync is free there), else a plain temporary directory."""
    path = tmp_path / "tmpfs"
    mounted = mount_tmpfs(path, "512m")
    yield path
    if mounted:
        unmount(path)


@pytest.fixture(params=["C scan", "Python walk"])
def records_walk(request, monkeypatch):  # type: ignore[no-untyped-def]
    """Both ways the records block is checked: the C accelerator's ``scan_records`` and the Python walk."""
    if request.param == "C scan":
        assert log_validator._scan_records_c is not None, "the C accelerator is not built"
    else:
        monkeypatch.setattr(log_validator, "_scan_records_c", None)
    return request.param
