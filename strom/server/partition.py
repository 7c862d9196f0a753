"""One partition replica on this broker: leader or follower state, the ISR, follower progress, the high watermark.

Kafka counterpart: ``kafka.cluster.Partition``. The leader appends client batches, learns each follower's log end
offset from the offsets it fetches at, expands the ISR when a follower catches up, shrinks it when one lags more
than ``replica.lag.time.max.ms``, and advances the high watermark to the smallest log end offset in the ISR.
ISR changes go to the controller through an ``AlterPartition`` callback and take effect when it answers (Kafka's
``AlterPartitionManager``); a standalone broker's ISR is itself alone, so its high watermark is its log end.
Event loop only.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from strom.common.error_codes import ErrorCode
from strom.common.errors import BrokerResponseError, for_code
from strom.common.structs import TopicPartition
from strom.storage.log import Log
from strom.storage.log_append_info import LogAppendInfo
from strom.storage.log_validator import AppendOrigin
from strom.storage.producer_state import VerificationGuard

__all__ = ["Partition", "ReplicaState", "LeaderAndIsr", "AlterPartitionCallback"]

log = logging.getLogger("strom.server")


@dataclass(slots=True)
class LeaderAndIsr:
    """The partition state the controller decided (what LeaderAndIsr carries and AlterPartition proposes)."""

    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int  # the zkVersion of the partition state znode
    replicas: list[int] = field(default_factory=list)
    controller_epoch: int = 0
    is_new: bool = False  # a new replica (LeaderAndIsr isNew): its log may be created while a log dir is offline


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower (Kafka's ``Replica``)."""

    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: int = 0


# (partition, proposed LeaderAndIsr) -> the state the controller committed, or None when it refused.
AlterPartitionCallback = Callable[[TopicPartition, LeaderAndIsr], Awaitable["LeaderAndIsr | None"]]


def _err(code: int, message: str) -> BrokerResponseError:
    return for_code(code, message)


