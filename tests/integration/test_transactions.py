"""strom's transactional producer and read_committed consumer against a strom broker; the transaction APIs'
answers to bad input on the wire."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from strom.broker_process import BrokerProcess
from strom.common.error_codes import ErrorCode, InvalidProducerEpochError, ProducerFencedError
from strom.common.errors import IllegalStateError, KafkaError
from strom.common.structs import OffsetAndMetadata, TopicPartition
from strom.consumer import KafkaConsumer
from strom.metrics import metric_values
from strom.producer import KafkaProducer
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest
from strom.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from strom.protocol.messages.end_txn import EndTxnRequest
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest
from strom.protocol.messages.init_producer_id import InitProducerIdRequest
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from strom.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest
from strom.record.builder import MemoryRecordsBuilder
from strom.testing.raw_client import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(data_dir=tmp_path_factory.mktemp("txn") / "data",
                      overrides={"group.initial.rebalance.delay.ms": "0", "transaction.max.timeout.ms": "120000"})
    b.start()
    yield b
    b.stop()
    b.cleanup()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)


def producer(bootstrap: str, tid: str, **configs: object) -> KafkaProducer:
    return KafkaProducer({"bootstrap.servers": bootstrap, "transactional.id": tid, "key.serializer": "bytes",
                          "value.serializer": "bytes", "linger.ms": 5, **configs})


def read(bootstrap: str, topic: str, isolation: str, n: int, timeout: float = 20.0) -> list[bytes]:
    with KafkaConsumer({"bootstrap.servers": bootstrap, "isolation.level": isolation,
                        "auto.offset.reset": "earliest", "enable.auto.commit": False, "group.id": None,
                        "key.deserializer": "bytes", "value.deserializer": "bytes"}) as c:
        tps = [tp for tp in (TopicPartition(topic, p) for p in range(len(c.partitions_for(topic))))]
        c.assign(tps)
        c.seek_to_beginning(tps)
        out: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            out.extend(r.value for r in c.poll(0.2))
        # Nothing more arrives afterwards (what was hidden stays hidden).
        out.extend(r.value for r in c.poll(0.5))
        return out


def test_strom_producer_commit_abort_and_read_committed(txn_broker: BrokerProcess) -> None:
    b = txn_broker.bootstrap
    create_topic(b, "st-txn", 2)
    with producer(b, "st-1") as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(20):
            p.send("st-txn", value=b"c-%02d" % i, partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        futures = [p.send("st-txn", value=b"a-%02d" % i, partition=i % 2) for i in range(20)]
        p.flush()
        assert all(f.get(10).offset >= 0 for f in futures)  # written, then aborted
        p.abort_transaction()
        p.begin_transaction()
        p.send("st-txn", value=b"last", partition=0)
        p.commit_transaction()
    committed = read(b, "st-txn", "read_committed", 21)
    assert sorted(committed) == sorted([b"c-%02d" % i for i in range(20)] + [b"last"])
    assert len(read(b, "st-txn", "read_uncommitted", 41)) == 41
    with KafkaConsumer({"bootstrap.servers": b, "isolation.level": "read_committed", "group.id": None,
                        "key.deserializer": "bytes", "value.deserializer": "bytes"}) as c:
        ends = c.end_offsets([TopicPartition("st-txn", 0), TopicPartition("st-txn", 1)])
        # each: 10 committed + marker + 10 aborted + marker; partition 0 also the last record and its marker
        assert ends == {TopicPartition("st-txn", 0): 24, TopicPartition("st-txn", 1): 22}


def test_wrong_state_calls_raise_illegal_state(txn_broker: BrokerProcess) -> None:
    b = txn_broker.bootstrap
    create_topic(b, "st-state", 1)
    with producer(b, "st-state") as p:
        with pytest.raises(IllegalStateError, match="init_transactions"):
            p.begin_transaction()
        with pytest.raises(IllegalStateError):
            p.send("st-state", value=b"x")
        p.init_transactions()
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            p.send("st-state", value=b"x")
        with pytest.raises(IllegalStateError, match="no transaction in progress"):
            p.commit_transaction()
        p.begin_transaction()
        with pytest.raises(IllegalStateError, match="already"):
            p.begin_transaction()
        p.abort_transaction()  # nothing was sent: completes locally
    with KafkaProducer({"bootstrap.servers": b, "key.serializer": "bytes", "value.serializer": "bytes"}) as plain:
        with pytest.raises(IllegalStateError, match="non-transactional"):
            plain.init_transactions()


def test_fenced_zombie(txn_broker: BrokerProcess) -> None:
    b = txn_broker.bootstrap
    create_topic(b, "st-fence", 1)
    with producer(b, "st-fence") as zombie, producer(b, "st-fence") as successor:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send("st-fence", value=b"zombie").get(10)
        successor.init_transactions()
        successor.begin_transaction()
        successor.send("st-fence", value=b"successor")
        successor.commit_transaction()
        # The zombie's next batch carries the old epoch: the partition refuses it, and the producer is fenced.
        with pytest.raises((InvalidProducerEpochError, ProducerFencedError)):
            zombie.send("st-fence", value=b"zombie-2").get(10)
        with pytest.raises(KafkaError) as ei:
            zombie.commit_transaction()
        assert isinstance(ei.value.__cause__, ProducerFencedError)
        with pytest.raises(KafkaError):
            zombie.begin_transaction()  # fatal: only close() is left
    assert read(b, "st-fence", "read_committed", 1) == [b"successor"]


def test_consume_transform_produce_with_strom_clients(txn_broker: BrokerProcess) -> None:
    b = txn_broker.bootstrap
    create_topic(b, "st-in", 2)
    create_topic(b, "st-out", 2)
    with KafkaProducer({"bootstrap.servers": b, "key.serializer": "bytes", "value.serializer": "bytes"}) as src:
        for i in range(100):
            src.send("st-in", value=b"%d" % i, partition=i % 2)
        src.flush()
    seen = 0
    with KafkaConsumer({"bootstrap.servers": b, "group.id": "st-eos", "isolation.level": "read_committed",
                        "auto.offset.reset": "earliest", "enable.auto.commit": False,
                        "key.deserializer": "bytes", "value.deserializer": "bytes"}) as c, producer(b, "st-eos") as p:
        c.subscribe(["st-in"])
        spent: dict[str, int] = dict.fromkeys(("init", "begin", "send-offsets", "commit", "abort"), 0)

        def timed(call: str, fn: Any, *args: Any) -> None:
            start = time.monotonic_ns()
            fn(*args)
            spent[call] += time.monotonic_ns() - start

        timed("init", p.init_transactions)
        batch_no = 0
        deadline = time.monotonic() + 60
        while seen < 100 and time.monotonic() < deadline:
            records = list(c.poll(0.5))
            if not records:
                continue
            timed("begin", p.begin_transaction)
            for r in records:
                p.send("st-out", value=b"y" + r.value, partition=r.partition)
            offsets = {tp: OffsetAndMetadata(c.position(tp)) for tp in c.assignment()}
            timed("send-offsets", p.send_offsets_to_transaction, offsets, c.group_metadata())
            if batch_no == 0:
                timed("abort", p.abort_transaction)  # processed again from the committed offsets
                for tp in c.assignment():
                    committed = c.committed({tp}).get(tp)
                    if committed is None:
                        c.seek_to_beginning([tp])
                    else:
                        c.seek(tp, committed.offset)
            else:
                timed("commit", p.commit_transaction)
                seen += len(records)
            batch_no += 1
        assert seen == 100
        # Kafka's txn-*-time-ns-total: the time spent in each call, within what the calls took from outside; the
        # calls that wait for the coordinator take a round trip at least (nanoseconds, not milliseconds)
        values = metric_values(p.metrics(), "producer-metrics")
        for call, outside in spent.items():
            assert 0 < values[f"txn-{call}-time-ns-total"] <= outside, call
            if call != "begin":  # (begin_transaction is local)
                assert values[f"txn-{call}-time-ns-total"] > 10_000, call
        committed = c.committed({TopicPartition("st-in", 0), TopicPartition("st-in", 1)})
        assert {tp: om.offset for tp, om in committed.items()} == {TopicPartition("st-in", 0): 50,
                                                                    TopicPartition("st-in", 1): 50}
    out = read(b, "st-out", "read_committed", 100)
    assert sorted(out) == sorted(b"y%d" % i for i in range(100))


def test_bad_input_gets_kafka_error_codes(txn_broker: BrokerProcess) -> None:
    b = txn_broker.bootstrap
    with RawClient(b) as c:
        fc = c.request(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="raw-tid", key_type=1))
        assert fc.error_code in (0, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        deadline = time.monotonic() + 20
        while fc.error_code and time.monotonic() < deadline:
            time.sleep(0.1)
            fc = c.request(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="raw-tid", key_type=1))
        assert fc.error_code == 0
        too_long = c.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(
            transactional_id="raw-tid", transaction_timeout_ms=120001))
        assert too_long.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        unknown = c.request(ApiKey.END_TXN, 3, EndTxnRequest(transactional_id="never-seen", producer_id=1,
                                                             producer_epoch=0, committed=True))
        assert unknown.error_code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        init = c.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(transactional_id="raw-tid",
                                                                           transaction_timeout_ms=60000))
        assert init.error_code == 0
        pid, epoch = init.producer_id, init.producer_epoch
        again = c.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(transactional_id="raw-tid",
                                                                            transaction_timeout_ms=60000))
        assert (again.error_code, again.producer_id, again.producer_epoch) == (0, pid, epoch + 1)
        stale = c.request(ApiKey.END_TXN, 3, EndTxnRequest(transactional_id="raw-tid", producer_id=pid,
                                                           producer_epoch=epoch, committed=True))
        assert stale.error_code == ErrorCode.PRODUCER_FENCED
        nothing_open = c.request(ApiKey.END_TXN, 3, EndTxnRequest(transactional_id="raw-tid", producer_id=pid,
                                                                  producer_epoch=epoch + 1, committed=True))
        assert nothing_open.error_code == ErrorCode.INVALID_TXN_STATE
        missing = c.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="raw-tid", v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch + 1, v3_and_below_topics=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="no-such-topic", partitions=[0])]))
        codes = [p.partition_error_code for t in missing.results_by_topic_v3_and_below
                 for p in t.results_by_partition]
        assert codes == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


def _find_txn_coordinator(c: RawClient, tid: str) -> None:
    deadline = time.monotonic() + 20
    while c.request(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key=tid, key_type=1)).error_code:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_init_producer_id_with_the_current_epoch_bumps_it_and_fences_the_others(txn_broker: BrokerProcess) -> None:
    """KIP-360 on the coordinator (Kafka's prepareIncrementProducerEpoch): InitProducerId naming the current id and
    epoch bumps it; its retry (the answer lost) gets the same epoch again, not a second bump; an epoch the
    coordinator moved past is PRODUCER_FENCED -- also the epoch a new incarnation fenced, which must not pass for a
    retry (it did: the coordinator remembered it as the last epoch and bumped again, fencing the new one)."""
    with RawClient(txn_broker.bootstrap) as c:
        _find_txn_coordinator(c, "kip360")

        def init(pid: int = -1, epoch: int = -1) -> tuple[int, int, int]:
            r = c.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(
                transactional_id="kip360", transaction_timeout_ms=60000, producer_id=pid, producer_epoch=epoch))
            return r.error_code, r.producer_id, r.producer_epoch

        code, pid, e0 = init()
        assert code == ErrorCode.NONE
        assert init(pid, e0) == (ErrorCode.NONE, pid, e0 + 1)  # the producer goes on after an error
        assert init(pid, e0) == (ErrorCode.NONE, pid, e0 + 1)  # a retry of that bump: no second bump
        assert init(pid, e0 + 1) == (ErrorCode.NONE, pid, e0 + 2)
        assert init() == (ErrorCode.NONE, pid, e0 + 3)  # a new incarnation fences every older one
        assert init(pid, e0 + 2)[0] == ErrorCode.PRODUCER_FENCED  # the one it fenced
        assert init(pid, e0 + 1)[0] == ErrorCode.PRODUCER_FENCED
        assert init(pid + 1000, e0 + 3)[0] == ErrorCode.PRODUCER_FENCED  # not this id's producer
        assert init(pid, e0 + 3) == (ErrorCode.NONE, pid, e0 + 4)
        # v2 and below carry no producer id: a plain new incarnation
        old = c.request(ApiKey.INIT_PRODUCER_ID, 2, InitProducerIdRequest(transactional_id="kip360",
                                                                          transaction_timeout_ms=60000))
        assert (old.error_code, old.producer_epoch) == (ErrorCode.NONE, e0 + 5)


class _RawTxn:
    """A transactional producer spoken on the wire, one request at a time (what a client's late or misdirected
    request looks like to the broker)."""

    def __init__(self, c: RawClient, tid: str, topic: str, leader: RawClient | None = None) -> None:
        """``c``: a connection to the transaction coordinator; ``leader``: to the topic's leader (default ``c``)."""
        self.c, self.tid, self.topic = c, tid, topic
        self.leader = leader or c
        self.last_produce: ProduceResponse.PartitionProduceResponse | None = None
        _find_txn_coordinator(c, tid)
        init = c.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(transactional_id=tid,
                                                                           transaction_timeout_ms=60000))
        assert init.error_code == ErrorCode.NONE
        self.pid, self.epoch = init.producer_id, init.producer_epoch
        self.seq: dict[int, int] = {}

    def add(self, partition: int) -> int:
        r = self.c.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.tid, v3_and_below_producer_id=self.pid,
            v3_and_below_producer_epoch=self.epoch, v3_and_below_topics=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=self.topic, partitions=[partition])]))
        return r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code

    def produce(self, partition: int, value: bytes) -> int:
        seq = self.seq.get(partition, 0)
        b = MemoryRecordsBuilder(producer_id=self.pid, producer_epoch=self.epoch, base_sequence=seq,
                                 is_transactional=True)
        b.append(int(time.time() * 1000), None, value)
        resp = self.leader.request(ApiKey.PRODUCE, 9, ProduceRequest(
            acks=-1, timeout_ms=5000, transactional_id=self.tid, topic_data=[ProduceRequest.TopicProduceData(
                name=self.topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition,
                                                                                     records=b.build())])]))
        self.last_produce = resp.responses[0].partition_responses[0]
        code = self.last_produce.error_code
        if code == ErrorCode.NONE:
            self.seq[partition] = seq + 1
        return code

    def end(self, commit: bool) -> int:
        return self.c.request(ApiKey.END_TXN, 3, EndTxnRequest(transactional_id=self.tid, producer_id=self.pid,
                                                               producer_epoch=self.epoch, committed=commit)).error_code

    def add_offsets(self, group: str) -> int:
        return self.c.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, AddOffsetsToTxnRequest(
            transactional_id=self.tid, producer_id=self.pid, producer_epoch=self.epoch, group_id=group)).error_code

    def commit_offset(self, group: str, partition: int, offset: int) -> int:
        r = self.c.request(ApiKey.TXN_OFFSET_COMMIT, 3, TxnOffsetCommitRequest(
            transactional_id=self.tid, group_id=group, producer_id=self.pid, producer_epoch=self.epoch,
            topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=self.topic, partitions=[
                TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(partition_index=partition,
                                                                       committed_offset=offset)])]))
        return r.topics[0].partitions[0].error_code

    def verify(self, *partitions: int, version: int = 4) -> list[int]:
        r = self.c.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, AddPartitionsToTxnRequest(transactions=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
                transactional_id=self.tid, producer_id=self.pid, producer_epoch=self.epoch, verify_only=True,
                topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=self.topic,
                                                                          partitions=list(partitions))])]))
        assert r.error_code == ErrorCode.NONE
        return [p.partition_error_code for t in r.results_by_transaction[0].topic_results
                for p in t.results_by_partition]


