"""DescribeConfigs sources and synonyms, and IncrementalAlterConfigs on a topic, on the wire."""

from __future__ import annotations

import pytest

from strom.broker_process import BrokerProcess
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.create_topics import CreateTopicsRequest
from strom.protocol.messages.describe_configs import DescribeConfigsRequest
from strom.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from strom.testing.raw_client import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

TOPIC, DYNAMIC_TOPIC, STATIC_BROKER, DEFAULT = 2, 1, 4, 5


def _describe(c: RawClient, keys: list[str]) -> dict[str, tuple[str, int, list[tuple[str, str, int]]]]:
    r = c.request(ApiKey.DESCRIBE_CONFIGS, 4, DescribeConfigsRequest(resources=[
        DescribeConfigsRequest.DescribeConfigsResource(resource_type=TOPIC, resource_name="cfg",
                                                       configuration_keys=keys)], include_synonyms=True))
    return {x.name: (x.value, x.config_source, [(s.name, s.value, s.source) for s in x.synonyms])
            for x in r.results[0].configs}


def test_sources_synonyms_and_incremental_alter(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with BrokerProcess(data_dir=tmp_path / "d", overrides={"log.retention.hours": "5"}) as b, \
            RawClient(b.bootstrap) as c:
        c.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name="cfg", num_partitions=1, replication_factor=1,
            configs=[CreateTopicsRequest.CreatableTopicConfig(name="segment.bytes", value="100000")])]))
        got = _describe(c, ["segment.bytes", "retention.ms", "flush.ms"])
        assert got["segment.bytes"] == ("100000", DYNAMIC_TOPIC, [("segment.bytes", "100000", DYNAMIC_TOPIC),
                                                                  ("log.segment.bytes", "1073741824", DEFAULT)])
        assert got["retention.ms"] == ("18000000", STATIC_BROKER, [("log.retention.hours", "5", STATIC_BROKER),
                                                                   ("log.retention.ms", "604800000", DEFAULT)])
        assert got["flush.ms"][1] == DEFAULT
        A = IncrementalAlterConfigsRequest
        r = c.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, A(resources=[A.AlterConfigsResource(
            resource_type=TOPIC, resource_name="cfg", configs=[
                A.AlterableConfig(name="retention.ms", config_operation=0, value="1000"),
                A.AlterableConfig(name="segment.bytes", config_operation=1, value=None)])]))
        assert r.responses[0].error_code == 0
        got = _describe(c, ["segment.bytes", "retention.ms"])
        assert got["retention.ms"][:2] == ("1000", DYNAMIC_TOPIC)
        assert got["segment.bytes"][:2] == ("1073741824", DEFAULT)
        bad = c.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, A(resources=[A.AlterConfigsResource(
            resource_type=TOPIC, resource_name="cfg", configs=[
                A.AlterableConfig(name="segment.bytes", config_operation=0, value="tiny")])]))
        assert bad.responses[0].error_code == 40  # INVALID_CONFIG, nothing changed
        assert _describe(c, ["segment.bytes"])["segment.bytes"][0] == "1073741824"
    assert b.proc is not None and b.proc.returncode == 0
