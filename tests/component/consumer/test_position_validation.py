"""KIP-320 position validation in the consumer: when the metadata names a new leader epoch, a position with an
epoch is checked with OffsetsForLeaderEpoch before anything more is fetched; a log truncated below the position
(an unclean leader election) moves the position back to where the logs diverged, or raises
``LogTruncationError`` with ``auto.offset.reset=none``. Kafka's ``FetcherTest`` / ``OffsetFetcherTest`` cases
``testOffsetValidation*`` and ``testTruncationDetected*``."""

from __future__ import annotations

from typing import Any

import pytest

from strom.common.error_codes import ErrorCode, OffsetOutOfRangeError
from strom.common.structs import OffsetAndMetadata, TopicPartition
from strom.consumer.errors import LogTruncationError
from strom.network.api_versions import NodeApiVersions
from strom.protocol.api_keys import ApiKey
from strom.testing.mock_client import metadata_update_with

from .fake_broker import FakeBroker

pytestmark = [pytest.mark.component, pytest.mark.timeout(60)]

TP = TopicPartition("validated", 0)


def read_five_at_epoch_7(**configs: Any) -> tuple[FakeBroker, Any]:
    """A consumer that has read offsets 0..4 (two batches, written in leader epoch 7): position 5, epoch 7."""
    broker = FakeBroker({TP.topic: 1})
    broker.leader_epoch = 7
    consumer = broker.consumer(**configs)
    broker.client.update_metadata(metadata_update_with(1, broker.topics, leader_epoch=7))
    consumer.assign([TP])
    consumer.seek(TP, 0)
    broker.produce(TP, 3, leader_epoch=7)
    broker.produce(TP, 2, leader_epoch=7)
    got = broker.run(consumer, lambda rs: len(rs) >= 5)
    assert [r.offset for r in got] == [0, 1, 2, 3, 4] and consumer.position(TP) == 5
    return broker, consumer


def new_leader(broker: FakeBroker, epoch: int = 8) -> int:
    """The metadata now names leader epoch ``epoch``; returns how many fetches were sent before."""
    broker.leader_epoch = epoch
    broker.client.update_metadata(metadata_update_with(broker.num_nodes, broker.topics, leader_epoch=epoch))
    return len(broker.requests_of(ApiKey.FETCH))


def fetch_offsets(broker: FakeBroker, since: int) -> list[tuple[int, int]]:
    """(current leader epoch, fetch offset) of the fetches sent since the ``since``-th."""
    return [(p.current_leader_epoch, p.fetch_offset) for f in broker.requests_of(ApiKey.FETCH)[since:]
            for t in f.topics for p in t.partitions]


def test_truncation_below_the_position_moves_it_back_to_the_divergence_point() -> None:
    broker, consumer = read_five_at_epoch_7(**{"auto.offset.reset": "earliest"})
    # Unclean election: the new leader never had offsets 3 and 4; it took four other records from offset 3.
    broker.truncate(TP, 3)
    broker.produce(TP, 4, prefix=b"new", leader_epoch=8)
    fetches_before = new_leader(broker)
    got = broker.run(consumer, lambda rs: len(rs) >= 4)
    (validation,) = broker.requests_of(ApiKey.OFFSET_FOR_LEADER_EPOCH)
    assert validation.replica_id == -1
    assert [(p.partition, p.current_leader_epoch, p.leader_epoch) for t in validation.topics
            for p in t.partitions] == [(0, 8, 7)]
    # Nothing was fetched from the new leader at the unvalidated position 5: the first fetch is at 3.
    assert fetch_offsets(broker, fetches_before)[0] == (8, 3)
    assert [(r.offset, r.value) for r in got] == [(3, b"new3"), (4, b"new4"), (5, b"new5"), (6, b"new6")]
    consumer.close()


def test_truncation_without_a_reset_policy_raises_with_the_divergent_offset() -> None:
    broker, consumer = read_five_at_epoch_7(**{"auto.offset.reset": "none"})
    broker.truncate(TP, 3)
    broker.produce(TP, 4, prefix=b"new", leader_epoch=8)
    fetches_before = new_leader(broker)
    with pytest.raises(LogTruncationError) as info:
        broker.run(consumer, lambda rs: False)
    error = info.value
    assert isinstance(error, OffsetOutOfRangeError)
    assert error.offset_out_of_range_partitions == {TP: 5}
    assert error.divergent_offsets == {TP: OffsetAndMetadata(3, "", 7)}
    assert "validated-0" in str(error) and "fetchOffset=5" in str(error)
    assert fetch_offsets(broker, fetches_before) == []  # nothing fetched past the truncation
    # The application decides: here, read what the new leader has from the divergence point.
    consumer.seek(TP, error.divergent_offsets[TP].offset)
    got = broker.run(consumer, lambda rs: len(rs) >= 4)
    assert [r.value for r in got] == [b"new3", b"new4", b"new5", b"new6"]
    consumer.close()


def test_a_leader_change_without_truncation_goes_on_where_it_was() -> None:
    broker, consumer = read_five_at_epoch_7(**{"auto.offset.reset": "none"})
    fetches_before = new_leader(broker)
    broker.produce(TP, 2, leader_epoch=8)
    got = broker.run(consumer, lambda rs: len(rs) >= 2)
    assert len(broker.requests_of(ApiKey.OFFSET_FOR_LEADER_EPOCH)) == 1
    assert [r.offset for r in got] == [5, 6]
    assert fetch_offsets(broker, fetches_before)[0] == (8, 5)
    consumer.close()


