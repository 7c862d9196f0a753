"""The cluster controller (ZooKeeper mode): one broker at a time wins ``/controller`` and decides leadership.

Kafka counterpart: ``KafkaController`` with its ``ControllerContext``, partition and replica state machines,
``ControllerChannelManager`` and ``TopicDeletionManager``, reduced to what a 3.x ZooKeeper-mode cluster does:

* election: every broker races for the ephemeral ``/controller``; the winner bumps ``/controller_epoch`` with a
  compare-and-set and every later ZooKeeper write it makes is fenced on that epoch's znode version;
* on failover it reads brokers, topics, assignments and partition states, elects leaders for partitions whose
  leader is gone, and sends LeaderAndIsr to every replica and UpdateMetadata to every live broker;
* broker changes (``/brokers/ids`` children): a dead broker's partitions get a new leader from the ISR (never an
  out-of-sync replica unless ``unclean.leader.election.enable``), a dead follower leaves the ISR; a returning
  broker gets LeaderAndIsr for its replicas and catches up;
* new topics and partitions (``/brokers/topics``), deletions (``/admin/delete_topics``), AlterPartition (ISR
  changes proposed by leaders), ControlledShutdown, preferred-leader elections (ElectLeaders and
  ``auto.leader.rebalance.enable``);
* failed log dirs (KIP-112): a broker that loses a log dir writes ``/log_dir_event_notification``; the controller
  sends it LeaderAndIsr for all its replicas, and every replica a broker answers KAFKA_STORAGE_ERROR for is
  offline (``replicas_on_offline_dirs``): it cannot lead, leaves the ISR, and is listed as an offline replica,
  until that broker restarts (Kafka's ``onBrokerLogDirFailure`` and ``LeaderAndIsrResponseReceived``).

Events are processed one at a time by one task on the broker's event loop (Kafka's ControllerEventManager);
ZooKeeper watches fire on kazoo's thread and are queued with ``call_soon_threadsafe``; blocking ZooKeeper calls run
in a worker thread. Requests to brokers go through one in-order queue per broker.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from strom.common.error_codes import ErrorCode
from strom.common.errors import KafkaConnectionError
from strom.common.structs import TopicPartition
from strom.common.time import Time
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages.leader_and_isr import LeaderAndIsrRequest
from strom.protocol.messages.stop_replica import StopReplicaRequest
from strom.protocol.messages.update_metadata import UpdateMetadataRequest
from strom.server.broker_channel import BrokerChannel
from strom.server.security.inter_broker import InterBrokerSecurity
from strom.server.zk.kafka_zk_client import KafkaZkClient
from strom.server.zk.znodes import (
    BrokerRegistration,
    ConfigEntityZNode,
    ConfigType,
    LeaderAndIsr,
    LogDirEventNotificationZNode,
)

__all__ = ["KafkaController", "ElectionResult"]

log = logging.getLogger("strom.controller")

LEADER_AND_ISR_VERSION = 5
UPDATE_METADATA_VERSION = 7
STOP_REPLICA_VERSION = 3
_SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
NO_LEADER = -1


@dataclass(slots=True)
class ElectionResult:
    error_code: int
    message: str | None = None


@dataclass(slots=True)
class ControllerContext:
    """What the active controller knows (Kafka's ``ControllerContext``)."""

    epoch: int = 0
    epoch_zk_version: int = 0
    live_brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    assignments: dict[TopicPartition, list[int]] = field(default_factory=dict)
    states: dict[TopicPartition, LeaderAndIsr] = field(default_factory=dict)
    topics_being_deleted: set[str] = field(default_factory=set)
    # partition -> (target replicas, original replicas) while a reassignment runs (KIP-455)
    reassignments: dict[TopicPartition, tuple[list[int], list[int]]] = field(default_factory=dict)
    # broker -> its replicas in a failed log dir (KIP-112), as its LeaderAndIsr responses said
    replicas_on_offline_dirs: dict[int, set[TopicPartition]] = field(default_factory=dict)

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return sorted(tp for tp in self.assignments if tp.topic == topic)

    def alive(self, broker_id: int) -> bool:
        return broker_id in self.live_brokers

    def replica_online(self, broker_id: int, tp: TopicPartition) -> bool:
        """The broker is alive and ``tp``'s replica on it is not in a failed log dir (Kafka's
        ``isReplicaOnline``)."""
        return broker_id in self.live_brokers and tp not in self.replicas_on_offline_dirs.get(broker_id, ())


class KafkaController:
    def __init__(self, broker_id: int, zk: KafkaZkClient, time: Time, *, inter_broker_listener: str,
                 unclean_leader_election: bool = False, auto_leader_rebalance: bool = True,
                 imbalance_check_interval_s: int = 300, imbalance_percentage: int = 10,
                 socket_timeout_ms: int = 30_000, security: InterBrokerSecurity | None = None) -> None:
        self.broker_id = broker_id
        self.security = security
        self.zk = zk
        self.time = time
        self.listener = inter_broker_listener
        self.unclean = unclean_leader_election
        self.auto_rebalance = auto_leader_rebalance
        self.imbalance_check_interval_s = imbalance_check_interval_s
        self.imbalance_percentage = imbalance_percentage
        self.socket_timeout_s = socket_timeout_ms / 1000
        self.ctx = ControllerContext()
        self.active = False
        self.active_controller_id = -1
        self.on_controller_change: Callable[[int], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: asyncio.Queue[tuple[str, Any, asyncio.Future[Any] | None]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._rebalance_task: asyncio.Task[None] | None = None
        self._senders: dict[int, _BrokerSender] = {}
        self._watches: list[Any] = []
        self._partition_watches: dict[str, Any] = {}

    # -- lifecycle --------------------------------------------------------------------------------------------
    async def startup(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self._run())
        # /controller changes: elect when it is gone, resign when someone else holds it.
        self._watches.append(self.zk.watch_data("/controller", lambda data, version: self._enqueue("controller_change")))

    async def shutdown(self) -> None:
        if self.active:
            # What this controller decided last (e.g. the leadership moves of a controlled shutdown) must reach
            # the other brokers before it goes.
            await asyncio.gather(*(s.flush(5.0) for b, s in self._senders.items() if b != self.broker_id))
        for w in self._watches:
            w.cancel()
        self._watches.clear()
        for w in self._partition_watches.values():
            w.cancel()
        self._partition_watches.clear()
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        for s in self._senders.values():
            s.close()
        self._senders.clear()
        if self.active:
            self.active = False
            try:
                await self._zk(self.zk.delete_controller, self.ctx.epoch_zk_version)
            except Exception as e:
                log.info("could not delete /controller on shutdown: %s", e)

    def _enqueue(self, kind: str, payload: Any = None) -> None:
        """From any thread: queue an event for the controller task."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(self._events.put_nowait, (kind, payload, None))

    async def call(self, kind: str, payload: Any = None) -> Any:
        """From the event loop: run an event and wait for its result (API requests handled by the controller)."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._events.put((kind, payload, fut))
        return await fut

    async def _zk(self, fn: Callable[..., Any], *args: Any) -> Any:
        assert self._loop is not None
        return await self._loop.run_in_executor(None, fn, *args)

    async def _run(self) -> None:
        while True:
            kind, payload, fut = await self._events.get()
            try:
                result = await getattr(self, f"_on_{kind}")(payload)
                if fut is not None and not fut.done():
                    fut.set_result(result)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.exception("controller event %s failed", kind)
                if fut is not None and not fut.done():
                    fut.set_exception(e)

    # -- election ---------------------------------------------------------------------------------------------
    async def _on_controller_change(self, _payload: Any) -> None:
        current = await self._zk(self.zk.get_controller_id)
        if current is None:
            if self.active:
                self._resign()
            await self._elect()
            return
        self._set_active_id(current)
        if self.active and current != self.broker_id:
            self._resign()

    async def _on_reelect(self, _payload: Any) -> None:
        """After a new ZooKeeper session: this broker's /controller (if any) is gone with the old session."""
        if self.active:
            self._resign()
        await self._elect()

    def _set_active_id(self, controller_id: int) -> None:
        if controller_id != self.active_controller_id:
            self.active_controller_id = controller_id
            if self.on_controller_change is not None:
                self.on_controller_change(controller_id)

    async def _elect(self) -> None:
        result = await self._zk(self.zk.register_controller_and_increment_controller_epoch, self.broker_id)
        if result is None:
            current = await self._zk(self.zk.get_controller_id)
            self._set_active_id(current if current is not None else -1)
            return
        self.ctx = ControllerContext(epoch=result[0], epoch_zk_version=result[1])
        self.active = True
        self._set_active_id(self.broker_id)
        log.info("broker %d is the controller at epoch %d", self.broker_id, self.ctx.epoch)
        await self._on_failover()

    def _resign(self) -> None:
        log.info("broker %d resigns as controller (epoch %d)", self.broker_id, self.ctx.epoch)
        self.active = False
        for w in self._watches[1:]:
            w.cancel()
        del self._watches[1:]
        for w in self._partition_watches.values():
            w.cancel()
        self._partition_watches.clear()
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
            self._rebalance_task = None
        for s in self._senders.values():
            s.close()
        self._senders.clear()

    async def _on_failover(self) -> None:
        brokers = await self._zk(self.zk.get_all_brokers)
        self.ctx.live_brokers = {b.broker_id: b for b in brokers}
        for b in brokers:
            self._sender(b)
        for topic in await self._zk(self.zk.get_all_topics):
            await self._load_topic(topic)
        self.ctx.topics_being_deleted = set(await self._zk(self.zk.get_topic_deletions))
        # Partitions with no state yet (a topic created while no controller ran), or whose leader is gone.
        await self._initialize_new_partitions([tp for tp in self.ctx.assignments if tp not in self.ctx.states])
        await self._elect_offline_partitions()
        self._send_update_metadata(list(self.ctx.live_brokers), list(self.ctx.assignments))
        self._send_leader_and_isr_for(list(self.ctx.assignments))
        loop = asyncio.get_running_loop()
        self._watches.append(self.zk.watch_children("/brokers/ids", lambda ids: self._enqueue("broker_change")))
        self._watches.append(self.zk.watch_children("/brokers/topics", lambda t: self._enqueue("topic_change")))
        self._watches.append(self.zk.watch_children("/admin/delete_topics", lambda t: self._enqueue("topic_deletion")))
        self._watches.append(self.zk.watch_children(LogDirEventNotificationZNode.PATH,
                                                    lambda t: self._enqueue("log_dir_event")))
        for topic in {tp.topic for tp in self.ctx.assignments}:
            self._watch_topic(topic)
        if self.auto_rebalance:
            self._rebalance_task = loop.create_task(self._rebalance_loop())
        if self.ctx.topics_being_deleted:
            await self._on_topic_deletion(None)

    async def _load_topic(self, topic: str) -> list[TopicPartition]:
        assignment = await self._zk(self.zk.get_topic_assignment, topic)
        if assignment is None:
            return []
        if assignment.topic_id is not None:
            self.ctx.topic_ids[topic] = assignment.topic_id
        tps = []
        for p, ra in assignment.partitions.items():
            tp = TopicPartition(topic, p)
            self.ctx.assignments[tp] = list(ra.replicas)
            if ra.adding_replicas or ra.removing_replicas:
                self.ctx.reassignments[tp] = ([r for r in ra.replicas if r not in ra.removing_replicas],
                                              [r for r in ra.replicas if r not in ra.adding_replicas])
            tps.append(tp)
        states = await self._zk(self.zk.get_partition_states, tps)
        self.ctx.states.update(states)
        return sorted(tps)

    def _watch_topic(self, topic: str) -> None:
        if topic not in self._partition_watches:
            self._partition_watches[topic] = self.zk.watch_data(
                f"/brokers/topics/{topic}", lambda data, version, topic=topic: self._enqueue("partition_change", topic))

    # -- partition state machine -------------------------------------------------------------------------------
    async def _write_state(self, tp: TopicPartition, new: LeaderAndIsr) -> bool:
        """Compare-and-set one partition state (fenced on the controller epoch); re-read on a conflict."""
        old = self.ctx.states.get(tp)
        new = LeaderAndIsr(new.leader, new.leader_epoch, tuple(new.isr), self.ctx.epoch,
                           old.zk_version if old is not None else 0)
        ok, version = await self._zk(self.zk.update_leader_and_isr, tp, new, new.zk_version,
                                     self.ctx.epoch_zk_version)
        if not ok:
            fresh = await self._zk(self.zk.get_partition_state, tp)
            if fresh is not None:
                self.ctx.states[tp] = fresh
            log.info("%s: partition state changed under the controller; re-read %s", tp, fresh)
            return False
        self.ctx.states[tp] = LeaderAndIsr(new.leader, new.leader_epoch, new.isr, new.controller_epoch, version)
        return True

    async def _write_states(self, new_states: dict[TopicPartition, LeaderAndIsr]) -> list[TopicPartition]:
        """Compare-and-set many partition states in one pipelined round; re-read the ones someone else wrote."""
        if not new_states:
            return []
        batch = {}
        for tp, new in new_states.items():
            old = self.ctx.states.get(tp)
            batch[tp] = LeaderAndIsr(new.leader, new.leader_epoch, tuple(new.isr), self.ctx.epoch,
                                     old.zk_version if old is not None else 0)
        written = await self._zk(self.zk.update_leader_and_isrs, batch, self.ctx.epoch_zk_version)
        done, stale = [], []
        for tp, st in written.items():
            if st is None:
                stale.append(tp)
            else:
                self.ctx.states[tp] = st
                done.append(tp)
        if stale:
            fresh = await self._zk(self.zk.get_partition_states, stale)
            self.ctx.states.update(fresh)
            log.info("partition states changed under the controller, re-read: %s", stale[:10])
        return done

    async def _initialize_new_partitions(self, tps: list[TopicPartition]) -> None:
        """NewPartition -> OnlinePartition: the first live replica leads, the live replicas form the ISR."""
        states = {}
        for tp in tps:
            replicas = self.ctx.assignments[tp]
            live = [r for r in replicas if self.ctx.alive(r)]
            states[tp] = LeaderAndIsr(live[0] if live else NO_LEADER, 0, tuple(live or replicas[:1]), self.ctx.epoch, 0)
        if not states:
            return
        results = await self._zk(self.zk.create_partition_states, states, self.ctx.epoch_zk_version)
        existing = [tp for tp, err in results.items() if err is not None]
        for tp, err in results.items():
            if err is None:
                self.ctx.states[tp] = states[tp]
        if existing:
            self.ctx.states.update(await self._zk(self.zk.get_partition_states, existing))

    def _select_leader(self, tp: TopicPartition, st: LeaderAndIsr, excluded: set[int],
                       unclean: bool = False) -> tuple[int, list[int]]:
        """Kafka's OfflinePartitionLeaderElectionStrategy: the first live ISR member in assignment order; with
        ``unclean``, else the first live replica."""
        replicas = self.ctx.assignments.get(tp, [])
        live_isr = [r for r in st.isr if self.ctx.replica_online(r, tp) and r not in excluded]
        for r in replicas:
            if r in live_isr:
                return r, live_isr
        if unclean:
            for r in replicas:
                if self.ctx.replica_online(r, tp) and r not in excluded:
                    log.warning("%s: unclean leader election of broker %d (data may be lost)", tp, r)
                    return r, [r]
        return NO_LEADER, list(st.isr)

    async def _elect_offline_partitions(self, excluded: set[int] | None = None) -> list[TopicPartition]:
        ex = excluded or set()
        proposed: dict[TopicPartition, LeaderAndIsr] = {}
        unclean_cache: dict[str, bool] = {}
        for tp, st in list(self.ctx.states.items()):
            if tp.topic in self.ctx.topics_being_deleted:
                continue
            if st.leader != NO_LEADER and self.ctx.replica_online(st.leader, tp) and st.leader not in ex:
                continue
            leader, isr = self._select_leader(tp, st, ex)
            if leader == NO_LEADER and await self._unclean_allowed(tp.topic, unclean_cache):
                leader, isr = self._select_leader(tp, st, ex, unclean=True)
            if leader == NO_LEADER and st.leader == NO_LEADER:
                continue  # still offline
            proposed[tp] = st.new_leader_and_isr(leader, isr)
        changed = await self._write_states(proposed)
        for tp in changed:
            st = self.ctx.states[tp]
            log.info("%s: leader -> %d (epoch %d), ISR %s", tp, st.leader, st.leader_epoch, list(st.isr))
        return changed

    async def _unclean_allowed(self, topic: str, cache: dict[str, bool]) -> bool:
        """``unclean.leader.election.enable`` of ``topic``: its override in ZooKeeper, else the broker's (which
        may be a dynamic broker config); read when a partition has no live ISR member, as Kafka's controller
        does."""
        if topic not in cache:
            try:
                override = (await self._zk(self.zk.get_topic_config, topic)).get("unclean.leader.election.enable")
            except Exception as e:
                log.warning("cannot read the config of topic %s: %s", topic, e)
                override = None
            cache[topic] = self.unclean if override is None else override.strip().lower() == "true"
        return cache[topic]

    def set_unclean_leader_election(self, enabled: bool) -> None:
        """The broker default changed (a dynamic broker config): once enabled, partitions without a live ISR
        member are elected again (Kafka's ``UncleanLeaderElectionEnable`` event)."""
        self.unclean = enabled
        if enabled:
            self._enqueue("unclean_leader_election_enabled")

    def topic_unclean_leader_election_enabled(self, topic: str) -> None:
        """A topic's ``unclean.leader.election.enable`` override was set to true: its offline partitions are
        elected again (Kafka's ``enableTopicUncleanLeaderElection``)."""
        self._enqueue("unclean_leader_election_enabled", topic)

    async def _on_unclean_leader_election_enabled(self, _payload: Any) -> None:
        if not self.active:
            return
        changed = await self._elect_offline_partitions()
        if changed:
            self._send_update_metadata(list(self.ctx.live_brokers), changed)
            self._send_leader_and_isr_for(changed)

    async def _shrink_isr(self, dead: set[int]) -> list[TopicPartition]:
        """Followers that died leave the ISR (a new leader epoch, as Kafka's controller writes it)."""
        proposed = {}
        for tp, st in list(self.ctx.states.items()):
            if st.leader in dead or st.leader == NO_LEADER or not (set(st.isr) & dead):
                continue
            proposed[tp] = st.new_leader_and_isr(st.leader, [r for r in st.isr if r not in dead])
        return await self._write_states(proposed)

    # -- events -----------------------------------------------------------------------------------------------
    async def _on_broker_change(self, _payload: Any) -> None:
        if not self.active:
            return
        brokers = {b.broker_id: b for b in await self._zk(self.zk.get_all_brokers)}
        old = self.ctx.live_brokers
        new_ids = {b for b in brokers if b not in old or brokers[b].broker_epoch != old[b].broker_epoch}
        dead = {b for b in old if b not in brokers}
        bounced = {b for b in new_ids if b in old}
        self.ctx.live_brokers = brokers
        self.ctx.shutting_down -= (dead | new_ids)
        for b in dead | new_ids:  # a restarted broker tells its offline replicas again, in its LeaderAndIsr answers
            self.ctx.replicas_on_offline_dirs.pop(b, None)
        for b in dead | bounced:
            s = self._senders.pop(b, None)
            if s is not None:
                s.close()
        for b in new_ids:
            self._sender(brokers[b])
        if dead:
            log.info("brokers %s failed", sorted(dead))
        if new_ids:
            log.info("brokers %s started", sorted(new_ids))
        # A broker that bounced between two watch events is treated as failed, then started (as Kafka does).
        changed = await self._elect_offline_partitions(excluded=bounced)
        changed += await self._shrink_isr(dead | bounced)
        changed += await self._elect_offline_partitions()  # a bounced sole ISR member leads again
        # The whole cluster learns the new brokers and leaders; a started broker gets all its replicas.
        self._send_update_metadata(list(brokers), list(self.ctx.assignments))
        if changed:
            self._send_leader_and_isr_for(changed)
        for b in new_ids:
            self._send_leader_and_isr_for([tp for tp, r in self.ctx.assignments.items() if b in r], only_to={b})
        # A started broker also takes part in deletions that waited for it.
        if self.ctx.topics_being_deleted:
            await self._on_topic_deletion(None)

    async def _on_log_dir_event(self, _payload: Any) -> None:
        """Brokers that lost a log dir (``/log_dir_event_notification``): each gets LeaderAndIsr for all its
        replicas, and its answers say which are offline (Kafka's ``processLogDirEventNotification``)."""
        if not self.active:
            return
        brokers = await self._zk(self.zk.get_and_delete_log_dir_event_notifications)
        for b in sorted(set(brokers)):
            if self.ctx.alive(b):
                log.info("broker %d reported a failed log dir: asking it about each of its replicas", b)
                self._send_leader_and_isr_for([tp for tp, r in self.ctx.assignments.items() if b in r], only_to={b})

    async def _on_leader_and_isr_response(self, payload: tuple[int, int, LeaderAndIsrRequest, Any]) -> None:
        """A broker's answer to LeaderAndIsr: the replicas it answered KAFKA_STORAGE_ERROR for are in a failed log
        dir, the ones it answered NONE for are online; replicas newly offline are handled."""
        broker, broker_epoch, request, response = payload
        registration = self.ctx.live_brokers.get(broker)
        if not self.active or registration is None or registration.broker_epoch != broker_epoch \
                or response.error_code != ErrorCode.NONE:
            return
        offline, online = set(), set()
        for ts, rt in zip(request.topic_states, response.topics, strict=False):
            for pe in rt.partition_errors:
                tp = TopicPartition(ts.topic_name, pe.partition_index)
                if pe.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
                    offline.add(tp)
                elif pe.error_code == ErrorCode.NONE:
                    online.add(tp)
        previous = self.ctx.replicas_on_offline_dirs.get(broker, set())
        current = (previous - online) | offline
        if current:
            self.ctx.replicas_on_offline_dirs[broker] = current
        else:
            self.ctx.replicas_on_offline_dirs.pop(broker, None)
        newly = current - previous
        if newly:
            await self._on_replicas_offline(broker, newly)

    async def _on_replicas_offline(self, broker: int, tps: set[TopicPartition]) -> None:
        """Replicas of ``broker`` went offline (a failed log dir): partitions they led get a new leader from the
        rest of the ISR, and they leave the ISR (Kafka's ``onReplicasBecomeOffline``)."""
        log.warning("broker %d: replicas %s are in a failed log dir", broker, ", ".join(map(str, sorted(tps)[:10])))
        changed = set(await self._elect_offline_partitions())
        proposed = {}
        for tp in tps:
            st = self.ctx.states.get(tp)
            if st is not None and broker in st.isr and st.leader not in (broker, NO_LEADER):
                proposed[tp] = st.new_leader_and_isr(st.leader, [r for r in st.isr if r != broker])
        changed |= set(await self._write_states(proposed))
        for tp in sorted(changed):
            st = self.ctx.states[tp]
            log.info("%s: leader -> %d (epoch %d), ISR %s", tp, st.leader, st.leader_epoch, list(st.isr))
        if changed:
            self._send_leader_and_isr_for(sorted(changed))
        self._send_update_metadata(list(self.ctx.live_brokers), sorted(changed | tps))

    async def _on_topic_change(self, _payload: Any) -> None:
        if not self.active:
            return
        topics = set(await self._zk(self.zk.get_all_topics))
        known = {tp.topic for tp in self.ctx.assignments}
        for gone in known - topics:
            for tp in self.ctx.partitions_of(gone):
                self.ctx.assignments.pop(tp, None)
                self.ctx.states.pop(tp, None)
        new_tps: list[TopicPartition] = []
        for topic in sorted(topics - known):
            new_tps += await self._load_topic(topic)
            self._watch_topic(topic)
        if new_tps:
            await self._on_new_partitions(new_tps)

    async def _on_partition_change(self, topic: str) -> None:
        if not self.active or topic in self.ctx.topics_being_deleted:
            return
        assignment = await self._zk(self.zk.get_topic_assignment, topic)
        if assignment is None:
            return
        new_tps = []
        for p, ra in assignment.partitions.items():
            tp = TopicPartition(topic, p)
            if tp not in self.ctx.assignments:
                self.ctx.assignments[tp] = list(ra.replicas)
                new_tps.append(tp)
        if new_tps:
            await self._on_new_partitions(sorted(new_tps))

    async def _on_new_partitions(self, tps: list[TopicPartition]) -> None:
        await self._initialize_new_partitions([tp for tp in tps if tp not in self.ctx.states])
        self._send_update_metadata(list(self.ctx.live_brokers), tps)
        self._send_leader_and_isr_for(tps, new_replicas={(r, tp) for tp in tps for r in self.ctx.assignments[tp]})
        log.info("new partitions %s online", ", ".join(map(str, tps[:10])) + (" ..." if len(tps) > 10 else ""))

    async def _on_topic_deletion(self, _payload: Any) -> None:
        if not self.active:
            return
        marked = set(await self._zk(self.zk.get_topic_deletions))
        self.ctx.topics_being_deleted = marked
        done = []
        for topic in sorted(marked):
            tps = self.ctx.partitions_of(topic)
            replicas = {r for tp in tps for r in self.ctx.assignments.get(tp, [])}
            if any(not self.ctx.alive(r) for r in replicas):
                log.info("deletion of %s waits for replicas %s to come back", topic,
                         sorted(r for r in replicas if not self.ctx.alive(r)))
                continue
            acks = [self._sender_for(r).stop_replicas(self.broker_id, self.ctx.epoch, tps, delete=True)
                    for r in replicas]
            results = await asyncio.gather(*acks, return_exceptions=True)
            if any(isinstance(r, Exception) for r in results):
                log.warning("deletion of %s: some replicas did not answer StopReplica; will retry", topic)
                continue
            await self._zk(self.zk.delete_topic_znode, topic, self.ctx.epoch_zk_version)
            await self._zk(self.zk.delete_path, ConfigEntityZNode.path(ConfigType.TOPIC, topic))
            self._send_update_metadata(list(self.ctx.live_brokers), [], deleting=tps)
            for tp in tps:
                self.ctx.assignments.pop(tp, None)
                self.ctx.states.pop(tp, None)
            self.ctx.topic_ids.pop(topic, None)
            w = self._partition_watches.pop(topic, None)
            if w is not None:
                w.cancel()
            done.append(topic)
            log.info("deleted topic %s", topic)
        if done:
            await self._zk(self.zk.delete_topic_deletions, done, self.ctx.epoch_zk_version)
            self.ctx.topics_being_deleted -= set(done)

    async def _on_alter_partition(self, payload: tuple[int, list[tuple[TopicPartition, int, list[int], int]]],
                                  ) -> dict[TopicPartition, tuple[int, LeaderAndIsr | None]]:
        """A leader proposes ISRs: (broker, [(tp, leader_epoch, new_isr, partition_epoch)])."""
        broker_id, items = payload
        out: dict[TopicPartition, tuple[int, LeaderAndIsr | None]] = {}
        if not self.active:
            return {tp: (ErrorCode.NOT_CONTROLLER, None) for tp, *_ in items}
        changed = []
        for tp, leader_epoch, new_isr, partition_epoch in items:
            st = self.ctx.states.get(tp)
            if st is None or tp.topic in self.ctx.topics_being_deleted:
                out[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
            elif st.leader != broker_id or leader_epoch < st.leader_epoch:
                out[tp] = (ErrorCode.FENCED_LEADER_EPOCH, None)
            elif leader_epoch > st.leader_epoch:
                out[tp] = (ErrorCode.NOT_CONTROLLER, None)
            elif partition_epoch != st.zk_version:
                out[tp] = (ErrorCode.INVALID_UPDATE_VERSION, None)
            elif any(not self.ctx.alive(r) or r in self.ctx.shutting_down for r in new_isr if r not in st.isr):
                out[tp] = (ErrorCode.INELIGIBLE_REPLICA, None)
            elif any(r not in self.ctx.assignments.get(tp, []) for r in new_isr) or broker_id not in new_isr:
                out[tp] = (ErrorCode.INVALID_REQUEST, None)
            elif await self._write_state(tp, st.new_isr(new_isr)):
                out[tp] = (ErrorCode.NONE, self.ctx.states[tp])
                changed.append(tp)
            else:
                out[tp] = (ErrorCode.INVALID_UPDATE_VERSION, None)
        if changed:
            self._send_update_metadata(list(self.ctx.live_brokers), changed)
            for tp in changed:
                if tp in self.ctx.reassignments:
                    await self._maybe_complete_reassignment(tp)
        return out

    # -- partition reassignment (KIP-455) ------------------------------------------------------------------
    async def _on_alter_reassignments(self, payload: dict[TopicPartition, list[int] | None],
                                      ) -> dict[TopicPartition, tuple[int, str | None]]:
        """Start (target replicas) or cancel (None) reassignments; Kafka's ``onPartitionReassignment``."""
        if not self.active:
            return {tp: (ErrorCode.NOT_CONTROLLER, None) for tp in payload}
        out: dict[TopicPartition, tuple[int, str | None]] = {}
        for tp, target in payload.items():
            if tp not in self.ctx.assignments or tp.topic in self.ctx.topics_being_deleted:
                out[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                continue
            current = self.ctx.reassignments.get(tp)
            if target is None:
                if current is None:
                    out[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"No reassignment in progress for {tp}.")
                    continue
                target = current[1]  # cancel: go back to the original replicas
            if not target or len(set(target)) != len(target):
                out[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Invalid replica list {target} for {tp}.")
                continue
            unknown = [r for r in target if not self.ctx.alive(r)]
            if unknown:
                out[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"Replica(s) {unknown} of the new assignment of {tp} are not live brokers.")
                continue
            original = current[1] if current is not None else list(self.ctx.assignments[tp])
            if sorted(target) == sorted(self.ctx.assignments[tp]) and current is None:
                if target != self.ctx.assignments[tp]:
                    # A reorder: no data moves, but the preferred leader and every broker's metadata change.
                    await self._set_assignment(tp, list(target), [], [])
                    self._send_update_metadata(list(self.ctx.live_brokers), [tp])
                out[tp] = (ErrorCode.NONE, None)
                continue
            full = list(target) + [r for r in original if r not in target]
            adding = [r for r in target if r not in original]
            removing = [r for r in original if r not in target]
            await self._set_assignment(tp, full, adding, removing)
            self.ctx.reassignments[tp] = (list(target), original)
            st = self.ctx.states[tp]
            # New replicas must hear of the partition: a new leader epoch carries the full replica set.
            await self._write_states({tp: st.new_leader_and_isr(st.leader, st.isr)})
            self._send_leader_and_isr_for([tp], new_replicas={(r, tp) for r in adding})
            self._send_update_metadata(list(self.ctx.live_brokers), [tp])
            out[tp] = (ErrorCode.NONE, None)
            log.info("%s: reassigning %s -> %s (adding %s, removing %s)", tp, original, target, adding, removing)
            await self._maybe_complete_reassignment(tp)
        return out

    async def _set_assignment(self, tp: TopicPartition, replicas: list[int], adding: list[int],
                              removing: list[int]) -> None:
        from strom.server.zk.znodes import ReplicaAssignment

        current = await self._zk(self.zk.get_topic_assignment, tp.topic)
        partitions = dict(current.partitions)
        partitions[tp.partition] = ReplicaAssignment(tuple(replicas), tuple(adding), tuple(removing))
        await self._zk(self.zk.set_topic_assignment, tp.topic, current.topic_id, partitions, current.zk_version,
                       self.ctx.epoch_zk_version)
        self.ctx.assignments[tp] = list(replicas)

    async def _maybe_complete_reassignment(self, tp: TopicPartition) -> None:
        """Once every target replica is in the ISR: lead from the target set, drop the removed replicas."""
        target, original = self.ctx.reassignments[tp]
        st = self.ctx.states[tp]
        if not all(r in st.isr for r in target):
            return
        isr = [r for r in st.isr if r in target]
        leader = st.leader if st.leader in target and self.ctx.replica_online(st.leader, tp) else \
            next((r for r in target if r in isr and self.ctx.replica_online(r, tp)), NO_LEADER)
        removed = [r for r in self.ctx.assignments[tp] if r not in target]
        await self._set_assignment(tp, list(target), [], [])
        await self._write_states({tp: st.new_leader_and_isr(leader, isr)})
        del self.ctx.reassignments[tp]
        self._send_leader_and_isr_for([tp])
        for r in removed:
            if self.ctx.alive(r):
                self._sender_for(r).stop_replica_later(self.broker_id, self.ctx.epoch, [tp], delete=True)
        self._send_update_metadata(list(self.ctx.live_brokers), [tp])
        log.info("%s: reassignment complete: replicas %s, leader %d", tp, target, leader)

    async def _on_list_reassignments(self, tps: list[TopicPartition] | None,
                                     ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        out = {}
        for tp, (target, original) in self.ctx.reassignments.items():
            if tps is None or tp in tps:
                out[tp] = (list(self.ctx.assignments[tp]), [r for r in target if r not in original],
                           [r for r in original if r not in target])
        return out

    async def _on_controlled_shutdown(self, broker_id: int) -> tuple[int, list[TopicPartition]]:
        """Move leadership off ``broker_id`` and take it out of every ISR; returns partitions it still leads."""
        if not self.active:
            return ErrorCode.NOT_CONTROLLER, []
        if broker_id not in self.ctx.live_brokers:
            return ErrorCode.BROKER_NOT_AVAILABLE, []
        self.ctx.shutting_down.add(broker_id)
        moved, remaining = [], []
        for tp, st in list(self.ctx.states.items()):
            if broker_id not in self.ctx.assignments.get(tp, []):
                continue
            if st.leader == broker_id:
                others = [r for r in self.ctx.assignments[tp] if r != broker_id and self.ctx.replica_online(r, tp)
                          and r not in self.ctx.shutting_down]
                if not others:
                    continue  # no live replica to move to (a single replica, or the last broker standing)
                leader, isr = self._select_leader(tp, st, {broker_id})
                if leader == NO_LEADER or leader == broker_id:
                    remaining.append(tp)
                    continue
                if await self._write_state(tp, st.new_leader_and_isr(leader, [r for r in isr if r != broker_id])):
                    moved.append(tp)
                else:
                    remaining.append(tp)
            elif broker_id in st.isr:
                if await self._write_state(tp, st.new_leader_and_isr(st.leader,
                                                                     [r for r in st.isr if r != broker_id])):
                    moved.append(tp)
        if moved:
            self._send_leader_and_isr_for(moved)
            self._send_update_metadata(list(self.ctx.live_brokers), moved)
        log.info("controlled shutdown of broker %d: moved %d partition(s), %d remaining", broker_id, len(moved),
                 len(remaining))
        return ErrorCode.NONE, remaining

    async def _on_elect_leaders(self, payload: tuple[int, list[TopicPartition] | None],
                                ) -> dict[TopicPartition, ElectionResult]:
        """ElectLeaders: PREFERRED (0) puts the first replica back in charge; UNCLEAN (1) may pick any replica."""
        election_type, tps = payload
        if not self.active:
            return {tp: ElectionResult(ErrorCode.NOT_CONTROLLER) for tp in (tps or [])}
        wanted = tps if tps is not None else list(self.ctx.assignments)
        out: dict[TopicPartition, ElectionResult] = {}
        changed = []
        for tp in wanted:
            st = self.ctx.states.get(tp)
            replicas = self.ctx.assignments.get(tp)
            if st is None or not replicas:
                out[tp] = ElectionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                continue
            if election_type == 0:
                preferred = replicas[0]
                if st.leader == preferred:
                    out[tp] = ElectionResult(ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic "
                                                                            "partition.")
                    continue
                if not self.ctx.replica_online(preferred, tp) or preferred not in st.isr \
                        or preferred in self.ctx.shutting_down:
                    out[tp] = ElectionResult(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                                             f"Failed to elect leader for partition {tp} under strategy "
                                             "PreferredReplicaPartitionLeaderElectionStrategy")
                    continue
                new = st.new_leader_and_isr(preferred, st.isr)
            else:
                if st.leader != NO_LEADER and self.ctx.replica_online(st.leader, tp):
                    out[tp] = ElectionResult(ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic "
                                                                            "partition.")
                    continue
                live = [r for r in replicas if self.ctx.replica_online(r, tp)]
                if not live:
                    out[tp] = ElectionResult(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                                             f"Failed to elect leader for partition {tp}: no live replica")
                    continue
                in_isr = [r for r in live if r in st.isr]
                leader = in_isr[0] if in_isr else live[0]
                new = st.new_leader_and_isr(leader, in_isr or [leader])
            if await self._write_state(tp, new):
                out[tp] = ElectionResult(ErrorCode.NONE)
                changed.append(tp)
            else:
                out[tp] = ElectionResult(ErrorCode.UNKNOWN_SERVER_ERROR, "concurrent partition state change")
        if changed:
            self._send_leader_and_isr_for(changed)
            self._send_update_metadata(list(self.ctx.live_brokers), changed)
        return out

    async def _on_auto_rebalance(self, _payload: Any) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance: per broker, elect preferred leaders past the imbalance."""
        if not self.active:
            return
        by_broker: dict[int, list[TopicPartition]] = {}
        for tp, replicas in self.ctx.assignments.items():
            if replicas and tp.topic not in self.ctx.topics_being_deleted:
                by_broker.setdefault(replicas[0], []).append(tp)
        todo: list[TopicPartition] = []
        for broker, tps in by_broker.items():
            if not self.ctx.alive(broker) or broker in self.ctx.shutting_down:
                continue
            not_led = [tp for tp in tps if self.ctx.states.get(tp) is not None and self.ctx.states[tp].leader != broker]
            if tps and 100 * len(not_led) / len(tps) > self.imbalance_percentage:
                todo += [tp for tp in not_led if broker in self.ctx.states[tp].isr]
        if todo:
            log.info("auto leader rebalance: preferred leaders for %d partition(s)", len(todo))
            await self._on_elect_leaders((0, todo))

    async def _rebalance_loop(self) -> None:
        while True:
            await asyncio.sleep(self.imbalance_check_interval_s)
            await self._events.put(("auto_rebalance", None, None))

    # -- requests to brokers ----------------------------------------------------------------------------------
    def _sender(self, b: BrokerRegistration) -> _BrokerSender:
        ep = b.endpoint(self.listener) or (b.endpoints[0] if b.endpoints else None)
        s = self._senders.get(b.broker_id)
        if s is None:
            assert ep is not None, f"broker {b.broker_id} has no endpoint"
            s = _BrokerSender(b.broker_id, ep.host, ep.port, f"strom-controller-{self.broker_id}",
                              self.socket_timeout_s, self.security)
            self._senders[b.broker_id] = s
        return s

    def _sender_for(self, broker_id: int) -> _BrokerSender:
        return self._sender(self.ctx.live_brokers[broker_id])

    def _partition_state(self, tp: TopicPartition, is_new: bool = False,
                         ) -> LeaderAndIsrRequest.LeaderAndIsrPartitionState:
        st = self.ctx.states[tp]
        return LeaderAndIsrRequest.LeaderAndIsrPartitionState(
            partition_index=tp.partition, controller_epoch=st.controller_epoch, leader=st.leader,
            leader_epoch=st.leader_epoch, isr=list(st.isr), partition_epoch=st.zk_version,
            replicas=list(self.ctx.assignments.get(tp, [])), adding_replicas=[], removing_replicas=[],
            is_new=is_new)

    def _send_leader_and_isr_for(self, tps: Iterable[TopicPartition], only_to: set[int] | None = None,
                                 new_replicas: set[tuple[int, TopicPartition]] | None = None) -> None:
        """LeaderAndIsr to the live replicas of ``tps`` (or only to the brokers ``only_to``). ``new_replicas``:
        (broker, partition) pairs that are new (``isNew``: a broker creates their logs even while one of its log
        dirs is offline). Each answer is checked for replicas in failed log dirs."""
        per_broker: dict[int, dict[str, list[TopicPartition]]] = {}
        for tp in tps:
            if tp not in self.ctx.states:
                continue
            for r in self.ctx.assignments.get(tp, []):
                if self.ctx.alive(r) and (only_to is None or r in only_to):
                    per_broker.setdefault(r, {}).setdefault(tp.topic, []).append(tp)
        live_leaders = [
            LeaderAndIsrRequest.LeaderAndIsrLiveLeader(broker_id=b.broker_id, host_name=ep.host, port=ep.port)
            for b in self.ctx.live_brokers.values()
            if (ep := b.endpoint(self.listener) or (b.endpoints[0] if b.endpoints else None)) is not None]
        new = new_replicas or set()
        for broker, topics in per_broker.items():
            epoch = self.ctx.live_brokers[broker].broker_epoch
            req = LeaderAndIsrRequest(
                controller_id=self.broker_id, controller_epoch=self.ctx.epoch, broker_epoch=epoch, type=0,
                topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(
                    topic_name=topic, topic_id=self.ctx.topic_ids.get(topic, uuid.UUID(int=0)),
                    partition_states=[self._partition_state(tp, (broker, tp) in new) for tp in sorted(parts)])
                    for topic, parts in topics.items()],
                live_leaders=live_leaders)
            fut = self._sender_for(broker).send(ApiKey.LEADER_AND_ISR, LEADER_AND_ISR_VERSION, req)
            fut.add_done_callback(lambda f, b=broker, e=epoch, r=req: self._leader_and_isr_answered(b, e, r, f))

    def _leader_and_isr_answered(self, broker: int, broker_epoch: int, request: LeaderAndIsrRequest,
                                 fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        self._enqueue("leader_and_isr_response", (broker, broker_epoch, request, fut.result()))

    def _send_update_metadata(self, brokers: list[int], tps: list[TopicPartition],
                              deleting: list[TopicPartition] | None = None) -> None:
        live = []
        for b in self.ctx.live_brokers.values():
            live.append(UpdateMetadataRequest.UpdateMetadataBroker(
                id=b.broker_id, rack=b.rack, endpoints=[
                    UpdateMetadataRequest.UpdateMetadataEndpoint(
                        port=ep.port, host=ep.host, listener=ep.listener_name,
                        security_protocol=_SECURITY_PROTOCOLS.get(ep.security_protocol, 0))
                    for ep in b.endpoints]))
        topics: dict[str, list[UpdateMetadataRequest.UpdateMetadataPartitionState]] = {}
        for tp in tps:
            st = self.ctx.states.get(tp)
            if st is None:
                continue
            replicas = self.ctx.assignments.get(tp, [])
            topics.setdefault(tp.topic, []).append(UpdateMetadataRequest.UpdateMetadataPartitionState(
                partition_index=tp.partition, controller_epoch=st.controller_epoch, leader=st.leader,
                leader_epoch=st.leader_epoch, isr=list(st.isr), zk_version=st.zk_version, replicas=list(replicas),
                offline_replicas=[r for r in replicas if not self.ctx.replica_online(r, tp)]))
        for tp in deleting or []:
            # Kafka marks deleted partitions with leader -2 (LeaderDuringDelete) so brokers drop them.
            topics.setdefault(tp.topic, []).append(UpdateMetadataRequest.UpdateMetadataPartitionState(
                partition_index=tp.partition, controller_epoch=self.ctx.epoch, leader=LeaderAndIsr.LEADER_DURING_DELETE,
                leader_epoch=0, isr=[], zk_version=0, replicas=[], offline_replicas=[]))
        topic_states = [UpdateMetadataRequest.UpdateMetadataTopicState(
            topic_name=topic, topic_id=self.ctx.topic_ids.get(topic, uuid.UUID(int=0)), partition_states=parts)
            for topic, parts in topics.items()]
        for broker in brokers:
            if broker not in self.ctx.live_brokers:
                continue
            req = UpdateMetadataRequest(
                controller_id=self.broker_id, controller_epoch=self.ctx.epoch,
                broker_epoch=self.ctx.live_brokers[broker].broker_epoch, topic_states=topic_states,
                live_brokers=live)
            self._sender_for(broker).send(ApiKey.UPDATE_METADATA, UPDATE_METADATA_VERSION, req)


class _BrokerSender:
    """One in-order queue of controller requests to one broker (Kafka's RequestSendThread)."""

    def __init__(self, broker_id: int, host: str, port: int, client_id: str, timeout_s: float,
                 security: InterBrokerSecurity | None) -> None:
        self.broker_id = broker_id
        self.channel = BrokerChannel(host, port, client_id, timeout_s=timeout_s, security=security)
        self._queue: asyncio.Queue[tuple[int, int, Any, asyncio.Future[Any] | None]] = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def send(self, api_key: int, version: int, body: Any) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((api_key, version, body, fut))
        return fut

    def stop_replica_later(self, controller_id: int, epoch: int, tps: list[TopicPartition], delete: bool) -> None:
        """Queue a StopReplica without waiting for its answer."""
        asyncio.get_running_loop().create_task(self.stop_replicas(controller_id, epoch, tps, delete))

    async def stop_replicas(self, controller_id: int, epoch: int, tps: list[TopicPartition], delete: bool) -> Any:
        by_topic: dict[str, list[TopicPartition]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp)
        req = StopReplicaRequest(controller_id=controller_id, controller_epoch=epoch, broker_epoch=-1,
                                 topic_states=[StopReplicaRequest.StopReplicaTopicState(
                                     topic_name=t, partition_states=[StopReplicaRequest.StopReplicaPartitionState(
                                         partition_index=tp.partition, leader_epoch=-2, delete_partition=delete)
                                         for tp in parts]) for t, parts in by_topic.items()])
        return await self.send(ApiKey.STOP_REPLICA, STOP_REPLICA_VERSION, req)

    async def _run(self) -> None:
        backoff = 0.05
        while True:
            api_key, version, body, fut = await self._queue.get()
            try:
                while True:
                    try:
                        resp = await self.channel.request(api_key, version, body)
                        if fut is not None and not fut.done():
                            fut.set_result(resp)
                        backoff = 0.05
                        break
                    except KafkaConnectionError as e:
                        # The broker may be restarting; its ZooKeeper session ending removes this sender.
                        log.debug("controller request to broker %d failed (%s); retrying", self.broker_id, e)
                        await asyncio.sleep(backoff)
                        backoff = min(backoff * 2, 1.0)
            finally:
                self._queue.task_done()

    async def flush(self, timeout_s: float) -> None:
        """Wait (up to ``timeout_s``) until every queued request was delivered."""
        try:
            await asyncio.wait_for(self._queue.join(), timeout_s)
        except TimeoutError:
            log.info("controller requests to broker %d not delivered within %.1f s", self.broker_id, timeout_s)

    def close(self) -> None:
        self._task.cancel()
        self.channel.close()
        while not self._queue.empty():
            *_rest, fut = self._queue.get_nowait()
            if fut is not None and not fut.done():
                fut.set_exception(KafkaConnectionError(f"broker {self.broker_id} is gone"))
                fut.exception()  # nobody may wait for it: no "exception was never retrieved" at shutdown