def test_a_batch_outside_the_producers_ongoing_transaction_is_refused(txn_broker: BrokerProcess) -> None:
    """KIP-890 part 1 (Kafka 3.6+, ``transaction.partition.verification.enable``): a transaction's first batch in a
    partition is appended only when the coordinator has the partition in the producer's ongoing transaction. A
    request that arrives after its transaction was aborted -- a client's late retry -- used to be appended and open
    a transaction nobody would end: the partition's LSO, and every read_committed reader, stuck behind it."""
    b = txn_broker.bootstrap
    create_topic(b, "verify-txn", 2)
    with RawClient(b) as c:
        t = _RawTxn(c, "verify-1", "verify-txn")
        assert t.add(0) == ErrorCode.NONE
        assert t.verify(0, 1) == [ErrorCode.NONE, ErrorCode.INVALID_TXN_STATE]  # the coordinator, asked directly
        assert t.produce(0, b"in") == ErrorCode.NONE
        assert t.produce(1, b"never added") == ErrorCode.INVALID_TXN_STATE
        assert t.end(commit=False) == ErrorCode.NONE
        assert t.verify(0) == [ErrorCode.INVALID_TXN_STATE]
        assert t.produce(0, b"late") == ErrorCode.INVALID_TXN_STATE  # after the abort: refused, not hanging
        fenced = _RawTxn(c, "verify-1", "verify-txn")  # a new incarnation: the old epoch is fenced
        assert t.produce(0, b"zombie") == ErrorCode.PRODUCER_FENCED
        assert fenced.add(0) == ErrorCode.NONE and fenced.produce(0, b"next") == ErrorCode.NONE
        assert fenced.end(commit=True) == ErrorCode.NONE
    assert read(b, "verify-txn", "read_committed", 1) == [b"next"]
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP

    cons = Consumer({"bootstrap.servers": b, "group.id": "verify-lso", "isolation.level": "read_committed"})
    try:  # the LSO is the log end: "in", its ABORT, "next", its COMMIT
        assert [cons.get_watermark_offsets(CTP("verify-txn", p), timeout=10)[1] for p in (0, 1)] == [4, 0]
    finally:
        cons.close()


