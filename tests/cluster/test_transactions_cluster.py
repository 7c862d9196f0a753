"""Transactions on a real cluster (ZooKeeper + 3 strom brokers): markers written to partition leaders on other
brokers (WriteTxnMarkers), and kill -9 of the transaction coordinator inside an open transaction: the new leader
of the ``__transaction_state`` partition loads the state, aborts the transaction once it outlives its timeout,
and read_committed readers see every committed record once and nothing of the aborted one."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic

from strom.common.error_codes import ErrorCode
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest
from strom.testing.cluster import LocalCluster, wait_until
from strom.testing.raw_client import RawClient
from tests.cluster.test_replication import partition_meta

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


def read_committed(bootstrap: str, topic: str, partitions: int, expect: int, timeout_s: float = 60) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4()}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.assign([CTP(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < expect and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m.value())
        end = time.monotonic() + 2  # and nothing more
        while time.monotonic() < end:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m.value())
    finally:
        c.close()
    return out


def lso(bootstrap: str, topic: str, partition: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"w-{uuid.uuid4()}", "isolation.level": "read_committed"})
    try:
        return c.get_watermark_offsets(CTP(topic, partition), timeout=10)[1]
    finally:
        c.close()


def hw(bootstrap: str, topic: str, partition: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"w-{uuid.uuid4()}"})
    try:
        return c.get_watermark_offsets(CTP(topic, partition), timeout=10)[1]
    finally:
        c.close()


def test_markers_across_brokers_and_coordinator_kill(tmp_path) -> None:  # type: ignore[no-untyped-def]
    overrides = {"min.insync.replicas": "2", "transaction.state.log.num.partitions": "3",
                 "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}
    with LocalCluster(3, overrides=overrides) as cluster:
        try:
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            for f in admin.create_topics([NewTopic("txc", 3, 3)], operation_timeout=30).values():
                f.result(60)
            leaders = {p.id: p.leader for p in admin.list_topics("txc", timeout=10).topics["txc"].partitions.values()}
            assert len(set(leaders.values())) > 1  # the markers must reach more than one broker
            p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "cluster-tx",
                          "transaction.timeout.ms": 6000, "linger.ms": 5})
            p.init_transactions(60)
            p.begin_transaction()
            for i in range(30):
                p.produce("txc", value=b"c-%02d" % i, partition=i % 3)
            p.commit_transaction(60)
            assert sorted(read_committed(cluster.bootstrap, "txc", 3, 30)) == sorted(b"c-%02d" % i for i in range(30))

            p.begin_transaction()
            for i in range(30):
                p.produce("txc", value=b"open-%02d" % i, partition=i % 3)
            p.flush(60)
            host, port = cluster.bootstrap.split(",")[0].split(":")
            with RawClient(f"{host}:{port}") as rc:
                fc = rc.request(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="cluster-tx", key_type=1))
            assert fc.error_code == 0
            coordinator = fc.node_id
            cluster.brokers[coordinator].kill()
            survivors = [n for n in (1, 2, 3) if n != coordinator]
            boot = cluster.bootstrap_of(*survivors)
            # The new coordinator aborts the transaction after its timeout: the LSO of every partition reaches
            # its log end (no reader stays stuck behind the hanging transaction).
            wait_until(lambda: all(lso(boot, "txc", part) == hw(boot, "txc", part) for part in range(3)),
                       timeout_s=120, what="the open transaction to be aborted")
            assert sorted(read_committed(boot, "txc", 3, 30)) == sorted(b"c-%02d" % i for i in range(30))
            # A new incarnation works against the new coordinator.
            q = Producer({"bootstrap.servers": boot, "transactional.id": "cluster-tx", "linger.ms": 5})
            q.init_transactions(60)
            q.begin_transaction()
            for i in range(3):
                q.produce("txc", value=b"n-%d" % i, partition=i)
            q.commit_transaction(60)
            got = read_committed(boot, "txc", 3, 33)
            assert sorted(got) == sorted([b"c-%02d" % i for i in range(30)] + [b"n-%d" % i for i in range(3)])
        finally:
            for n, b in cluster.brokers.items():  # shown by pytest when the test failed
                print(f"==== broker {n} log (tail)\n" + "\n".join(b.read_log().splitlines()[-40:]))


def test_coordinator_killed_between_commit_decision_and_markers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """EndTxn's decision (PrepareCommit) is written but the marker cannot reach the partition's leader (stopped
    with SIGSTOP); then the coordinator is killed with SIGKILL. Its successor loads PrepareCommit and writes the
    marker once the leader is back: the transaction becomes visible, entirely."""
    import os
    import signal

    overrides = {"transaction.state.log.num.partitions": "3", "min.insync.replicas": "1"}
    with LocalCluster(3, overrides=overrides) as cluster:
        try:
            p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "prep-tx", "linger.ms": 5,
                          "transaction.timeout.ms": 120000})
            p.init_transactions(60)
            first = cluster.bootstrap.split(",")[0]
            with RawClient(first) as rc:
                fc = rc.request(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="prep-tx", key_type=1))
            assert fc.error_code == 0
            coordinator = fc.node_id
            data_leader = next(n for n in (1, 2, 3) if n != coordinator)
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            for f in admin.create_topics([NewTopic("prep", num_partitions=1, replica_assignment=[[data_leader]])],
                                         operation_timeout=30).values():
                f.result(60)
            p.begin_transaction()
            for i in range(10):
                p.produce("prep", value=b"v-%d" % i, partition=0)
            p.flush(60)
            stopped = cluster.brokers[data_leader].proc
            assert stopped is not None
            os.kill(stopped.pid, signal.SIGSTOP)
            try:
                p.commit_transaction(90)  # the decision is durable; the marker is still pending
                assert "prep-tx: markers still being written" in cluster.brokers[coordinator].read_log()
                cluster.brokers[coordinator].kill()
            finally:
                os.kill(stopped.pid, signal.SIGCONT)
            survivors = [n for n in (1, 2, 3) if n != coordinator]
            boot = cluster.bootstrap_of(*survivors)
            got = read_committed(boot, "prep", 1, 10, timeout_s=120)
            assert got == [b"v-%d" % i for i in range(10)]
        finally:
            for n, b in cluster.brokers.items():  # shown by pytest when the test failed
                print(f"==== broker {n} log (tail)\n" + "\n".join(b.read_log().splitlines()[-40:]))


def test_a_marker_a_restarting_leader_refuses_is_retried(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A leader killed and started again serves requests before the controller's LeaderAndIsr reaches it, and
    answers UNKNOWN_TOPIC_OR_PARTITION for its partitions meanwhile. A COMMIT marker refused so must be retried (as
    Kafka's coordinator does): dropped, it left the transaction open on that partition, whose committed records a
    read_committed reader never saw (found by the transactions stress test)."""
    import threading

    from strom.protocol.messages.list_offsets import ListOffsetsRequest

    # __transaction_state on one replica: the coordinator's writes must not wait for the restarting broker
    overrides = {"transaction.state.log.num.partitions": "3", "transaction.state.log.replication.factor": "1",
                 "transaction.state.log.min.isr": "1", "min.insync.replicas": "1"}
    with LocalCluster(3, overrides=overrides) as cluster:
        try:
            p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "restart-tx", "linger.ms": 5,
                          "transaction.timeout.ms": 120000})
            p.init_transactions(60)
            with RawClient(cluster.bootstrap.split(",")[0]) as rc:
                fc = rc.request(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="restart-tx", key_type=1))
            assert fc.error_code == 0
            coordinator = fc.node_id
            restarted = next(n for n in (1, 2, 3) if n != coordinator)
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            for f in admin.create_topics([NewTopic("rst", num_partitions=2,
                                                   replica_assignment=[[restarted], [coordinator]])],
                                         operation_timeout=30).values():
                f.result(60)
            p.begin_transaction()
            for i in range(20):
                p.produce("rst", value=b"v-%02d" % i, partition=i % 2)
            p.flush(60)
            broker = cluster.brokers[restarted]
            broker.kill()
            starting = threading.Thread(target=broker.start, kwargs={"timeout": 120}, daemon=True)
            starting.start()

            def up_without_its_partitions() -> bool:
                # Serving requests, not registered yet (its old ZooKeeper session lingers): no partition known.
                # (Metadata would wait for the controller's first UpdateMetadata; ListOffsets answers at once.)
                with RawClient(broker.bootstrap, timeout=2) as rc:
                    lo = rc.request(ApiKey.LIST_OFFSETS, 7, ListOffsetsRequest(replica_id=-1, topics=[
                        ListOffsetsRequest.ListOffsetsTopic(name="rst", partitions=[
                            ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])]))
                return lo.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

            wait_until(up_without_its_partitions, 60, f"broker {restarted} to serve requests", interval_s=0.02)
            p.commit_transaction(60)
            starting.join(120)
            cluster.wait_for_metadata()
            refused = f"for rst-0 failed at broker {restarted}: UNKNOWN_TOPIC_OR_PARTITION; retrying"
            assert refused in cluster.brokers[coordinator].read_log()  # the window this test is about was hit
            got = read_committed(cluster.bootstrap, "rst", 2, 20, timeout_s=60)
            assert sorted(got) == [b"v-%02d" % i for i in range(20)]
        finally:
            for n, b in cluster.brokers.items():  # shown by pytest when the test failed
                print(f"==== broker {n} log (tail)\n" + "\n".join(b.read_log().splitlines()[-40:]))


