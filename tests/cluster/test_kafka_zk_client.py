"""KafkaZkClient against a real ZooKeeper server: Kafka's znodes, sessions, elections and compare-and-set."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from strom.common.structs import TopicPartition
from strom.server.zk import (
    BrokerIdAlreadyRegisteredError,
    BrokerRegistration,
    ControllerMovedError,
    EndPoint,
    KafkaZkClient,
    LeaderAndIsr,
    ZkNodeExistsError,
    ZkSessionState,
    ZkVersion,
    ZkVersionConflictError,
    ZooKeeperClientTimeoutError,
)
from strom.testing.broker_process import free_port
from strom.testing.zookeeper import ZooKeeperServer, expire_session

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


def _broker(broker_id: int, port: int = 9092, rack: str | None = None) -> BrokerRegistration:
    return BrokerRegistration(broker_id, (EndPoint("127.0.0.1", port + broker_id),), rack=rack)


def _until(condition: Callable[[], bool], timeout_s: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def clients(zk_connect: str) -> Iterator[Callable[..., KafkaZkClient]]:
    """Make clients of one chroot; all closed at the end."""
    made: list[KafkaZkClient] = []

    def make(session_timeout_ms: int = 6000) -> KafkaZkClient:
        c = KafkaZkClient.connect(zk_connect, session_timeout_ms=session_timeout_ms, connection_timeout_ms=15000)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def _raw(zookeeper: ZooKeeperServer) -> KazooClient:
    raw = KazooClient(hosts=zookeeper.connect_string, timeout=6.0)
    raw.start(timeout=20)
    return raw


def test_connect_creates_the_chroot_and_kafka_layout_lives_under_it(zookeeper: ZooKeeperServer,
                                                                    zk_connect: str) -> None:
    chroot = zk_connect[zk_connect.index("/"):] + "/kafka"
    client = KafkaZkClient.connect(zk_connect + "/kafka", session_timeout_ms=6000)
    raw = _raw(zookeeper)
    try:
        assert raw.exists(chroot) is not None
        client.create_top_level_paths()
        client.register_broker(BrokerRegistration(3, (EndPoint("127.0.0.1", 9095),
                                                      EndPoint("10.0.0.1", 9096, "REPLICATION", "SSL")), rack="r1"))
        # What a Kafka tool reading the raw znode sees: Kafka's BrokerIdZNode v5 JSON.
        data, stat = raw.get(f"{chroot}/brokers/ids/3")
        js = json.loads(data)
        assert js["version"] == 5 and js["host"] == "127.0.0.1" and js["port"] == 9095
        assert js["endpoints"] == ["PLAINTEXT://127.0.0.1:9095", "REPLICATION://10.0.0.1:9096"]
        assert js["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "REPLICATION": "SSL"}
        assert js["rack"] == "r1" and js["jmx_port"] == -1 and js["features"] == {}
        assert stat.ephemeralOwner == client.session_id
        for path in ("/brokers/topics", "/config/changes", "/config/topics", "/admin/delete_topics",
                     "/isr_change_notification", "/latest_producer_id_block"):
            assert raw.exists(chroot + path) is not None, path
        assert raw.exists("/brokers") is None  # nothing leaked outside the chroot
    finally:
        client.close()
        raw.stop()
        raw.close()


def test_broker_registration_and_a_duplicate_id_is_refused(clients: Callable[..., KafkaZkClient]) -> None:
    a, b = clients(), clients()
    epoch1 = a.register_broker(_broker(1, rack="rack-a"))
    b.register_broker(_broker(2))
    assert a.get_all_broker_ids() == [1, 2]
    got = b.get_broker(1)
    assert got is not None
    assert (got.endpoints, got.rack, got.broker_epoch) == (_broker(1).endpoints, "rack-a", epoch1)
    assert [x.broker_id for x in a.get_all_brokers()] == [1, 2]
    with pytest.raises(BrokerIdAlreadyRegisteredError, match=r"^Broker id 1 is already registered"):
        b.register_broker(_broker(1))
    assert a.register_broker(_broker(1, rack="rack-a")) == epoch1  # our own znode: idempotent
    assert a.get_broker(99) is None


def test_ephemeral_registration_vanishes_when_the_broker_process_is_killed(
        zk_connect: str, clients: Callable[..., KafkaZkClient]) -> None:
    script = (
        "import sys, time\n"
        "from strom.server.zk import KafkaZkClient, BrokerRegistration, EndPoint\n"
        "c = KafkaZkClient.connect(sys.argv[1], session_timeout_ms=1000)\n"
        "c.register_broker(BrokerRegistration(7, (EndPoint('127.0.0.1', 9999),)))\n"
        "print('registered', flush=True)\n"
        "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, zk_connect], stdout=subprocess.PIPE, text=True)
    watcher = clients()
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "registered"
        assert watcher.get_all_broker_ids() == [7]
        dead = watcher.get_broker(7)
        assert dead is not None
        with pytest.raises(BrokerIdAlreadyRegisteredError):
            watcher.register_broker(_broker(7))
        os.kill(proc.pid, signal.SIGKILL)  # no clean close: only the session expiry removes the znode
        proc.wait(10)
        _until(lambda: watcher.get_all_broker_ids() == [], what="the dead broker's znode to expire")
        # a broker restarting under the same id gets a new znode, hence a new broker epoch
        epoch = watcher.register_broker(_broker(7), wait_for_stale_ms=20000)
        assert epoch > dead.broker_epoch
        assert watcher.kazoo.exists("/brokers/ids/7").ephemeralOwner == watcher.session_id
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()


def test_register_waits_for_a_stale_registration_and_watches_see_joins_and_leaves(
        clients: Callable[..., KafkaZkClient]) -> None:
    old, new, observer = clients(), clients(), clients()
    seen: list[list[str]] = []
    observer.watch_children("/brokers/ids", seen.append)
    old.register_broker(_broker(4))
    _until(lambda: ["4"] in seen, what="the join")
    result: list[int] = []
    waiter = threading.Thread(target=lambda: result.append(new.register_broker(_broker(4), wait_for_stale_ms=20000)))
    waiter.start()
    old.close()  # a clean shutdown ends the session: the znode goes at once and the waiter takes the id
    waiter.join(30)
    assert len(result) == 1
    reg = observer.get_broker(4)
    assert reg is not None and reg.broker_epoch == result[0]
    assert seen[0] == [] and ["4"] in seen


def test_session_expiry_runs_the_reinit_handler_which_registers_again(
        clients: Callable[..., KafkaZkClient]) -> None:
    client, observer = clients(), clients()
    first_epoch = client.register_broker(_broker(5))
    states: list[str] = []
    client.add_session_state_listener(states.append)
    epochs: list[int] = []
    client.register_state_change_handler("broker-info", lambda: epochs.append(client.register_broker(_broker(5))))
    old_session = client.session_id
    expire_session(client.kazoo)
    _until(lambda: bool(epochs), what="re-registration after the expiry")
    assert client.session_id != old_session
    assert epochs[0] > first_epoch  # a new znode, hence a new broker epoch (czxid)
    assert ZkSessionState.LOST in states and states[-1] == ZkSessionState.CONNECTED
    reg = observer.get_broker(5)
    assert reg is not None and reg.broker_epoch == epochs[0]


def test_controller_election_one_winner_and_the_epoch_bumps_each_time(
        clients: Callable[..., KafkaZkClient]) -> None:
    a, b = clients(), clients()
    assert a.get_controller_id() is None and a.get_controller_epoch() is None
    changes: list[bytes | None] = []
    b.watch_data("/controller", lambda data, version: changes.append(data))
    assert a.register_controller(1) == 1
    assert b.register_controller(2) is None
    assert b.get_controller_id() == 1
    assert a.register_controller(1) == 1  # already controller: Kafka's checkControllerAndEpoch, no second bump
    assert b.get_controller_epoch() == (1, 1)
    a.close()  # the controller's session ends: /controller goes
    _until(lambda: b.get_controller_id() is None, what="/controller to vanish")
    assert b.register_controller_and_increment_controller_epoch(2) == (2, 2)
    assert b.get_controller_id() == 2
    _until(lambda: len(changes) >= 3, what="controller data watch")
    assert changes[0] is None and json.loads(changes[1] or b"")["brokerid"] == 1

    # A race of five would-be controllers: exactly one wins, with the next epoch.
    b.delete_controller()
    racers = [clients() for _ in range(5)]
    results: dict[int, int | None] = {}
    start = threading.Barrier(len(racers))

    def run(i: int, c: KafkaZkClient) -> None:
        start.wait()
        results[i] = c.register_controller(10 + i)

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    winners = {i: e for i, e in results.items() if e is not None}
    assert len(results) == 5 and list(winners.values()) == [3]
    assert b.get_controller_id() == 10 + next(iter(winners))


def test_partition_state_compare_and_set(clients: Callable[..., KafkaZkClient]) -> None:
    a, b = clients(), clients()
    tp = TopicPartition("orders", 0)
    a.create_topic_assignment("orders", uuid.uuid4(), {0: [1, 2, 3]})
    assert a.create_partition_state(tp, LeaderAndIsr(1, 0, (1, 2, 3), controller_epoch=1)) == 0
    with pytest.raises(ZkNodeExistsError):
        b.create_partition_state(tp, LeaderAndIsr(2, 0, (2,), controller_epoch=1))
    seen_by_a = a.get_partition_state(tp)
    seen_by_b = b.get_partition_state(tp)
    assert seen_by_a == seen_by_b == LeaderAndIsr(1, 0, (1, 2, 3), 1, zk_version=0)
    assert seen_by_a is not None and seen_by_b is not None
    ok, version = a.update_leader_and_isr(tp, seen_by_a.new_isr([1, 2]), seen_by_a.zk_version)
    assert (ok, version) == (True, 1)
    # b writes from a stale read: refused, a's write stands
    assert b.update_leader_and_isr(tp, seen_by_b.new_leader_and_isr(2, [2, 3]), seen_by_b.zk_version) == \
        (False, ZkVersion.UNKNOWN_VERSION)
    assert b.get_partition_state(tp) == LeaderAndIsr(1, 0, (1, 2), 1, zk_version=1)
    assert b.get_partition_states([tp, TopicPartition("orders", 9)]) == {tp: LeaderAndIsr(1, 0, (1, 2), 1, 1)}
    assert b.get_topic_partitions("orders") == [0]


def test_controller_epoch_fencing_rejects_a_deposed_controllers_writes(
        clients: Callable[..., KafkaZkClient]) -> None:
    old, new = clients(), clients()
    assert old.register_controller(1) == 1
    old_epoch = old.get_controller_epoch()
    assert old_epoch is not None
    tp = TopicPartition("fenced", 0)
    old.create_topic_assignment("fenced", None, {0: [1, 2]}, expected_controller_epoch_zk_version=old_epoch[1])
    old.create_partition_state(tp, LeaderAndIsr(1, 0, (1, 2), 1), expected_controller_epoch_zk_version=old_epoch[1])
    old.close()
    _until(lambda: new.get_controller_id() is None, what="the old controller's znode to go")
    assert new.register_controller(2) == 2
    state = new.get_partition_state(tp)
    assert state is not None
    zombie = clients()  # the deposed controller, still acting on its old epoch's zkVersion
    with pytest.raises(ControllerMovedError):
        zombie.update_leader_and_isr(tp, state.new_leader_and_isr(1, [1]), state.zk_version,
                                     expected_controller_epoch_zk_version=old_epoch[1])
    with pytest.raises(ControllerMovedError):
        zombie.create_topic_assignment("other", None, {0: [1]}, expected_controller_epoch_zk_version=old_epoch[1])
    assert new.get_partition_state(tp) == state and not new.topic_exists("other")
    current = new.get_controller_epoch()
    assert current is not None
    assert new.update_leader_and_isr(tp, state.new_leader_and_isr(2, [2]).with_controller_epoch(2),
                                     state.zk_version, expected_controller_epoch_zk_version=current[1])[0]


def test_topic_assignment_create_get_set_and_kafka_json(zookeeper: ZooKeeperServer, zk_connect: str,
                                                        clients: Callable[..., KafkaZkClient]) -> None:
    c = clients()
    topic_id = uuid.uuid4()
    c.create_topic_assignment("sanguo", topic_id, {0: [1, 0, 2], 1: [0, 2, 1]})
    with pytest.raises(ZkNodeExistsError, match="Topic 'sanguo' already exists"):
        c.create_topic_assignment("sanguo", uuid.uuid4(), {0: [1]})
    got = c.get_topic_assignment("sanguo")
    assert got is not None and got.topic_id == topic_id and got.zk_version == 0
    assert got.replicas(0) == (1, 0, 2) and got.replicas(1) == (0, 2, 1)
    new_version = c.set_topic_assignment("sanguo", topic_id, {0: [1, 0, 2], 1: [0, 2, 1], 2: [2, 1, 0]}, 0)
    assert new_version == 1
    with pytest.raises(ZkVersionConflictError):
        c.set_topic_assignment("sanguo", topic_id, {0: [1]}, expected_version=0)
    assert c.get_all_topics() == ["sanguo"]
    assert c.get_topic_assignments(["sanguo", "absent"]) == {"sanguo": c.get_topic_assignment("sanguo")}
    raw = _raw(zookeeper)
    try:
        js = json.loads(raw.get(zk_connect[zk_connect.index("/"):] + "/brokers/topics/sanguo")[0])
    finally:
        raw.stop()
        raw.close()
    assert js == {"version": 3, "partitions": {"0": [1, 0, 2], "1": [0, 2, 1], "2": [2, 1, 0]},
                  "adding_replicas": {}, "removing_replicas": {}, "topic_id": js["topic_id"]}
    assert len(js["topic_id"]) == 22  # Kafka's Uuid.toString: base64url without padding

    c.create_delete_topic_path("sanguo")
    assert c.get_topic_deletions() == ["sanguo"] and c.is_topic_marked_for_deletion("sanguo")
    c.create_partition_state(TopicPartition("sanguo", 0), LeaderAndIsr(1, 0, (1, 0, 2), 1))
    c.delete_topic_znode("sanguo")
    c.delete_topic_deletions(["sanguo"])
    assert c.get_all_topics() == [] and c.get_topic_deletions() == []


def test_topic_config_and_change_notification(clients: Callable[..., KafkaZkClient]) -> None:
    c = clients()
    notified: list[list[str]] = []
    c.watch_children("/config/changes", notified.append)
    assert c.get_topic_config("t") == {}
    c.set_topic_config("t", {"retention.ms": "1000", "min.insync.replicas": "2"})
    assert c.get_topic_config("t") == {"retention.ms": "1000", "min.insync.replicas": "2"}
    changes = c.get_children("/config/changes")
    assert changes == ["config_change_0000000000"]
    data, _ = c.get_data_and_version("/config/changes/" + changes[0])
    assert json.loads(data or b"") == {"version": 2, "entity_path": "topics/t"}
    _until(lambda: ["config_change_0000000000"] in notified, what="the config change watch")
    c.set_or_create_entity_configs("brokers", "<default>", {"log.retention.ms": "5"})
    assert c.get_entity_configs("brokers", "<default>") == {"log.retention.ms": "5"}
    assert c.get_all_entities_with_config("topics") == ["t"]


def test_cluster_id_is_created_once(clients: Callable[..., KafkaZkClient]) -> None:
    a, b = clients(), clients()
    assert a.get_cluster_id() is None
    cid = a.get_or_create_cluster_id()
    assert len(cid) == 22
    assert b.get_or_create_cluster_id("some-other-id") == cid


def test_producer_id_blocks_from_concurrent_brokers_never_overlap(clients: Callable[..., KafkaZkClient]) -> None:
    brokers = [clients() for _ in range(3)]
    blocks = []
    lock = threading.Lock()

    def allocate(broker_id: int, c: KafkaZkClient) -> None:
        for _ in range(15):
            block = c.allocate_producer_id_block(broker_id, size=10)
            with lock:
                blocks.append(block)

    threads = [threading.Thread(target=allocate, args=(i, c)) for i, c in enumerate(brokers)
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(blocks) == 90
    blocks.sort(key=lambda b: b.first_producer_id)
    # contiguous, no gaps, no overlaps: block i covers [10 i, 10 i + 9]
    assert [(b.first_producer_id, b.last_producer_id) for b in blocks] == [(10 * i, 10 * i + 9) for i in range(90)]


def test_unreachable_zookeeper_times_out_with_a_clear_error() -> None:
    port = free_port()  # nothing listens there
    start = time.monotonic()
    with pytest.raises(ZooKeeperClientTimeoutError) as info:
        KafkaZkClient.connect(f"127.0.0.1:{port}/kafka", session_timeout_ms=6000, connection_timeout_ms=1500)
    elapsed = time.monotonic() - start
    assert str(info.value) == f"Timed out waiting for connection to zookeeper at 127.0.0.1:{port}/kafka after 1500 ms"
    # It waited for the connection timeout, and gave up soon after it (the bound is generous: a hang guard).
    assert 1.4 <= elapsed < 10


@pytest.mark.timeout(240)
def test_requests_wait_for_a_restarted_zookeeper() -> None:
    # The session survives only if the client reconnects within the session timeout of the server's restart
    # (ZooKeeper restores sessions from its log and starts their clocks at startup). A connection made while the
    # new server is still starting may be accepted and never answered (seen: one in eight runs on a loaded
    # machine), and the client then waits a whole connect timeout before the next try: the session timeout
    # divided by the number of hosts in the connect string, as in ZooKeeper's Java client. With one host that
    # is the session timeout itself, and the session expired just before the retry. The server is listed twice,
    # so a hung attempt costs half the session timeout and the retry comes with 45 s to spare.
    with ZooKeeperServer(extra_config={"maxSessionTimeout": "90000"}) as server:
        hosts = f"{server.connect_string},{server.connect_string}"
        client = KafkaZkClient.connect(hosts + "/kafka", session_timeout_ms=90000, connection_timeout_ms=150_000)
        try:
            client.register_broker(_broker(1))
            server.kill()
            result: list[list[int]] = []
            reader = threading.Thread(target=lambda: result.append(client.get_all_broker_ids()))
            reader.start()
            assert reader.is_alive()  # no ZooKeeper: the request can neither answer nor fail yet
            server.start()
            reader.join(150)
            # The session outlived the outage (ZooKeeper restores sessions from its log), so the ephemeral
            # registration is still there.
            assert result == [[1]]
        finally:
            client.close()


def test_bulk_partition_state_create_and_update(clients: Callable[..., KafkaZkClient]) -> None:
    controller, other = clients(), clients()
    assert controller.register_controller(0) == 1
    epoch = controller.get_controller_epoch()
    assert epoch is not None
    tps = [TopicPartition("bulk", p) for p in range(40)]
    created = controller.create_partition_states({tp: LeaderAndIsr(p % 3, 0, (p % 3, (p + 1) % 3), 1)
                                                  for p, tp in enumerate(tps)}, epoch[1])
    assert created == {tp: None for tp in tps}
    again = controller.create_partition_states({tps[0]: LeaderAndIsr(0, 0, (0,), 1)}, epoch[1])
    assert isinstance(again[tps[0]], ZkNodeExistsError)
    states = other.get_partition_states(tps)
    assert len(states) == 40 and all(s.zk_version == 0 for s in states.values())
    # another writer gets to partition 5 first: that one must come back for a retry, the rest are written
    assert other.update_leader_and_isr(tps[5], states[tps[5]].new_isr([2]), 0) == (True, 1)
    updated = controller.update_leader_and_isrs({tp: s.new_leader_and_isr(s.isr[-1], s.isr[-1:])
                                                 for tp, s in states.items()}, epoch[1])
    assert updated[tps[5]] is None
    assert all(updated[tp] is not None and updated[tp].zk_version == 1 for tp in tps if tp != tps[5])  # type: ignore[union-attr]
    now = other.get_partition_states(tps)
    for tp in tps:
        if tp != tps[5]:
            assert now[tp] == updated[tp]
            assert now[tp].leader_epoch == 1
    assert now[tps[5]].isr == (2,) and now[tps[5]].leader_epoch == 0
    # a deposed controller's bulk write is refused whole
    with pytest.raises(ControllerMovedError):
        controller.update_leader_and_isrs({tps[0]: now[tps[0]].new_isr([0])}, epoch[1] - 1)
    assert other.get_partition_state(tps[0]) == now[tps[0]]


def test_a_paused_zookeeper_delays_requests_until_it_resumes() -> None:
    with ZooKeeperServer(extra_config={"maxSessionTimeout": "60000"}) as server:
        client = KafkaZkClient.connect(server.connect_string, session_timeout_ms=60000, connection_timeout_ms=60000)
        try:
            client.register_broker(_broker(2))
            server.pause()
            done = threading.Event()
            result: list[int] = []

            def create() -> None:
                result.append(client.create_topic_assignment("during-pause", None, {0: [2]}))
                done.set()

            writer = threading.Thread(target=create)
            writer.start()
            assert not done.wait(1.0)  # a frozen ZooKeeper answers nothing
            server.resume()
            assert done.wait(60)
            writer.join(10)
            assert result == [0] and client.get_topic_assignment("during-pause") is not None
            assert client.get_all_broker_ids() == [2]  # the session outlived the pause
        finally:
            client.close()