class Partition:
    def __init__(self, tp: TopicPartition, log_: Log, local_broker_id: int) -> None:
        self.tp = tp
        self.log = log_
        self.local_broker_id = local_broker_id
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.controller_epoch = -1
        self.replicas: list[int] = []
        self.isr: set[int] = set()
        self.remote: dict[int, ReplicaState] = {}
        self.pending_isr: set[int] | None = None  # an AlterPartition in flight
        self.leader_epoch_start_offset = 0  # the LEO when this broker became leader at the current epoch
        self.alter_partition: AlterPartitionCallback | None = None
        self.on_hw_change: Callable[[Partition], None] | None = None
        self.on_isr_change: Callable[[set[int], set[int]], None] | None = None  # (old, new): ISR shrink/expand

    # -- state ------------------------------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def isr_for_hw(self) -> set[int]:
        # While an expansion is in flight the larger set counts for the HW (Kafka's "maximal ISR").
        return self.isr | self.pending_isr if self.pending_isr is not None else self.isr

    def make_leader(self, state: LeaderAndIsr, now_ms: int) -> bool:
        """Become (or stay) leader at ``state``; returns True when this broker was not leading at this epoch."""
        new = not self.is_leader or state.leader_epoch != self.leader_epoch
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.controller_epoch = state.controller_epoch
        self.replicas = list(state.replicas) or [self.local_broker_id]
        self.isr = set(state.isr)
        self.pending_isr = None
        if new:
            # Followers start unknown: their progress is learnt from their next fetch (Kafka resets the state
            # on a new leader epoch so a stale LEO cannot move the HW).
            self.remote = {r: ReplicaState(last_caught_up_ms=now_ms if r in self.isr else 0)
                           for r in self.replicas if r != self.local_broker_id}
            self.leader_epoch_start_offset = self.log_end_offset
            cache = getattr(self.log, "leader_epoch_cache", None)
            if cache is not None:
                cache.assign(state.leader_epoch, self.log_end_offset)
        else:
            for r in self.replicas:
                if r != self.local_broker_id and r not in self.remote:
                    self.remote[r] = ReplicaState()
        self.maybe_increment_leader_hw(now_ms)
        return new

    def make_follower(self, state: LeaderAndIsr) -> bool:
        """Follow ``state.leader``; returns True when the leader or epoch changed (the fetcher must restart)."""
        changed = self.leader_id != state.leader or self.leader_epoch != state.leader_epoch
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.controller_epoch = state.controller_epoch
        self.replicas = list(state.replicas)
        self.isr = set(state.isr)
        self.pending_isr = None
        self.remote = {}
        return changed

    # -- leader: appends --------------------------------------------------------------------------------------
    def append_records_to_leader(self, records: memoryview | bytes, required_acks: int, min_isr: int,
                                 now_ms: int, origin: AppendOrigin = AppendOrigin.CLIENT, *,
                                 records_checked: bool = False,
                                 verification_guard: VerificationGuard | None = None) -> LogAppendInfo:
        if not self.is_leader:
            raise _err(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                       f"Leader not local for partition {self.tp} on broker {self.local_broker_id}")
        if required_acks == -1 and len(self.isr) < min_isr:
            raise _err(ErrorCode.NOT_ENOUGH_REPLICAS,
                       f"The size of the current ISR {sorted(self.isr)} is insufficient to satisfy the min.isr "
                       f"requirement of {min_isr} for partition {self.tp}")
        info = self.log.append_as_leader(records, leader_epoch=self.leader_epoch, now_ms=now_ms, origin=origin,
                                         records_checked=records_checked, verification_guard=verification_guard)
        self.maybe_increment_leader_hw(now_ms)
        return info

    def check_enough_replicas_reached_offset(self, required_offset: int, min_isr: int) -> int | None:
        """For acks=all: None while waiting, else the error code to answer (0 = success)."""
        if not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark >= required_offset:
            return ErrorCode.NONE if len(self.isr) >= min_isr else ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return None

    # -- leader: follower progress ----------------------------------------------------------------------------
    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """Record that ``replica_id`` fetched at ``fetch_offset``; returns True when the HW moved."""
        st = self.remote.get(replica_id)
        if st is None:
            return False
        leo = self.log_end_offset
        if fetch_offset >= leo:
            st.last_caught_up_ms = now_ms
        elif fetch_offset >= st.last_fetch_leader_leo and st.last_fetch_leader_leo >= 0:
            # Caught up to where the leader was at its previous fetch (Kafka's lastCaughtUpTime rule).
            st.last_caught_up_ms = max(st.last_caught_up_ms, st.last_fetch_ms)
        st.log_end_offset = fetch_offset
        st.last_fetch_leader_leo = leo
        st.last_fetch_ms = now_ms
        self.maybe_expand_isr(replica_id, now_ms)
        return self.maybe_increment_leader_hw(now_ms)

    def maybe_increment_leader_hw(self, now_ms: int) -> bool:
        if not self.is_leader:
            return False
        new_hw = self.log_end_offset
        for r in self.isr_for_hw():
            if r == self.local_broker_id:
                continue
            st = self.remote.get(r)
            new_hw = min(new_hw, st.log_end_offset if st is not None else -1)
        old = self.log.high_watermark
        if new_hw > old:
            self.log.update_high_watermark(new_hw)
            if self.on_hw_change is not None:
                self.on_hw_change(self)
            return True
        return False

    def maybe_expand_isr(self, replica_id: int, now_ms: int) -> None:
        if self.pending_isr is not None or replica_id in self.isr or replica_id not in self.replicas:
            return
        st = self.remote[replica_id]
        # A follower joins once it has caught up to the HW and fetched in this leader epoch.
        if st.log_end_offset >= self.high_watermark and st.log_end_offset >= self.leader_epoch_start_offset:
            self._submit_isr(self.isr | {replica_id}, "expand", now_ms)

    def maybe_shrink_isr(self, now_ms: int, lag_max_ms: int) -> None:
        if not self.is_leader or self.pending_isr is not None:
            return
        out = {r for r in self.isr if r != self.local_broker_id
               and now_ms - self.remote.get(r, ReplicaState()).last_caught_up_ms > lag_max_ms}
        if out:
            self._submit_isr(self.isr - out, "shrink", now_ms)

    def _submit_isr(self, new_isr: set[int], why: str, now_ms: int) -> None:
        cb = self.alter_partition
        if cb is None:
            return
        import asyncio

        proposed = LeaderAndIsr(self.local_broker_id, self.leader_epoch, sorted(new_isr), self.partition_epoch,
                                list(self.replicas), self.controller_epoch)
        if why == "expand":
            self.pending_isr = new_isr
        else:
            self.pending_isr = set(self.isr)  # shrinking: keep counting the old ISR until committed
        log.info("%s: proposing ISR %s -> %s (%s)", self.tp, sorted(self.isr), sorted(new_isr), why)
        epoch_at_submit = self.leader_epoch

        async def run() -> None:
            try:
                result = await cb(self.tp, proposed)
            except Exception as e:  # the controller is unreachable: retry on the next check
                log.warning("%s: AlterPartition failed: %s", self.tp, e)
                result = None
            if self.leader_epoch != epoch_at_submit or not self.is_leader:
                return
            self.pending_isr = None
            if result is not None and result.leader_epoch == self.leader_epoch:
                old_isr, self.isr = self.isr, set(result.isr)
                if self.on_isr_change is not None:
                    self.on_isr_change(old_isr, self.isr)
                self.partition_epoch = result.partition_epoch
                log.info("%s: ISR is now %s", self.tp, sorted(self.isr))
            self.maybe_increment_leader_hw(now_ms)

        asyncio.get_running_loop().create_task(run())

    # -- follower ---------------------------------------------------------------------------------------------
    def append_records_to_follower(self, records: memoryview | bytes, leader_hw: int) -> LogAppendInfo | None:
        info = self.log.append_as_follower(records) if records else None
        new_hw = min(leader_hw, self.log_end_offset)
        if new_hw > self.log.high_watermark:
            self.log.update_high_watermark(new_hw)
            if self.on_hw_change is not None:
                self.on_hw_change(self)
        return info

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.leader_id}"
        return (f"Partition({self.tp}, {role}, epoch={self.leader_epoch}, isr={sorted(self.isr)}, "
                f"leo={self.log_end_offset}, hw={self.high_watermark})")