def test_leaders_verify_a_transactions_first_batch_with_its_coordinator(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """KIP-890 part 1 across brokers: the topic's leader is not the transaction's coordinator, so it asks the
    coordinator (AddPartitionsToTxn v4, verify_only) before appending a transaction's first batch. A partition
    never added, and a late batch after the abort, are refused (INVALID_TXN_STATE); with the coordinator gone the
    leader cannot verify and answers NOT_ENOUGH_REPLICAS, which producers retry."""
    from tests.integration.test_transactions import _RawTxn

    overrides = {"transaction.state.log.num.partitions": "3", "transaction.state.log.replication.factor": "1",
                 "transaction.state.log.min.isr": "1", "min.insync.replicas": "1"}
    with LocalCluster(3, overrides=overrides) as cluster:
        with RawClient(cluster.bootstrap.split(",")[0]) as rc:
            fc = wait_until(lambda: (r := rc.request(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(
                key="verify-tx", key_type=1))).error_code == 0 and r, 60, "a transaction coordinator")
        coordinator = fc.node_id
        leader = next(n for n in (1, 2, 3) if n != coordinator)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for f in admin.create_topics([NewTopic("ver", num_partitions=2, replica_assignment=[[leader], [leader]])],
                                     operation_timeout=30).values():
            f.result(60)
        cluster.wait_for_metadata()
        with RawClient(cluster.brokers[coordinator].bootstrap) as cc, \
                RawClient(cluster.brokers[leader].bootstrap) as lc:
            t = _RawTxn(cc, "verify-tx", "ver", leader=lc)
            assert t.add(0) == ErrorCode.NONE
            assert t.produce(0, b"in") == ErrorCode.NONE
            assert t.produce(1, b"never added") == ErrorCode.INVALID_TXN_STATE
            assert t.end(commit=False) == ErrorCode.NONE
            assert t.produce(0, b"late") == ErrorCode.INVALID_TXN_STATE
            cluster.brokers[coordinator].kill()  # its __transaction_state partition has no other replica
            assert t.produce(0, b"unverifiable") == ErrorCode.NOT_ENOUGH_REPLICAS
            assert t.last_produce is not None and "Unable to verify" in (t.last_produce.error_message or "")
        assert lso(cluster.bootstrap_of(leader), "ver", 0) == hw(cluster.bootstrap_of(leader), "ver", 0) == 2


def test_a_coordinator_write_below_min_isr_is_refused_before_it_reaches_the_log(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``__transaction_state`` with min ISR 2 and its two followers killed: the coordinator's writes are refused
    (acks=-1, NOT_ENOUGH_REPLICAS, which the producer retries) and none reaches the log -- a state written anyway
    and refused only afterwards was what the next leader to load the partition took effect of, while the client
    had been told it failed. Once the followers are back the same transaction commits, whole."""
    overrides = {"transaction.state.log.num.partitions": "1", "transaction.state.log.min.isr": "2",
                 "min.insync.replicas": "1"}
    with LocalCluster(3, overrides=overrides) as cluster:
        try:
            p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "min-isr-tx", "linger.ms": 5})
            p.init_transactions(60)
            with RawClient(cluster.bootstrap.split(",")[0]) as rc:
                fc = rc.request(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="min-isr-tx", key_type=1))
            assert fc.error_code == 0
            coordinator = fc.node_id
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            for f in admin.create_topics([NewTopic("min-isr", num_partitions=1, replica_assignment=[[coordinator]])],
                                         operation_timeout=30).values():
                f.result(60)
            others = [n for n in (1, 2, 3) if n != coordinator]
            for n in others:
                cluster.brokers[n].kill()
            boot = cluster.bootstrap_of(coordinator)
            wait_until(lambda: set(partition_meta(cluster, "__transaction_state", 0, (coordinator,)).isrs)
                       == {coordinator}, 60, "the transaction log's ISR to shrink to its leader")
            log_end = hw(boot, "__transaction_state", 0)
            p.begin_transaction()
            for i in range(4):
                p.produce("min-isr", value=b"v-%d" % i, partition=0)
            p.poll(0)
            failed = "writing the state of transactional id min-isr-tx failed"
            wait_until(lambda: cluster.brokers[coordinator].read_log().count(failed) >= 3, 60,
                       "AddPartitionsToTxn to be refused three times")
            assert hw(boot, "__transaction_state", 0) == log_end  # nothing of the refused writes is in the log
            for n in others:
                cluster.brokers[n].start()
            p.commit_transaction(120)
            assert read_committed(cluster.bootstrap, "min-isr", 1, 4) == [b"v-%d" % i for i in range(4)]
        finally:
            for n, b in cluster.brokers.items():  # shown by pytest when the test failed
                print(f"==== broker {n} log (tail)\n" + "\n".join(b.read_log().splitlines()[-40:]))