def test_a_late_transactional_offset_commit_is_refused(txn_broker: BrokerProcess) -> None:
    """KIP-890 part 1 for offsets (Kafka 3.6+): a TxnOffsetCommit whose transaction ended (aborted) is refused with
    INVALID_TXN_STATE. Accepted, its offsets waited in the group for the producer's next marker, and the next
    committed transaction made them the group's committed offsets although they belonged to an aborted one."""
    b = txn_broker.bootstrap
    create_topic(b, "verify-offsets", 2)
    with RawClient(b) as c:
        assert c.request(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="g-late", key_type=0)).error_code \
            in (ErrorCode.NONE, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        t = _RawTxn(c, "verify-offsets-1", "verify-offsets")
        assert t.add_offsets("g-late") == ErrorCode.NONE
        assert t.commit_offset("g-late", 0, 5) == ErrorCode.NONE
        assert t.end(commit=False) == ErrorCode.NONE
        assert t.commit_offset("g-late", 0, 7) == ErrorCode.INVALID_TXN_STATE  # late: after the abort
        assert t.add_offsets("g-late") == ErrorCode.NONE  # the next transaction, committed
        assert t.commit_offset("g-late", 1, 9) == ErrorCode.NONE
        assert t.end(commit=True) == ErrorCode.NONE
    with KafkaConsumer({"bootstrap.servers": b, "group.id": "g-late", "enable.auto.commit": False,
                        "key.deserializer": "bytes", "value.deserializer": "bytes"}) as cons:
        committed = cons.committed({TopicPartition("verify-offsets", 0), TopicPartition("verify-offsets", 1)})
    assert committed == {TopicPartition("verify-offsets", 0): None,
                         TopicPartition("verify-offsets", 1): OffsetAndMetadata(9, "")}


def test_after_a_failed_batch_the_abort_bumps_the_epoch_and_the_producer_goes_on(txn_broker: BrokerProcess) -> None:
    """A batch the broker refuses (MESSAGE_TOO_LARGE for the topic) fails its transaction; abort_transaction()
    bumps the epoch with the coordinator (KIP-360) and the same producer commits the next transaction: a
    read_committed reader sees its records, and none of the aborted one's."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": txn_broker.bootstrap})
    for f in admin.create_topics([NewTopic("kip360-out", 1, 1, config={"max.message.bytes": "2000"})]).values():
        f.result(30)
    p = producer(txn_broker.bootstrap, "kip360-client")
    try:
        p.init_transactions()
        epoch = p._transaction_manager.producer_id_and_epoch().epoch
        p.begin_transaction()
        kept = p.send("kip360-out", value=b"aborted-1")
        p.flush()
        assert kept.get(10).offset >= 0
        too_large = p.send("kip360-out", value=b"x" * 5000)
        p.flush()
        with pytest.raises(KafkaError):
            too_large.get(10)
        with pytest.raises(KafkaError):
            p.commit_transaction()
        p.abort_transaction()
        assert p._transaction_manager.producer_id_and_epoch().epoch == epoch + 1
        p.begin_transaction()
        for i in range(3):
            p.send("kip360-out", value=b"committed-%d" % i)
        p.commit_transaction()
    finally:
        p.close()
    assert read(txn_broker.bootstrap, "kip360-out", "read_committed", 3) == [b"committed-%d" % i for i in range(3)]


def test_idle_transactional_id_expires(tmp_path) -> None:
    """``transactional.id.expiration.ms``: an id idle that long is forgotten (tombstoned), also across a restart."""
    overrides = {"transactional.id.expiration.ms": "1000",
                 "transaction.remove.expired.transaction.cleanup.interval.ms": "100"}
    with BrokerProcess(data_dir=tmp_path / "data", overrides=overrides) as b, RawClient(b.bootstrap) as c:
        deadline = time.monotonic() + 20
        while c.request(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="idle", key_type=1)).error_code:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        init = c.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(transactional_id="idle",
                                                                           transaction_timeout_ms=60000))
        assert init.error_code == 0
        end = EndTxnRequest(transactional_id="idle", producer_id=init.producer_id,
                            producer_epoch=init.producer_epoch, committed=False)
        assert c.request(ApiKey.END_TXN, 3, end).error_code == ErrorCode.INVALID_TXN_STATE  # known, nothing open
        deadline = time.monotonic() + 20
        while c.request(ApiKey.END_TXN, 3, end).error_code != ErrorCode.INVALID_PRODUCER_ID_MAPPING:
            assert time.monotonic() < deadline, "the idle transactional id was never expired"
            time.sleep(0.1)
    with BrokerProcess(data_dir=tmp_path / "data", overrides=overrides) as b, RawClient(b.bootstrap) as c:
        deadline = time.monotonic() + 20
        while c.request(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="idle", key_type=1)).error_code:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert c.request(ApiKey.END_TXN, 3, end).error_code == ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_describe_list_transactions_and_producers(txn_broker: BrokerProcess) -> None:
    from strom.protocol.messages.describe_producers import DescribeProducersRequest
    from strom.protocol.messages.describe_transactions import DescribeTransactionsRequest
    from strom.protocol.messages.list_transactions import ListTransactionsRequest

    b = txn_broker.bootstrap
    create_topic(b, "st-desc", 2)
    with producer(b, "st-desc-tx") as p, RawClient(b) as c:
        p.init_transactions()
        p.begin_transaction()
        p.send("st-desc", value=b"x", partition=1).get(10)
        d = c.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(
            transactional_ids=["st-desc-tx", "nobody"])).transaction_states
        assert (d[0].error_code, d[0].transaction_state, [(t.topic, t.partitions) for t in d[0].topics]) == \
            (0, "Ongoing", [("st-desc", [1])])
        assert d[1].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        ongoing = c.request(ApiKey.LIST_TRANSACTIONS, 1, ListTransactionsRequest(
            state_filters=["Ongoing", "Bogus"], producer_id_filters=[], duration_filter=-1))
        assert ongoing.unknown_state_filters == ["Bogus"]
        assert [s.transactional_id for s in ongoing.transaction_states] == ["st-desc-tx"]
        producers = c.request(ApiKey.DESCRIBE_PRODUCERS, 0, DescribeProducersRequest(topics=[
            DescribeProducersRequest.TopicRequest(name="st-desc", partition_indexes=[1])])).topics[0].partitions[0]
        assert [(s.producer_id, s.current_txn_start_offset) for s in producers.active_producers] == \
            [(d[0].producer_id, 0)]
        p.commit_transaction()
        after = c.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(
            transactional_ids=["st-desc-tx"])).transaction_states[0]
        assert after.transaction_state == "CompleteCommit" and after.topics == []