def test_an_epoch_the_new_leader_never_had_resets_the_position() -> None:
    broker, consumer = read_five_at_epoch_7(**{"auto.offset.reset": "earliest"})
    broker.truncate(TP, 0)  # nothing of epoch 7 survived
    broker.produce(TP, 2, prefix=b"new", leader_epoch=8)
    fetches_before = new_leader(broker)
    got = broker.run(consumer, lambda rs: len(rs) >= 2)
    assert len(broker.requests_of(ApiKey.OFFSET_FOR_LEADER_EPOCH)) == 1
    assert fetch_offsets(broker, fetches_before)[0] == (8, 0)  # reset by the validation, not by a failed fetch
    assert [(r.offset, r.value) for r in got] == [(0, b"new0"), (1, b"new1")]
    consumer.close()


def test_retriable_validation_errors_are_retried_after_a_metadata_refresh() -> None:
    broker, consumer = read_five_at_epoch_7(**{"auto.offset.reset": "none"})
    broker.inject(ApiKey.OFFSET_FOR_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_LEADER_EPOCH)
    new_leader(broker)
    broker.produce(TP, 1, leader_epoch=8)
    got = broker.run(consumer, lambda rs: len(rs) >= 1, max_rounds=2000)
    assert len(broker.requests_of(ApiKey.OFFSET_FOR_LEADER_EPOCH)) == 3
    assert [r.offset for r in got] == [5]
    consumer.close()


def test_a_position_without_an_epoch_is_not_validated() -> None:
    broker = FakeBroker({TP.topic: 1})
    consumer = broker.consumer(**{"auto.offset.reset": "earliest"})
    consumer.assign([TP])
    broker.produce(TP, 2)  # a broker that does not stamp leader epochs (message format before KIP-101)
    assert [r.offset for r in broker.run(consumer, lambda rs: len(rs) >= 2)] == [0, 1]
    new_leader(broker, 3)
    broker.produce(TP, 1)
    assert [r.offset for r in broker.run(consumer, lambda rs: len(rs) >= 1)] == [2]
    assert broker.requests_of(ApiKey.OFFSET_FOR_LEADER_EPOCH) == []
    consumer.close()


def test_a_leader_without_offsets_for_leader_epoch_v3_is_not_asked() -> None:
    broker, consumer = read_five_at_epoch_7(**{"auto.offset.reset": "none"})
    broker.client.node_api_versions = NodeApiVersions.create({ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 2)})
    new_leader(broker)
    broker.produce(TP, 1, leader_epoch=8)
    got = broker.run(consumer, lambda rs: len(rs) >= 1)
    assert broker.requests_of(ApiKey.OFFSET_FOR_LEADER_EPOCH) == []  # never sent: validation skipped
    assert [r.offset for r in got] == [5]
    consumer.close()


def test_a_committed_offset_with_its_epoch_is_validated_before_fetching() -> None:
    broker = FakeBroker({TP.topic: 1})
    broker.leader_epoch = 8
    consumer = broker.consumer(**{"auto.offset.reset": "earliest"})
    broker.client.update_metadata(metadata_update_with(1, broker.topics, leader_epoch=8))
    broker.produce(TP, 3, prefix=b"new", leader_epoch=8)  # epoch 7 ended at offset 0 on this leader
    consumer.assign([TP])
    consumer.seek(TP, OffsetAndMetadata(2, "", 7))  # as a committed offset read back with its epoch
    got = broker.run(consumer, lambda rs: len(rs) >= 3)
    (validation,) = broker.requests_of(ApiKey.OFFSET_FOR_LEADER_EPOCH)
    assert [(p.current_leader_epoch, p.leader_epoch) for t in validation.topics for p in t.partitions] == [(8, 7)]
    assert [r.offset for r in got] == [0, 1, 2]
    consumer.close()


def test_a_new_leader_epoch_forgets_the_preferred_read_replica() -> None:
    """KIP-392 with KIP-320: the replica a leader named is used until the leader changes (Java clears it when the
    position is checked against a new leader), then fetching goes to the leader of the new epoch."""
    broker = FakeBroker({TP.topic: 1})
    broker.num_nodes, broker.leader_epoch = 2, 7
    consumer = broker.consumer(**{"auto.offset.reset": "earliest", "client.rack": "rack-b"})
    broker.client.update_metadata(metadata_update_with(2, broker.topics, leader_epoch=7))  # leader: node 0
    consumer.assign([TP])
    broker.preferred_read_replica = 1
    broker.produce(TP, 2, leader_epoch=7)
    assert len(broker.run(consumer, lambda rs: len(rs) >= 2)) == 2
    broker.preferred_read_replica = -1
    broker.produce(TP, 1, leader_epoch=7)
    assert len(broker.run(consumer, lambda rs: len(rs) >= 1)) == 1
    fetched_from = [node for api, node in broker.destinations if api == ApiKey.FETCH]
    assert fetched_from[0] == 0 and fetched_from[-1] == 1  # the leader named replica 1
    before = len(fetched_from)
    new_leader(broker)
    broker.produce(TP, 1, leader_epoch=8)
    assert [r.offset for r in broker.run(consumer, lambda rs: len(rs) >= 1)] == [3]
    assert set([node for api, node in broker.destinations if api == ApiKey.FETCH][before:]) == {0}
    consumer.close()
