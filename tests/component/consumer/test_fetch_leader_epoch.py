"""KIP-320 fencing in the consumer: Fetch and ListOffsets carry the leader epoch of the consumer's metadata, a
FENCED_LEADER_EPOCH answer (the broker moved on) refreshes the metadata and fetching resumes with the new epoch,
UNKNOWN_LEADER_EPOCH (the broker is behind us) is retried; no record is lost or repeated."""

from __future__ import annotations

from strom.common.error_codes import ErrorCode
from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey
from strom.testing.mock_client import metadata_update_with

from .fake_broker import FakeBroker

TP = TopicPartition("epochs", 0)


def test_fetches_carry_the_metadata_leader_epoch_and_fencing_refreshes_it() -> None:
    broker = FakeBroker({TP.topic: 1})
    epoch = [7]

    def refresh_metadata() -> None:  # the "broker" answers metadata updates with its current leader epoch
        metadata = broker.client.metadata
        if metadata is not None and metadata.update_requested():
            broker.client.prepare_metadata_update(metadata_update_with(1, broker.topics, leader_epoch=epoch[0]))

    broker.refresh_metadata = refresh_metadata  # type: ignore[method-assign]
    consumer = broker.consumer(**{"auto.offset.reset": "earliest"})
    broker.client.update_metadata(metadata_update_with(1, broker.topics, leader_epoch=7))
    consumer.assign([TP])
    broker.produce(TP, 5)
    got = broker.run(consumer, lambda rs: len(rs) >= 5)
    assert {r.current_leader_epoch for r in broker.requests_of(ApiKey.LIST_OFFSETS)[0].topics[0].partitions} == {7}
    assert {p.current_leader_epoch for f in broker.requests_of(ApiKey.FETCH) for t in f.topics
            for p in t.partitions} == {7}

    # Leadership moved (epoch 8): like a broker, answer a fetch naming an older epoch with FENCED_LEADER_EPOCH;
    # the consumer must refresh its metadata to read on. One UNKNOWN_LEADER_EPOCH first is simply retried.
    answer = broker.answer

    def fencing_answer(api_key: int, req: object) -> object:
        if api_key == ApiKey.FETCH and any(0 <= p.current_leader_epoch < epoch[0]
                                           for t in req.topics for p in t.partitions):  # type: ignore[attr-defined]
            broker.inject(ApiKey.FETCH, ErrorCode.FENCED_LEADER_EPOCH)
        return answer(api_key, req)

    broker.answer = fencing_answer  # type: ignore[method-assign]
    epoch[0] = 8
    broker.inject(ApiKey.FETCH, ErrorCode.UNKNOWN_LEADER_EPOCH)
    fetches_before = len(broker.requests_of(ApiKey.FETCH))
    broker.produce(TP, 5)
    got += broker.run(consumer, lambda rs: len(rs) >= 5, max_rounds=2000)
    epochs = [p.current_leader_epoch for f in broker.requests_of(ApiKey.FETCH)[fetches_before:] for t in f.topics
              for p in t.partitions]
    assert epochs[0] == 7 and epochs[-1] == 8
    assert [r.offset for r in got] == list(range(10))
    consumer.close()
