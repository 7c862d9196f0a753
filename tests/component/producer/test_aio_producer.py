"""strom.aio.AsyncKafkaProducer over a MockClient: the futures of records whose batch the broker refused as too
large and the producer split follow their records into the new batch, and each gets its own offset."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from strom.aio import AsyncKafkaProducer
from strom.common.error_codes import ErrorCode
from strom.producer.internals.producer_metadata import ProducerMetadata
from strom.protocol.messages import ProduceRequest
from strom.testing.mock_client import MockClient, metadata_update_with
from strom.testing.mock_time import MockTime

from .sender_support import produce_response, request_partitions

pytestmark = [pytest.mark.component, pytest.mark.timeout(30)]


class ThreadedMockTime(MockTime):
    """Condition waits really wait a little for a notification (the Sender thread answers metadata requests
    concurrently) and only advance the clock when none came."""

    def wait_on(self, cond: threading.Condition, timeout_ms: int) -> None:
        if not cond.wait(0.05):
            self.sleep(min(max(0, timeout_ms), 500))


def test_the_futures_of_a_split_batch_complete_with_their_records_offsets() -> None:
    clock = ThreadedMockTime()
    metadata = ProducerMetadata(100, 300_000, 300_000, clock)
    client = MockClient(clock, metadata, max_real_poll_ms=5)
    client.default_metadata_response = metadata_update_with(1, {"t": 1})
    producer = AsyncKafkaProducer({"bootstrap.servers": "localhost:9092", "key.serializer": "bytes",
                                   "value.serializer": "bytes", "enable.idempotence": False, "linger.ms": 10_000,
                                   "batch.size": 100_000}, time=clock, client=client, metadata=metadata)
    answered: list[int] = []  # record count of each produce request, in the order answered

    def answer() -> bool:
        requests = [r for r in list(client.requests) if isinstance(r.request, ProduceRequest)]
        for request in requests:
            (tp, records), = request_partitions(request.request).items()
            if not answered:  # the first (whole) batch is too large for the "broker"
                response = produce_response(tp, error=ErrorCode.MESSAGE_TOO_LARGE)
                answered.append(-1)
            else:
                count = records[57:61]  # the batch header's record count
                answered.append(int.from_bytes(count, "big"))
                response = produce_response(tp, offset=100 + sum(n for n in answered[1:-1]))
            client.respond_to_request(request, response)
        if requests:
            client.wakeup()
        return bool(requests)

    async def main() -> list[Any]:
        futures = [await producer.send("t", b"v" * 1000, partition=0) for _ in range(30)]
        flushing = asyncio.ensure_future(producer.flush(10))
        while not all(f.done() for f in futures):
            answer()
            await asyncio.sleep(0.005)
        await flushing
        return [f.result() for f in futures]

    try:
        metadata_list = asyncio.run(main())
    finally:
        producer.producer.close(0)
    assert answered == [-1, 30]  # refused once, then sent again as the batch the split made
    assert [m.offset for m in metadata_list] == list(range(100, 130))
