"""ClientQuotaManager stepped with MockTime: Kafka's throttle arithmetic, the (user, client-id) precedence, shared
sensors, request-time bounds, validation and the file store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strom.metrics import Metrics
from strom.server.security.client_quotas import (
    DEFAULT,
    ClientQuotaManager,
    ClientQuotaManagers,
    QuotaEntity,
    QuotaValidationError,
    entity_from_wire,
    validate_quota_value,
)
from strom.server.security.quota_store import FileQuotaStore
from strom.testing.mock_time import MockTime


def _manager(time: MockTime, samples: int = 11, window_s: int = 1, **kw: object) -> ClientQuotaManager:
    return ClientQuotaManager("Produce", "producer_byte_rate", Metrics(time=time), time, samples, window_s,
                              **kw)  # type: ignore[arg-type]


def test_throttle_time_is_kafkas() -> None:
    """Kafka's ClientQuotaManagerTest.testQuotaViolation: 400 B/s for 10 s, then a 2300 B spike half a window
    later: 6300 B / 10.5 s = 600 B/s against 500 B/s → (600 - 500) / 500 * 10.5 s = 2100 ms."""
    time = MockTime()
    m = _manager(time)
    m.update_quota(QuotaEntity(None, DEFAULT), 500)
    for _ in range(10):
        assert m.record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 400, time.milliseconds()) == 0
        time.sleep(1000)
    time.sleep(500)
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 2300, time.milliseconds()) == 2100
    time.sleep(2100)
    # The spike stays in its 1 s sample for the 11 s the samples cover, so the 400 B/s that follow may still be
    # throttled; once that sample has rolled over, nothing is (Kafka's "until the bursty sample disappears").
    throttles = []
    for _ in range(10):
        throttles.append(m.record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 400, time.milliseconds()))
        time.sleep(1000)
    assert throttles[0] > 0
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 0, time.milliseconds()) == 0


def test_precedence_follows_kafka() -> None:
    m = _manager(MockTime())
    levels = [
        (QuotaEntity(None, DEFAULT), 8.0), (QuotaEntity(None, "c"), 7.0), (QuotaEntity(DEFAULT, None), 6.0),
        (QuotaEntity(DEFAULT, DEFAULT), 5.0), (QuotaEntity(DEFAULT, "c"), 4.0), (QuotaEntity("u", None), 3.0),
        (QuotaEntity("u", DEFAULT), 2.0), (QuotaEntity("u", "c"), 1.0),
    ]
    assert m.quota("u", "c") is None
    for entity, bound in levels:  # each more specific level, once set, wins over all the earlier ones
        m.update_quota(entity, bound)
        assert m.quota("u", "c") == bound, entity
    for entity, bound in reversed(levels[1:]):  # removing the most specific falls back one level
        m.update_quota(entity, None)
        assert m.quota("u", "c") == bound + 1, entity
    # other users and clients: only the levels that name them or a default apply
    assert m.quota("v", "d") == 8.0
    m.update_quota(QuotaEntity("u", None), 3.0)
    assert m.quota("u", "other") == 3.0 and m.quota("v", "c") == 8.0


def test_user_quota_is_shared_by_the_users_client_ids() -> None:
    time = MockTime()
    m = _manager(time, samples=2)
    m.update_quota(QuotaEntity("alice", None), 1000)
    now = time.milliseconds()
    assert m.record_and_get_throttle_time_ms("alice", "c1", 900, now) == 0
    assert m.record_and_get_throttle_time_ms("alice", "c2", 900, now) > 0  # same sensor: 1800 B in 1 s
    assert m.record_and_get_throttle_time_ms("bob", "c1", 900, now) == 0  # bob has no quota


def test_default_client_quota_is_per_client_id() -> None:
    time = MockTime()
    m = _manager(time, samples=2)
    m.update_quota(QuotaEntity(None, DEFAULT), 1000)
    now = time.milliseconds()
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "c1", 900, now) == 0
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "c2", 900, now) == 0
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "c1", 900, now) > 0


def test_quota_change_applies_to_a_live_sensor() -> None:
    time = MockTime()
    m = _manager(time, samples=2)
    m.update_quota(QuotaEntity(None, "c"), 10_000)
    now = time.milliseconds()
    assert m.record_and_get_throttle_time_ms("u", "c", 5000, now) == 0
    m.update_quota(QuotaEntity(None, "c"), 1000)
    # 5000 + 1000 B over a 1 s window against 1000 B/s: (6000 - 1000) / 1000 * 1000 ms
    assert m.record_and_get_throttle_time_ms("u", "c", 1000, now) == 5000
    m.update_quota(QuotaEntity(None, "c"), None)
    assert not m.enabled
    assert m.record_and_get_throttle_time_ms("u", "c", 10**9, now) == 0


def test_request_time_throttle_is_bounded_by_one_window() -> None:
    time = MockTime()
    m = _manager(time, samples=11, max_throttle_ms=1000)
    m.update_quota(QuotaEntity(None, "c"), 1.0)  # 1 % of the loop
    assert m.record_and_get_throttle_time_ms("u", "c", 500.0, time.milliseconds()) == 1000


def test_fetch_cap_is_one_quota_window() -> None:
    qm = ClientQuotaManagers({"quota.window.num": 11, "quota.window.size.seconds": 2}, MockTime())
    qm.set_entity(QuotaEntity(None, "c"), {"consumer_byte_rate": 1000.0})
    assert qm.fetch.max_value_in_quota_window("u", "c") == 1000 * 10 * 2
    assert qm.produce.quota("u", "c") is None  # a consumer quota is not a producer quota


def test_validation_messages() -> None:
    assert validate_quota_value("producer_byte_rate", 1024.0) == "1024"
    assert validate_quota_value("request_percentage", 12.5) == "12.5"
    assert validate_quota_value("controller_mutation_rate", 2.5) == "2.5"  # a DOUBLE, as in Kafka
    for key, value, message in [("foo", 1.0, "Invalid configuration key foo"),
                                ("producer_byte_rate", 0.0, "must be greater than 0"),
                                ("consumer_byte_rate", -5.0, "must be greater than 0"),
                                ("producer_byte_rate", 10.5, "cannot be a fractional value"),
                                ("controller_mutation_rate", 0.0, "must be greater than 0")]:
        with pytest.raises(QuotaValidationError, match=message):
            validate_quota_value(key, value)
    assert entity_from_wire([("user", "alice"), ("client-id", None)]) == QuotaEntity("alice", DEFAULT)
    assert entity_from_wire([("ip", "10.0.0.1")]) == QuotaEntity(ip="10.0.0.1")
    assert entity_from_wire([("ip", None)]) == QuotaEntity(ip=DEFAULT)
    assert validate_quota_value("connection_creation_rate", 5.0, ip_entity=True) == "5"
    for key, ip_entity in (("connection_creation_rate", False), ("producer_byte_rate", True)):
        with pytest.raises(QuotaValidationError, match=f"Invalid configuration key {key}"):
            validate_quota_value(key, 5.0, ip_entity=ip_entity)  # each kind of entity takes its own keys only
    for components, message in [([], "empty client quota entity"), ([("user", "a"), ("user", "b")], "duplicate"),
                                ([("ip", "not-an-ip")], "not-an-ip is not a valid IP"),
                                ([("ip", "10.0.0.1"), ("user", "a")], "IP entity should not be used with"),
                                ([("group", "g")], "Unhandled client quota entity type"),
                                ([("client-id", "")], "Empty client-id")]:
        with pytest.raises(QuotaValidationError, match=message):
            entity_from_wire(components)


def test_file_store_round_trip(tmp_path: Path) -> None:
    store = FileQuotaStore(tmp_path)
    assert store.entities() == {}
    assert store.alter(QuotaEntity("alice", DEFAULT), {"producer_byte_rate": "1024"}) == {"producer_byte_rate": 1024.0}
    store.alter(QuotaEntity(None, "c1"), {"consumer_byte_rate": "2048", "request_percentage": "50.0"})
    store.alter(QuotaEntity(None, "c1"), {"request_percentage": None})
    reopened = FileQuotaStore(tmp_path)
    assert reopened.entities() == {QuotaEntity("alice", DEFAULT): {"producer_byte_rate": 1024.0},
                                   QuotaEntity(None, "c1"): {"consumer_byte_rate": 2048.0}}
    reopened.alter(QuotaEntity("alice", DEFAULT), {"producer_byte_rate": None})
    assert FileQuotaStore(tmp_path).entities() == {QuotaEntity(None, "c1"): {"consumer_byte_rate": 2048.0}}
    assert not (tmp_path / "client-quotas.json.tmp").exists()
    (tmp_path / "client-quotas.json").write_text(json.dumps({"entities": 5}))
    with pytest.raises(OSError, match="cannot read client quotas"):
        FileQuotaStore(tmp_path)


def test_idle_sensors_expire_after_an_hour() -> None:
    time = MockTime()
    metrics = Metrics(time=time)
    m = ClientQuotaManager("Produce", "producer_byte_rate", metrics, time, 2, 1)
    m.update_quota(QuotaEntity(None, DEFAULT), 1000)
    m.record_and_get_throttle_time_ms("u", "gone", 10, time.milliseconds())
    assert metrics.get_sensor("Produce-:gone") is not None
    time.sleep(3600 * 1000 + 60_001)
    m.record_and_get_throttle_time_ms("u", "active", 10, time.milliseconds())
    assert metrics.get_sensor("Produce-:gone") is None and metrics.get_sensor("ProduceThrottleTime-:gone") is None
    assert metrics.get_sensor("Produce-:active") is not None


class _Ctx:
    """What the quota reads of a request context: the principal, the client id, the connection to mute."""

    class _Conn:
        def __init__(self) -> None:
            self.principal = type("P", (), {"name": "alice"})()
            self.throttle_ms = 0

    def __init__(self, client_id: str = "admin") -> None:
        self.client_id = client_id
        self.connection = self._Conn()


def test_controller_mutation_quota_is_a_token_bucket() -> None:
    """KIP-599 as Kafka's ControllerMutationQuotaManagerTest: 2 partitions/s over 11 windows of 1 s is a bucket of
    22. A strict request may empty it (the one that crosses zero goes through), the next is refused with the
    time until the bucket is back at zero; a permissive (old-version) request is never refused, only throttled."""
    from strom.common.error_codes import ThrottlingQuotaExceededError

    time = MockTime()
    qm = ClientQuotaManagers({"quota.window.num": 11, "quota.window.size.seconds": 1}, time)
    ctx = _Ctx()
    unlimited = qm.controller_mutation_quota(ctx, strict=True)  # type: ignore[arg-type]
    unlimited.record(1000)  # no quota set: nothing is counted
    assert unlimited.throttle_time_ms == 0
    qm.set_entity(QuotaEntity("alice", None), {"controller_mutation_rate": 2.0})
    quota = qm.controller_mutation_quota(ctx, strict=True)  # type: ignore[arg-type]
    quota.record(20)
    quota.record(10)  # 2 tokens left before it: allowed, the bucket goes to -8
    assert quota.throttle_time_ms == 0
    with pytest.raises(ThrottlingQuotaExceededError, match="throttling quota has been exceeded"):
        quota.record(1)
    assert quota.throttle_time_ms == 4000  # 8 tokens at 2 per second
    assert ctx.connection.throttle_ms == 4000  # the connection is muted that long after the response
    time.sleep(4000)  # back at zero tokens: allowed again
    again = qm.controller_mutation_quota(_Ctx(), strict=True)  # type: ignore[arg-type]
    again.record(1)
    assert again.throttle_time_ms == 0
    old_version = qm.controller_mutation_quota(_Ctx(), strict=False)  # type: ignore[arg-type]
    old_version.record(5)  # made anyway; the throttle tells the client to slow down
    assert old_version.throttle_time_ms == 3000  # -6 tokens
    other = qm.controller_mutation_quota(type("C", (), {"client_id": "x", "connection": type(
        "K", (), {"principal": type("P", (), {"name": "bob"})(), "throttle_ms": 0})()})(), strict=True)
    other.record(100)  # another user has no quota
    assert other.throttle_time_ms == 0
