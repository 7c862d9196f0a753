"""Hypothesis round-trips (encode -> decode -> equal, and re-encode -> same bytes) for every (message, version)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_strategies import struct_strategy

from strom.common.errors import ProtocolError
from strom.protocol.messages import DATA_TYPES, REQUESTS, RESPONSES

pytestmark = pytest.mark.unit

ALL_CLASSES = [*REQUESTS.values(), *RESPONSES.values(), *DATA_TYPES.values()]
PAIRS = [(cls, v) for cls in ALL_CLASSES for v in range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1)]


def test_every_api_has_request_and_response() -> None:
    assert set(REQUESTS) == set(RESPONSES)
    assert len(REQUESTS) == 59
    assert len(PAIRS) > 300


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.NAME)
@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(data=st.data())
def test_roundtrip_every_version(cls: type, data: st.DataObject) -> None:
    # One Hypothesis run per class covers every version in each example (keeps the suite fast).
    for version in range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1):
        obj = data.draw(struct_strategy(cls, version), label=f"v{version}")
        encoded = obj.encode(version)
        decoded = cls.decode(encoded, version)
        assert decoded == obj, f"{cls.NAME} v{version}"
        assert decoded.encode(version) == encoded
        # any proper prefix is rejected with ProtocolError (never IndexError / struct.error)
        cut = data.draw(st.integers(0, max(0, len(encoded) - 1)), label="cut") if encoded else 0
        if encoded:
            with pytest.raises(ProtocolError):
                cls.decode(encoded[:cut], version)


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.NAME)
def test_default_instance_roundtrips_in_every_version(cls: type) -> None:
    obj = cls()
    for version in range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1):
        assert cls.decode(obj.encode(version), version) == obj


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.NAME)
@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_garbage_never_raises_anything_but_protocol_error(cls: type, data: st.DataObject) -> None:
    version = data.draw(st.integers(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1]))
    blob = data.draw(st.binary(max_size=64))
    try:
        cls.decode(blob, version)
    except ProtocolError:
        pass
