"""Faults an operator meets with many partitions (issue 15): a partition flood under a low file limit leaves a
broker that still serves and restarts cleanly, and creating thousands of partitions does not stop the broker
from answering other clients meanwhile."""

from __future__ import annotations

import resource
import select
import subprocess
import sys

import pytest

from strom.broker_process import BrokerProcess
from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.create_topics import CreateTopicsRequest
from strom.protocol.messages.metadata import MetadataRequest
from strom.testing.raw_client import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


class LowFileLimitBroker(BrokerProcess):
    """A broker whose hard RLIMIT_NOFILE is 256 (it cannot raise it)."""

    def start(self, timeout: float = 60.0) -> BrokerProcess:
        real_popen = subprocess.Popen

        def limited(*args, **kwargs):  # type: ignore[no-untyped-def]
            def lower() -> None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

            kwargs["preexec_fn"] = lower
            return real_popen(*args, **kwargs)

        subprocess.Popen = limited  # type: ignore[misc]
        try:
            return super().start(timeout)
        finally:
            subprocess.Popen = real_popen  # type: ignore[misc]


def create(c: RawClient, name: str, partitions: int) -> tuple[int, str | None]:
    resp = c.request(ApiKey.CREATE_TOPICS, 5, CreateTopicsRequest(timeout_ms=120000, topics=[
        CreateTopicsRequest.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)]))
    t = resp.topics[0]
    return t.error_code, t.error_message


def test_partition_flood_with_a_low_file_limit_then_a_clean_restart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    b = LowFileLimitBroker(tmp_path / "data")
    b.start()
    try:
        with RawClient(b.bootstrap, timeout=120) as c:
            code, message = create(c, "flood", 2000)
            # Either the partitions fit (idle segments hold no descriptor) or the broker refuses with a reason;
            # never "already exists", never a dead broker.
            assert code in (ErrorCode.NONE, ErrorCode.INVALID_PARTITIONS), (code, message)
            if code:
                assert message and "already exists" not in message
            md = c.request(ApiKey.METADATA, 12, MetadataRequest(topics=None))
            assert md.brokers and md.brokers[0].port == b.port
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": b.bootstrap})
        topic = "flood" if code == ErrorCode.NONE else "small"
        for i in range(200):
            p.produce(topic, b"x", partition=i * 7 % (2000 if code == ErrorCode.NONE else 1))
        assert p.flush(60) == 0
        assert b.stop() == 0
        b.start()  # a clean restart on the same dir, same low limit
        with RawClient(b.bootstrap, timeout=120) as c:
            md = c.request(ApiKey.METADATA, 12, MetadataRequest(topics=None))
            names = {t.name: len(t.partitions) for t in md.topics}
            assert names.get(topic) == (2000 if topic == "flood" else 1)
        assert "Too many open files" not in b.read_log()
    finally:
        b.cleanup()


def test_other_clients_are_served_while_thousands_of_partitions_are_created(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The creation runs off the event loop: a Metadata request sent after a 5,000-partition CreateTopics is
    answered before the CreateTopics is."""
    with BrokerProcess(tmp_path / "data") as b:
        with RawClient(b.bootstrap, timeout=300) as creator, RawClient(b.bootstrap, timeout=300) as other:
            creator.send(ApiKey.CREATE_TOPICS, 5, CreateTopicsRequest(timeout_ms=300000, topics=[
                CreateTopicsRequest.CreatableTopic(name="many", num_partitions=5000, replication_factor=1)]))
            md = other.request(ApiKey.METADATA, 12, MetadataRequest(topics=[]))
            assert md.brokers
            # ... answered while the creation was still running: its response is not there yet. (A broker that
            # created the logs on its event loop could only answer the Metadata after the creation.)
            readable, _, _ = select.select([creator.sock], [], [], 0)
            assert not readable
            created = creator.receive()  # ... which then completes
            assert created.topics[0].error_code == ErrorCode.NONE
            md = other.request(ApiKey.METADATA, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
                name="many")]))
            assert len(md.topics[0].partitions) == 5000


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
