"""strom.aio against a real broker: the asyncio producer and consumer do what the threaded clients do, and never
hold up their event loop (a ticker task on the same loop keeps ticking while they wait)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from strom.admin import AdminClient, NewTopic
from strom.aio import AsyncKafkaConsumer, AsyncKafkaProducer
from strom.broker_process import BrokerProcess
from strom.common.errors import KafkaTimeoutError
from strom.common.structs import TopicPartition
from strom.producer import RecordTooLargeError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("aio") / "data",
                      overrides={"group.initial.rebalance.delay.ms": "0",
                                 "auto.create.topics.enable": "false"}).start()
    yield b
    b.stop()
    b.cleanup()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, partitions, 1)]).all().result(30)


class Ticker:
    """A task that notes the longest gap between its 5 ms ticks: how long the loop was held up."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            self.longest = max(self.longest, now - last)
            last = now

    def __enter__(self) -> Ticker:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


def producer(bootstrap: str, **configs: object) -> AsyncKafkaProducer:
    return AsyncKafkaProducer({"bootstrap.servers": bootstrap, "key.serializer": "str", "value.serializer": "str",
                               "linger.ms": 5, **configs})


def consumer(bootstrap: str, **configs: object) -> AsyncKafkaConsumer:
    return AsyncKafkaConsumer({"bootstrap.servers": bootstrap, "key.deserializer": "str",
                               "value.deserializer": "str", "auto.offset.reset": "earliest", **configs})


def test_produce_then_consume_in_a_group_and_commit(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "aio-orders", 3)

    async def main() -> None:
        async with producer(broker.bootstrap) as p:
            first = await p.send_and_wait("aio-orders", "v0", key="k0")  # waits for the topic's metadata
            assert first.topic == "aio-orders" and first.offset == 0
            futures = [await p.send("aio-orders", f"v{i}", key=f"k{i}") for i in range(1, 300)]
            offsets = [(m.partition, m.offset) for m in await asyncio.gather(*futures)]
            assert len(set(offsets)) == 299
        async with consumer(broker.bootstrap, **{"group.id": "aio-g", "enable.auto.commit": False}) as c:
            await c.subscribe("aio-orders")
            values: list[str] = []
            with Ticker() as ticker:
                async for record in c:  # polls wait on the consumer's thread, not on the loop
                    values.append(record.value)
                    if len(values) == 300:
                        break
            assert sorted(values, key=lambda v: int(v[1:])) == [f"v{i}" for i in range(300)]
            assert ticker.longest < 0.5
            await c.commit()
            committed = await c.committed([TopicPartition("aio-orders", p) for p in range(3)])
            assert sum(om.offset for om in committed.values()) == 300

    asyncio.run(main())


def test_record_errors_reach_the_awaiting_task_and_metadata_waits_do_not_block_the_loop(
        broker: BrokerProcess) -> None:
    async def main() -> None:
        async with producer(broker.bootstrap, **{"max.block.ms": 1500, "max.request.size": 10_000}) as p:
            with Ticker() as ticker:
                with pytest.raises(KafkaTimeoutError, match="not present in metadata after 1500 ms"):
                    await p.send_and_wait("aio-no-such-topic", "v")  # (the broker does not auto-create it)
            assert ticker.longest < 0.5  # the 1.5 s wait for metadata ran in a worker thread
            create_topic(broker.bootstrap, "aio-small", 1)
            with pytest.raises(RecordTooLargeError):
                await p.send_and_wait("aio-small", "x" * 20_000)
            assert (await p.send_and_wait("aio-small", "fits")).offset == 0

    asyncio.run(main())


def test_a_cancelled_poll_loses_no_records(broker: BrokerProcess) -> None:
    """A poll cancelled while it waits wakes the consumer up; records it took before the cancellation arrived are
    handed to the next poll, so every record is seen once."""
    create_topic(broker.bootstrap, "aio-cancel", 1)
    tp = TopicPartition("aio-cancel", 0)

    async def main() -> None:
        async with consumer(broker.bootstrap, **{"fetch.max.wait.ms": 100}) as c:
            await c.assign([tp])
            waiting = asyncio.ensure_future(c.poll(30))  # nothing to read yet: a long wait
            await asyncio.sleep(0.3)
            started = time.monotonic()
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert (await c.poll(0)).count() == 0
            assert time.monotonic() - started < 5  # the wait ended at the cancellation, not after 30 s
            async with producer(broker.bootstrap) as p:
                for i in range(50):
                    await p.send("aio-cancel", f"r{i}", partition=0)
            got: list[str] = []
            deadline = time.monotonic() + 30
            while len(got) < 50:
                assert time.monotonic() < deadline, got
                task = asyncio.ensure_future(c.poll(5))
                await asyncio.sleep(0.05)  # cancel some polls while they wait or after they took records
                if not task.done():
                    task.cancel()
                try:
                    got += [r.value for r in await task]
                except asyncio.CancelledError:
                    pass
                got += [r.value for r in await c.poll(0.2)]
            assert got == [f"r{i}" for i in range(50)]
            assert await c.position(tp) == 50

    asyncio.run(main())


