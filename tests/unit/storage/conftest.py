from __future__ import annotations

import pytest

from strom.storage.log import Log
from strom.storage.log_config import LogConfig
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
