"""The admin client's request building, response parsing, retries and timeouts, over a scripted network client."""

from __future__ import annotations

import time as real_time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future

import pytest

from strom.admin import (
    AdminClient,
    ConfigResource,
    ConfigResourceType,
    ConsumerGroupState,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    TopicPartition,
)
from strom.common.error_codes import (
    ErrorCode,
    InvalidPartitionsError,
    InvalidRequestError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from strom.common.errors import ConfigError, KafkaTimeoutError
from strom.protocol.messages import (
    ConsumerProtocolAssignment,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DescribeClusterResponse,
    DescribeConfigsResponse,
    DescribeGroupsResponse,
    FindCoordinatorResponse,
    IncrementalAlterConfigsResponse,
    ListOffsetsResponse,
    MetadataResponse,
)
from strom.testing.mock_time import MockTime
from tests.unit.admin.scripted_client import NO_ANSWER, UNSUPPORTED, ScriptedClient, brokers_metadata

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


@pytest.fixture
def time() -> MockTime:
    return MockTime()


def drive(time: MockTime, future: Future, step_ms: int, limit_s: float = 10) -> None:
    """Advance the mock clock in steps (letting the I/O thread run) until ``future`` completes."""
    deadline = real_time.monotonic() + limit_s
    while not future.done() and real_time.monotonic() < deadline:
        time.sleep(step_ms)
        real_time.sleep(0.005)


def make_admin(time: MockTime, handlers: dict, **config: object) -> tuple[AdminClient, ScriptedClient]:
    client = ScriptedClient(time, handlers)
    admin = AdminClient({"bootstrap.servers": "localhost:1969", **config}, time=time, client=client)
    return admin, client


@pytest.fixture
def closing() -> Iterator[list[AdminClient]]:
    admins: list[AdminClient] = []
    yield admins
    for a in admins:
        a.close(timeout=1)


def created(name: str, code: int = 0, message: str | None = None) -> CreateTopicsResponse.CreatableTopicResult:
    return CreateTopicsResponse.CreatableTopicResult(name=name, error_code=code, error_message=message,
                                                     topic_id=uuid.uuid4(), num_partitions=3, replication_factor=1,
                                                     configs=[])


def test_create_topics_one_future_per_topic_with_the_brokers_message(time: MockTime, closing: list) -> None:
    def create(body: object, _dest: object) -> CreateTopicsResponse:
        return CreateTopicsResponse(topics=[
            created("a"), created("b", ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 'b' already exists.")])

    admin, client = make_admin(time, {"CreateTopicsRequest": create})
    closing.append(admin)
    result = admin.create_topics([NewTopic("a", 3, 1, configs={"retention.ms": "1"}), NewTopic("b")])
    assert result["a"].result(5).num_partitions == 3
    with pytest.raises(TopicAlreadyExistsError) as info:
        result["b"].result(5)
    assert info.value.message == "Topic 'b' already exists."
    with pytest.raises(TopicAlreadyExistsError):
        result.all().result(5)
    request = client.sent_of("CreateTopicsRequest")[0]
    assert [(t.name, t.num_partitions, t.replication_factor) for t in request.topics] == [("a", 3, 1), ("b", -1, -1)]
    assert [(c.name, c.value) for c in request.topics[0].configs] == [("retention.ms", "1")]
    # it went to the controller named by the metadata
    assert client.sent[-1].destination == 0


def test_not_controller_retries_only_the_topics_concerned(time: MockTime, closing: list) -> None:
    calls = []

    def create(body: object, _dest: object) -> CreateTopicsResponse:
        names = [t.name for t in body.topics]  # type: ignore[attr-defined]
        calls.append(names)
        if len(calls) == 1:
            return CreateTopicsResponse(topics=[created("a"), created("b", ErrorCode.NOT_CONTROLLER, None)])
        return CreateTopicsResponse(topics=[created(n) for n in names])

    admin, _client = make_admin(time, {"CreateTopicsRequest": create}, retry_backoff_ms=1)
    closing.append(admin)
    result = admin.create_topics([NewTopic("a"), NewTopic("b")])
    drive(time, result["b"], step_ms=10)  # the retry waits for the backoff on the mock clock
    assert set(result.all().result(5)) == {"a", "b"}
    assert calls == [["a", "b"], ["b"]]


def test_call_times_out_with_a_clear_message(time: MockTime, closing: list) -> None:
    admin, _client = make_admin(time, {"DeleteTopicsRequest": lambda b, d: NO_ANSWER})
    closing.append(admin)
    future = admin.delete_topics(["t"], timeout_ms=1000)["t"]
    drive(time, future, step_ms=200)
    with pytest.raises(KafkaTimeoutError, match="deleteTopics"):
        future.result(1)


def test_create_partitions_error_is_the_brokers(time: MockTime, closing: list) -> None:
    message = "Topic currently has 3 partitions, which is higher than the requested 1."
    admin, client = make_admin(time, {"CreatePartitionsRequest": lambda b, d: CreatePartitionsResponse(results=[
        CreatePartitionsResponse.CreatePartitionsTopicResult(name="t", error_code=ErrorCode.INVALID_PARTITIONS,
                                                             error_message=message)])})
    closing.append(admin)
    with pytest.raises(InvalidPartitionsError) as info:
        admin.create_partitions({"t": NewPartitions.increase_to(1)})["t"].result(5)
    assert info.value.message == message
    assert client.sent_of("CreatePartitionsRequest")[0].topics[0].count == 1


def test_describe_topics_unknown_topic_and_partitions_sorted(time: MockTime, closing: list) -> None:
    P = MetadataResponse.MetadataResponsePartition
    topic_id = uuid.uuid4()

    def metadata(body: object, _dest: object) -> MetadataResponse:
        if not body.topics:  # type: ignore[attr-defined]
            return brokers_metadata()
        return brokers_metadata(topics=[
            MetadataResponse.MetadataResponseTopic(error_code=0, name="t", topic_id=topic_id, is_internal=False,
                                                   partitions=[P(partition_index=1, leader_id=0, replica_nodes=[0],
                                                                 isr_nodes=[0]),
                                                               P(partition_index=0, leader_id=-1, replica_nodes=[0],
                                                                 isr_nodes=[])]),
            MetadataResponse.MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name="u",
                                                   partitions=[])])

    admin, _client = make_admin(time, {"MetadataRequest": metadata})
    closing.append(admin)
    result = admin.describe_topics(["t", "u"])
    description = result["t"].result(5)
    assert description.topic_id == topic_id
    assert [p.partition for p in description.partitions] == [0, 1]
    assert description.partitions[0].leader is None and description.partitions[1].leader.node_id == 0
    with pytest.raises(UnknownTopicOrPartitionError):
        result["u"].result(5)


def test_configs_broker_resource_goes_to_that_broker(time: MockTime, closing: list) -> None:
    R = DescribeConfigsResponse

    def describe(body: object, dest: object) -> DescribeConfigsResponse:
        res = body.resources[0]  # type: ignore[attr-defined]
        return R(results=[R.DescribeConfigsResult(error_code=0, resource_type=res.resource_type,
                                                  resource_name=res.resource_name, configs=[
            R.DescribeConfigsResourceResult(name="log.retention.ms", value=str(dest), read_only=True,
                                            config_source=4, is_sensitive=False, synonyms=[])])])

    def alter(body: object, _dest: object) -> IncrementalAlterConfigsResponse:
        res = body.resources[0]  # type: ignore[attr-defined]
        return IncrementalAlterConfigsResponse(responses=[IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
            error_code=ErrorCode.INVALID_REQUEST, error_message="static", resource_type=res.resource_type,
            resource_name=res.resource_name)])

    admin, client = make_admin(time, {"DescribeConfigsRequest": describe,
                                      "IncrementalAlterConfigsRequest": alter,
                                      "MetadataRequest": lambda b, d: brokers_metadata(2)})
    closing.append(admin)
    broker1 = ConfigResource(ConfigResourceType.BROKER, "1")
    config = admin.describe_configs([broker1])[broker1].result(5)
    assert config.get("log.retention.ms").value == "1"  # answered by node 1
    assert not config.get("log.retention.ms").is_default
    from strom.admin import AlterConfigOp

    with pytest.raises(InvalidRequestError, match="static"):
        admin.incremental_alter_configs({broker1: [AlterConfigOp("a", "b")]})[broker1].result(5)
    request = client.sent_of("IncrementalAlterConfigsRequest")[0]
    assert (request.resources[0].configs[0].name, request.resources[0].configs[0].config_operation) == ("a", 0)


def _coordinator(node_id: int = 0, code: int = 0) -> FindCoordinatorResponse:
    return FindCoordinatorResponse(coordinators=[FindCoordinatorResponse.Coordinator(
        key="g", node_id=node_id, host="localhost", port=1969 + node_id, error_code=code, error_message=None)])


def test_describe_group_looks_up_the_coordinator_again_after_not_coordinator(time: MockTime, closing: list) -> None:
    answers = [ErrorCode.NOT_COORDINATOR, 0]
    assignment = ConsumerProtocolAssignment(assigned_partitions=[
        ConsumerProtocolAssignment.TopicPartition(topic="t", partitions=[0, 1])]).encode_versioned(0)

    def describe(body: object, _dest: object) -> DescribeGroupsResponse:
        code = answers.pop(0)
        R = DescribeGroupsResponse
        return R(groups=[R.DescribedGroup(error_code=code, group_id="g", group_state="Stable",
                                          protocol_type="consumer", protocol_data="range", members=[
            R.DescribedGroupMember(member_id="m1", client_id="c1", client_host="/127.0.0.1",
                                   member_metadata=b"", member_assignment=assignment)])])

    admin, client = make_admin(time, {"FindCoordinatorRequest": lambda b, d: _coordinator(),
                                      "DescribeGroupsRequest": describe}, retry_backoff_ms=1)
    closing.append(admin)
    future = admin.describe_consumer_groups(["g"])["g"]
    drive(time, future, step_ms=5)
    description = future.result(5)
    assert description.state == ConsumerGroupState.STABLE
    assert description.members[0].assignment.topic_partitions == {TopicPartition("t", 0), TopicPartition("t", 1)}
    assert description.coordinator is not None and description.coordinator.node_id == 0
    assert len(client.sent_of("FindCoordinatorRequest")) == 2


def test_list_offsets_asks_the_leader_of_each_partition(time: MockTime, closing: list) -> None:
    P = MetadataResponse.MetadataResponsePartition

    def metadata(body: object, _dest: object) -> MetadataResponse:
        if not body.topics:  # type: ignore[attr-defined]
            return brokers_metadata(2)
        return brokers_metadata(2, topics=[MetadataResponse.MetadataResponseTopic(
            error_code=0, name="t", topic_id=uuid.uuid4(), partitions=[
                P(partition_index=0, leader_id=0, replica_nodes=[0], isr_nodes=[0]),
                P(partition_index=1, leader_id=1, replica_nodes=[1], isr_nodes=[1])])])

    def list_offsets(body: object, dest: object) -> ListOffsetsResponse:
        R = ListOffsetsResponse
        return R(topics=[R.ListOffsetsTopicResponse(name=t.name, partitions=[  # type: ignore[attr-defined]
            R.ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=0, timestamp=-1,
                                           offset=100 + int(dest) + p.timestamp, leader_epoch=0)
            for p in t.partitions]) for t in body.topics])  # type: ignore[attr-defined]

    admin, client = make_admin(time, {"MetadataRequest": metadata, "ListOffsetsRequest": list_offsets})
    closing.append(admin)
    result = admin.list_offsets({TopicPartition("t", 0): OffsetSpec.latest(),
                                 TopicPartition("t", 1): OffsetSpec.earliest()}).all().result(5)
    assert result[TopicPartition("t", 0)].offset == 100 + 0 - 1
    assert result[TopicPartition("t", 1)].offset == 100 + 1 - 2
    destinations = sorted(r.destination for r in client.sent if type(r.request).__name__ == "ListOffsetsRequest")
    assert destinations == [0, 1]
    assert all(r.replica_id == -1 for r in client.sent_of("ListOffsetsRequest"))


def test_describe_cluster_falls_back_to_metadata(time: MockTime, closing: list) -> None:
    admin, client = make_admin(time, {"DescribeClusterRequest": lambda b, d: UNSUPPORTED,
                                      "MetadataRequest": lambda b, d: brokers_metadata(3, controller=2)})
    closing.append(admin)
    description = admin.describe_cluster().description().result(5)
    assert [n.node_id for n in description.nodes] == [0, 1, 2]
    assert description.controller is not None and description.controller.node_id == 2
    assert description.cluster_id == "cluster-1"


def test_describe_cluster_error_is_raised(time: MockTime, closing: list) -> None:
    admin, _client = make_admin(time, {"DescribeClusterRequest": lambda b, d: DescribeClusterResponse(
        error_code=ErrorCode.INVALID_REQUEST, error_message="nope", cluster_id="c")})
    closing.append(admin)
    with pytest.raises(InvalidRequestError, match="nope"):
        admin.describe_cluster().cluster_id().result(5)


def test_close_fails_unfinished_calls_and_refuses_new_ones(time: MockTime) -> None:
    admin, _client = make_admin(time, {"DeleteTopicsRequest": lambda b, d: NO_ANSWER})
    future = admin.delete_topics(["t"])["t"]
    admin.close(timeout=0)
    with pytest.raises(KafkaTimeoutError):
        future.result(5)
    with pytest.raises(KafkaTimeoutError, match="not accepting new calls"):
        admin.list_topics().names().result(5)


def test_bad_config_names_the_key() -> None:
    with pytest.raises(ConfigError, match="request.timeot.ms"):
        AdminClient({"bootstrap.servers": "localhost:1", "request.timeot.ms": 5})
    with pytest.raises(ConfigError, match="bootstrap.servers"):
        AdminClient({"bootstrap.servers": "nohostport"})