def test_records_a_cancelled_poll_had_taken_come_with_the_next_poll(broker: BrokerProcess) -> None:
    """The poll takes records on the consumer's thread while the loop is busy; its task is cancelled before the
    loop hears of them: they must come with the next poll, not be dropped (the positions moved past them)."""
    from strom.metrics import metric_values

    create_topic(broker.bootstrap, "aio-taken", 1)
    tp = TopicPartition("aio-taken", 0)

    async def main() -> None:
        async with consumer(broker.bootstrap, **{"fetch.max.wait.ms": 50}) as c:
            await c.assign([tp])
            assert (await c.poll(0.5)).count() == 0  # the position is known; nothing to read yet
            async with producer(broker.bootstrap) as p:
                for i in range(10):
                    await p.send("aio-taken", f"t{i}", partition=0)
            task = asyncio.ensure_future(c.poll(10))
            await asyncio.sleep(0)  # the poll starts on the consumer's thread

            def consumed() -> float:
                return metric_values(c.metrics(), "consumer-fetch-manager-metrics")["records-consumed-total"]

            deadline = time.monotonic() + 20
            while consumed() < 10:  # the loop is held here (no await) while the thread takes the records
                assert time.monotonic() < deadline, "the poll never took the records"
                time.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert [r.value for r in await c.poll(0)] == [f"t{i}" for i in range(10)]
            assert await c.position(tp) == 10

    asyncio.run(main())


def test_transactions_commit_and_abort(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "aio-txn", 1)

    async def main() -> None:
        async with producer(broker.bootstrap, **{"transactional.id": "aio-tx"}) as p:
            await p.init_transactions()
            p.begin_transaction()
            await p.send("aio-txn", "aborted", partition=0)
            await p.abort_transaction()
            p.begin_transaction()
            futures = [await p.send("aio-txn", f"c{i}", partition=0) for i in range(3)]
            await p.commit_transaction()
            assert all(f.done() for f in futures)  # the commit sent them first
        async with consumer(broker.bootstrap, **{"isolation.level": "read_committed"}) as c:
            await c.assign([TopicPartition("aio-txn", 0)])
            got: list[str] = []
            deadline = time.monotonic() + 20
            while len(got) < 3:
                assert time.monotonic() < deadline, got
                got += [r.value for r in await c.poll(0.5)]
            assert got == ["c0", "c1", "c2"]

    asyncio.run(main())


def test_bulk_sends_pause_resume_and_the_columnar_poll(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "aio-bulk", 2)
    tp0, tp1 = TopicPartition("aio-bulk", 0), TopicPartition("aio-bulk", 1)

    async def main() -> None:
        async with producer(broker.bootstrap) as p:
            segments = await p.send_many("aio-bulk", [f"b{i}" for i in range(1000)], partition=0)
            last = [m.offset for m in await asyncio.gather(*segments)]
            assert last[-1] == 999  # each segment's future: the metadata of its last record
            await p.send_and_wait("aio-bulk", "other", partition=1)
        async with consumer(broker.bootstrap, **{"max.poll.records": 5000}) as c:
            await c.assign([tp0, tp1])
            await c.pause([tp0])
            got = []
            deadline = time.monotonic() + 20
            while not got:
                assert time.monotonic() < deadline
                got = [(r.partition, r.value) for r in await c.poll(0.5)]
            assert got == [(1, "other")]  # partition 0 is paused
            await c.resume([tp0])
            rows = 0
            while rows < 1000:
                assert time.monotonic() < deadline
                table = await c.poll_arrow(0.5)
                rows += table.num_rows
            assert rows == 1000 and table.column("value")[table.num_rows - 1].as_py() == b"b999"
            assert await c.beginning_offsets([tp0]) == {tp0: 0}

    asyncio.run(main())


def test_an_async_for_that_stops_early_loses_nothing_and_commits_only_what_it_handed_out(
        broker: BrokerProcess) -> None:
    """``async for`` takes whole polls; a loop that breaks after 10 records leaves the rest for the next poll, and
    commit() without offsets commits offset 10, not the position the poll moved to."""
    create_topic(broker.bootstrap, "aio-break", 1)
    tp = TopicPartition("aio-break", 0)

    async def main() -> None:
        async with producer(broker.bootstrap) as p:
            await asyncio.gather(*[await p.send("aio-break", f"m{i}", partition=0) for i in range(100)])
        async with consumer(broker.bootstrap, **{"group.id": "aio-break-g", "enable.auto.commit": False}) as c:
            await c.assign([tp])
            first: list[str] = []
            async for record in c:
                first.append(record.value)
                if len(first) == 10:
                    break
            assert await c.position(tp) > 10  # the poll took more than the loop handed out
            await c.commit()
            assert (await c.committed(tp)).offset == 10
            rest: list[str] = []
            async for record in c:
                rest.append(record.value)
                if len(first) + len(rest) == 100:
                    break
            assert first + rest == [f"m{i}" for i in range(100)]
            await c.commit()
            assert (await c.committed(tp)).offset == 100

    asyncio.run(main())


def test_a_seek_inside_an_async_for_drops_the_records_it_held(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "aio-seek", 1)
    tp = TopicPartition("aio-seek", 0)

    async def main() -> None:
        async with producer(broker.bootstrap) as p:
            await asyncio.gather(*[await p.send("aio-seek", f"s{i}", partition=0) for i in range(20)])
        async with consumer(broker.bootstrap) as c:
            await c.assign([tp])
            seen: list[str] = []
            rewound = False
            async for record in c:
                seen.append(record.value)
                if len(seen) == 5 and not rewound:
                    rewound = True
                    await c.seek(tp, 2)  # the 15 records the poll took after s4 are not handed out
                if len(seen) == 5 + 18:
                    break
            assert seen == [f"s{i}" for i in range(5)] + [f"s{i}" for i in range(2, 20)]

    asyncio.run(main())
