"""Group-membership timing and the heartbeat thread.

Kafka counterparts: ``org.apache.kafka.clients.consumer.internals.Heartbeat`` and
``AbstractCoordinator.HeartbeatThread``.

:class:`Heartbeat` tracks three deadlines: the next heartbeat (``heartbeat.interval.ms`` after the last one
was sent, ``retry.backoff.ms`` after a failure), the session (``session.timeout.ms`` after the last successful
heartbeat; expiry means the coordinator is presumed dead) and the poll interval (``max.poll.interval.ms``
after the last ``poll``; expiry means the application stalled and the member leaves the group). Guarded by
the coordinator's lock.

:class:`HeartbeatThread` is a daemon thread ("kafka-coordinator-heartbeat-thread | <group>") that, while the
member is in a group (COMPLETING_REBALANCE or STABLE), drives the network without blocking, rediscovers a
lost coordinator, sends heartbeats when due and leaves the group when the poll interval expires. It sleeps on
the coordinator's condition (woken by ``enable``/``close`` and heartbeat responses). Holding the coordinator
lock and then the network client's lock is the only lock order used.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from strom.common.time import Time

if TYPE_CHECKING:
    from strom.consumer.internals.abstract_coordinator import AbstractCoordinator

__all__ = ["Heartbeat", "HeartbeatThread"]

log = logging.getLogger(__name__)


class Heartbeat:
    """Kafka's ``Heartbeat`` (see the module docstring). Not thread-safe: guarded by the coordinator lock."""

    def __init__(self, time: Time, session_timeout_ms: int, heartbeat_interval_ms: int, max_poll_interval_ms: int,
                 retry_backoff_ms: int) -> None:
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError("Heartbeat must be set lower than the session timeout")
        self.time = time
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.retry_backoff_ms = retry_backoff_ms
        now = time.milliseconds()
        self._heartbeat_deadline = now + heartbeat_interval_ms
        self._session_deadline = now + session_timeout_ms
        self._poll_deadline = now + max_poll_interval_ms
        self.last_heartbeat_send_ms = 0
        self.last_poll_ms = now
        self._in_flight = False

    def poll(self, now: int) -> None:
        """The application called ``poll``."""
        self.last_poll_ms = now
        self._poll_deadline = now + self.max_poll_interval_ms

    def has_in_flight(self) -> bool:
        return self._in_flight

    def sent_heartbeat(self, now: int) -> None:
        self.last_heartbeat_send_ms = now
        self._in_flight = True
        self._heartbeat_deadline = now + self.heartbeat_interval_ms

    def fail_heartbeat(self) -> None:
        self._in_flight = False
        self._heartbeat_deadline = self.time.milliseconds() + self.retry_backoff_ms

    def receive_heartbeat(self) -> None:
        self._in_flight = False
        self._session_deadline = self.time.milliseconds() + self.session_timeout_ms

    def should_heartbeat(self, now: int) -> bool:
        return now >= self._heartbeat_deadline

    def time_to_next_heartbeat(self, now: int) -> int:
        return max(0, self._heartbeat_deadline - now)

    def session_timeout_expired(self, now: int) -> bool:
        return now >= self._session_deadline

    def poll_timeout_expired(self, now: int) -> bool:
        return now >= self._poll_deadline

    def reset_session_timeout(self) -> None:
        self._session_deadline = self.time.milliseconds() + self.session_timeout_ms

    def reset_timeouts(self) -> None:
        now = self.time.milliseconds()
        self._session_deadline = now + self.session_timeout_ms
        self._poll_deadline = now + self.max_poll_interval_ms
        self._heartbeat_deadline = now + self.heartbeat_interval_ms


class HeartbeatThread(threading.Thread):
    """Kafka's ``HeartbeatThread`` (see the module docstring)."""

    def __init__(self, coordinator: AbstractCoordinator, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.coordinator = coordinator
        self.enabled = False
        self.closed = False
        self.failure: BaseException | None = None

    def enable(self) -> None:
        """Coordinator lock held."""
        log.debug("Enabling heartbeat thread")
        self.enabled = True
        self.coordinator.heartbeat.reset_timeouts()
        self.coordinator.cond.notify_all()

    def disable(self) -> None:
        """Coordinator lock held."""
        self.enabled = False

    def close(self) -> None:
        with self.coordinator.cond:
            self.closed = True
            self.coordinator.cond.notify_all()

    def run(self) -> None:
        try:
            log.debug("Heartbeat thread started")
            while True:
                with self.coordinator.cond:
                    if self.closed:
                        return
                    if not self.enabled:
                        self.coordinator.cond.wait()
                        continue
                    self.run_once()
        except BaseException as exc:  # surfaced to the application on its next poll
            log.error("Heartbeat thread failed due to unexpected error", exc_info=True)
            self.failure = exc
        finally:
            log.debug("Heartbeat thread has closed")

    def run_once(self) -> None:
        """One pass of the loop; the coordinator lock is held. Also used by tests to step the thread."""
        c = self.coordinator
        if c.state.has_not_joined_group():
            self.disable()
            return
        c.client.poll_no_wakeup()
        now = c.time.milliseconds()
        if c.coordinator_unknown():
            if c.find_coordinator_future is None:
                c.lookup_coordinator()
            self._wait(c.retry_backoff_ms)
        elif c.heartbeat.session_timeout_expired(now):
            c.mark_coordinator_unknown("session timed out without receiving a heartbeat response")
        elif c.heartbeat.poll_timeout_expired(now):
            log.warning("consumer poll timeout has expired. This means the time between subsequent calls to poll() "
                        "was longer than the configured max.poll.interval.ms, which typically implies that the "
                        "poll loop is spending too much time processing messages. You can address this either by "
                        "increasing max.poll.interval.ms or by reducing the maximum size of batches returned in "
                        "poll() with max.poll.records.")
            c.maybe_leave_group("consumer poll timeout has expired.")
        elif not c.heartbeat.should_heartbeat(now):
            self._wait(min(c.retry_backoff_ms, c.heartbeat.time_to_next_heartbeat(now)))
        else:
            c.heartbeat.sent_heartbeat(now)
            c.send_heartbeat_request().add_listener(self._on_success, self._on_failure)

    def _wait(self, ms: int) -> None:
        if ms > 0 and threading.current_thread() is self:
            self.coordinator.cond.wait(ms / 1000.0)

    def _on_success(self, _value: object) -> None:
        with self.coordinator.cond:
            self.coordinator.heartbeat.receive_heartbeat()

    def _on_failure(self, exc: BaseException) -> None:
        from strom.common.error_codes import FencedInstanceIdError, RebalanceInProgressError

        with self.coordinator.cond:
            if isinstance(exc, RebalanceInProgressError):
                # heartbeating while the group rebalances is valid: the session stays alive
                self.coordinator.heartbeat.receive_heartbeat()
            elif isinstance(exc, FencedInstanceIdError):
                log.error("Caught fenced group.instance.id %s error in heartbeat thread",
                          self.coordinator.config.group_instance_id)
                self.failure = exc
                self.coordinator.heartbeat.fail_heartbeat()
            else:
                self.coordinator.heartbeat.fail_heartbeat()
            self.coordinator.cond.notify_all()

