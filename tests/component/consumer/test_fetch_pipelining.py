"""The consumer does not park a long poll for caught-up partitions while records of another partition are still
buffered: such a fetch would block the next fetch of the partition being drained for up to fetch.max.wait.ms.
It asks again, for every partition, once the buffer is empty."""

from __future__ import annotations

from strom.common.structs import TopicPartition
from strom.protocol.api_keys import ApiKey

from .fake_broker import FakeBroker

QUIET, BUSY = TopicPartition("t", 0), TopicPartition("t", 1)


def test_no_fetch_of_caught_up_partitions_while_records_are_buffered() -> None:
    broker = FakeBroker({"t": 2})
    consumer = broker.consumer(**{"auto.offset.reset": "earliest", "max.poll.records": 5})
    consumer.assign([QUIET, BUSY])
    broker.produce(QUIET, 1)
    broker.produce(BUSY, 30)
    got = broker.run(consumer, lambda rs: len(rs) >= 5)
    # One fetch brought everything; QUIET (first in the response) is consumed and caught up, BUSY is buffered.
    assert len(broker.requests_of(ApiKey.FETCH)) == 1
    assert (got[0].partition, got[0].offset) == (0, 0)
    while len(got) < 31:
        assert len(broker.requests_of(ApiKey.FETCH)) == 1, "fetched the caught-up partition while BUSY was buffered"
        got.extend(consumer.poll(timeout_ms=0))
        broker.pump()
    assert [r.offset for r in got if r.partition == 1] == list(range(30))
    # The buffer is empty: the next fetch goes out for both partitions, at their positions.
    broker.run(consumer, lambda _rs: len(broker.requests_of(ApiKey.FETCH)) >= 2)
    last = broker.requests_of(ApiKey.FETCH)[-1]
    assert sorted((p.partition, p.fetch_offset) for t in last.topics for p in t.partitions) == [(0, 1), (1, 30)]
    consumer.close()


def test_records_of_a_paused_partition_do_not_hold_back_fetches() -> None:
    broker = FakeBroker({"t": 2})
    consumer = broker.consumer(**{"auto.offset.reset": "earliest", "max.poll.records": 5})
    consumer.assign([QUIET, BUSY])
    broker.produce(QUIET, 1)
    broker.produce(BUSY, 30)
    broker.run(consumer, lambda rs: len(rs) >= 5)
    consumer.pause([BUSY])  # its 26 buffered records stay buffered, but they are not "being drained"
    broker.produce(QUIET, 3)
    got = broker.run(consumer, lambda rs: len(rs) >= 3)
    assert [(r.partition, r.offset) for r in got] == [(0, 1), (0, 2), (0, 3)]
    consumer.close()
