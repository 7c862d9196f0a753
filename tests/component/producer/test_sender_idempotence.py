"""Idempotent producer: InitProducerId, sequences, ordering across retries, epoch bumps (Kafka's
``SenderTest`` / ``TransactionManagerTest`` idempotent cases). MockClient + MockTime."""

from __future__ import annotations

import pytest

from strom.common.error_codes import ClusterAuthorizationFailedError
from strom.common.errors import KafkaTimeoutError
from strom.producer.internals.transaction_manager import State, increment_sequence
from strom.protocol.messages import InitProducerIdRequest
from strom.record.batch import RecordBatch
from strom.testing.mock_client import metadata_update_with

from .sender_support import (
    TP0,
    Harness,
    init_producer_id_response,
    make_harness,
    produce_response,
    request_partitions,
)

pytestmark = [pytest.mark.component, pytest.mark.timeout(60)]


def _ready(h: Harness, pid: int = 1000, epoch: int = 0) -> None:
    h.run_once()  # enqueues and sends InitProducerId
    assert len(h.client.requests_of(InitProducerIdRequest)) == 1
    h.client.respond(init_producer_id_response(pid, epoch))
    h.run_once()
    assert h.tm is not None and h.tm.state is State.READY


def _sent_batch(h: Harness, index: int = -1) -> RecordBatch:
    request = h.produce_requests()[index].request
    return RecordBatch(request_partitions(request)[TP0])


def test_producer_id_before_any_produce() -> None:
    """§12: nothing is drained before InitProducerId succeeds; batches then carry the producer id, epoch 0
    and sequences starting at 0 that advance by the record count."""
    h = make_harness(idempotent=True, batch_size=256)
    h.append(value=b"a" * 60)
    h.append(value=b"b" * 60)  # two records in the first batch
    h.append(value=b"c" * 150)  # second batch
    h.run_once()
    assert not h.produce_requests()
    request = h.client.requests_of(InitProducerIdRequest)[0].request
    assert request.transactional_id is None and request.transaction_timeout_ms == 2**31 - 1
    h.client.respond(init_producer_id_response(1000, 0))
    h.run_once(3)
    first, second = _sent_batch(h, 0), _sent_batch(h, 1)
    assert (first.producer_id, first.producer_epoch, first.base_sequence, first.records_count) == (1000, 0, 0, 2)
    assert (second.producer_id, second.base_sequence) == (1000, 2)
    assert h.tm.sequence_number(TP0) == 3


def test_retried_batch_keeps_its_sequence_and_goes_first() -> None:
    """§12: a retried batch keeps its sequence; retries are re-enqueued in sequence order and the retried head
    is sent alone (a retried batch is only sent once it is the first in flight), so per-partition order
    survives retries with 5 in flight."""
    h = make_harness(idempotent=True, batch_size=200, retry_backoff_ms=0)
    _ready(h)
    futures = [h.append(value=bytes([65 + i]) * 100) for i in range(3)]  # three batches
    h.run_once(3)
    assert [_sent_batch(h, i).base_sequence for i in range(3)] == [0, 1, 2]
    h.client.respond(produce_response(TP0, error=6))  # seq 0: NOT_LEADER -> retry
    h.client.respond(produce_response(TP0, error=45))  # seq 1: OUT_OF_ORDER (0 missing) -> retry
    h.client.respond(produce_response(TP0, error=45))  # seq 2
    h.run_once()
    assert [b.base_sequence for b in h.accumulator.get_deque(TP0)] == [0, 1, 2]
    h.run_once()
    assert [_sent_batch(h, i).base_sequence for i in range(len(h.produce_requests()))] == [0]
    for seq in (1, 2):  # retried batches go one at a time, each once it is the first in flight
        h.client.respond(produce_response(TP0, offset=seq - 1))
        h.run_once(3)
        assert [_sent_batch(h, i).base_sequence for i in range(len(h.produce_requests()))] == [seq]
    h.client.respond(produce_response(TP0, offset=2))
    h.run_once()
    assert [f.get().offset for f in futures] == [0, 1, 2]
    assert h.tm.last_acked_sequence(TP0) == 2
    assert h.tm.producer_id_and_epoch().epoch == 0  # no gap, no bump


def test_duplicate_sequence_is_success() -> None:
    """§11.2: DUPLICATE_SEQUENCE_NUMBER means the broker already has the batch: success."""
    h = make_harness(idempotent=True)
    _ready(h)
    f = h.append()
    h.run_once()
    h.client.respond(produce_response(TP0, offset=-1, error=46))
    h.run_once()
    assert f.get().offset == -1
    assert f.exception() is None


def test_out_of_order_for_next_batch_bumps_epoch_and_restarts_sequences() -> None:
    """§12: OUT_OF_ORDER_SEQUENCE_NUMBER for the batch right after the last acknowledged one is a real gap: the
    epoch is bumped locally and the batch is retried with sequence 0."""
    h = make_harness(idempotent=True, retry_backoff_ms=0)
    _ready(h)
    f = h.append()
    h.run_once()
    h.client.respond(produce_response(TP0, error=45))
    h.run_once(3)
    batch = _sent_batch(h)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1000, 1, 0)
    h.client.respond(produce_response(TP0, offset=7))
    h.run_once()
    assert f.get().offset == 7


def test_unknown_producer_id_after_log_truncation_bumps_epoch() -> None:
    """§12: UNKNOWN_PRODUCER_ID with a log start offset past the last acknowledged offset (retention deleted
    the producer state) bumps the epoch and retries from sequence 0."""
    h = make_harness(idempotent=True, retry_backoff_ms=0)
    _ready(h)
    h.append()
    h.run_once()
    h.client.respond(produce_response(TP0, offset=0))
    h.run_once()
    f = h.append()
    h.run_once()
    assert _sent_batch(h).base_sequence == 1
    h.client.respond(produce_response(TP0, error=59, log_start_offset=10))
    h.run_once(3)
    batch = _sent_batch(h)
    assert (batch.producer_epoch, batch.base_sequence) == (1, 0)
    h.client.respond(produce_response(TP0, offset=11))
    h.run_once()
    assert f.get().offset == 11


def test_expired_in_flight_batch_bumps_epoch_when_sequence_cannot_be_resolved() -> None:
    """§12 / §18 item 53: a batch that expires after being retried has an unknown outcome; once nothing is in
    flight and the next sequence does not follow the last acknowledged one, the epoch is bumped and the
    partition's sequences restart at 0."""
    h = make_harness(idempotent=True, retry_backoff_ms=0, delivery_timeout_ms=5000, request_timeout_ms=60_000)
    _ready(h)
    expired = h.append()
    h.run_once()
    h.client.respond(produce_response(TP0, error=7))  # REQUEST_TIMED_OUT: retried (in_retry)
    h.run_once(2)
    assert len(h.produce_requests()) == 1
    h.time.sleep(5001)
    h.run_once()
    with pytest.raises(KafkaTimeoutError, match="Expiring 1 record"):
        expired.get()
    later = h.append()
    h.run_once(2)
    batch = _sent_batch(h)
    assert (batch.producer_epoch, batch.base_sequence) == (1, 0)
    assert not h.tm.has_unresolved_sequence(TP0)
    h.client.respond_to_request(h.produce_requests()[1], produce_response(TP0, offset=4))
    h.run_once()
    assert later.get().offset == 4


def test_unresolved_sequence_holds_new_batches_until_in_flight_settle() -> None:
    """§12: while a partition's sequence is unresolved and batches are still in flight, no new batch is
    drained; when the in-flight batch is acknowledged right after the expired one the sequence resolves with
    no epoch bump."""
    h = make_harness(idempotent=True, batch_size=200, retry_backoff_ms=0, delivery_timeout_ms=5000,
                     request_timeout_ms=60_000)
    _ready(h)
    first = h.append(value=b"a" * 100)
    h.run_once()
    h.client.respond(produce_response(TP0, error=7))
    h.run_once(2)  # first is retried (in_retry) and in flight again
    h.time.sleep(3000)
    second = h.append(value=b"b" * 100)
    h.run_once()
    assert [_sent_batch(h, i).base_sequence for i in range(2)] == [0, 1]
    h.time.sleep(2001)
    h.run_once()  # first expires; second (seq 1) is still in flight
    with pytest.raises(KafkaTimeoutError):
        first.get()
    assert h.tm.has_unresolved_sequence(TP0)
    third = h.append(value=b"c" * 100)
    h.run_once(2)
    assert len(h.produce_requests()) == 2  # third held back
    h.client.respond_to_request(h.produce_requests()[1], produce_response(TP0, offset=8))
    h.run_once(3)
    assert second.get().offset == 8
    batch = _sent_batch(h)
    assert (batch.producer_epoch, batch.base_sequence) == (0, 2)
    assert not third.done()


def test_nothing_goes_to_a_new_leader_while_the_old_one_holds_a_request() -> None:
    """A leadership change with batches in flight to the old leader (an acks=all produce it parks while it loses
    leadership): the partition sends nothing to the new leader until the old one answers, and then the oldest
    batch goes first. (Sent ahead, newer batches would be written after the ones the new leader replicated; once
    five were, the retry of the oldest could only be answered OUT_OF_ORDER_SEQUENCE_NUMBER, below the last
    acknowledged sequence: retried until delivery.timeout.ms, which the cluster stress test hit.)"""
    h = make_harness(idempotent=True, batch_size=200, retry_backoff_ms=0, leader_for=lambda t, p: 0)
    _ready(h)
    old = [h.append(value=bytes([65 + i]) * 100) for i in range(2)]
    h.run_once(2)
    assert [(r.destination, _sent_batch(h, i).base_sequence) for i, r in enumerate(h.produce_requests())] == \
        [(0, 0), (0, 1)]
    h.client.update_metadata(metadata_update_with(2, {"t": 2}, leader_for=lambda t, p: 1, leader_epoch=1))
    new = h.append(value=b"n" * 100)
    h.run_once(3)
    assert [r.destination for r in h.produce_requests()] == [0, 0]  # held: node 0 has not answered
    h.client.respond(produce_response(TP0, error=6))  # seq 0: NOT_LEADER_OR_FOLLOWER
    h.run_once(3)
    assert [r.destination for r in h.produce_requests()] == [0]  # seq 1 still outstanding at node 0
    h.client.respond(produce_response(TP0, error=6))
    h.run_once(3)
    sent = [(r.destination, _sent_batch(h, i).base_sequence) for i, r in enumerate(h.produce_requests())]
    assert sent == [(1, 0)]  # the retries go to node 1 in sequence order, the first alone
    for offset in (10, 11):
        h.client.respond(produce_response(TP0, offset=offset))
        h.run_once(3)
    assert [f.get().offset for f in old] == [10, 11]
    assert _sent_batch(h).base_sequence == 2
    h.client.respond(produce_response(TP0, offset=12))
    h.run_once()
    assert new.get().offset == 12
    assert h.tm.producer_id_and_epoch().epoch == 0


def test_fatal_init_producer_id_error_aborts_batches() -> None:
    """§12: a fatal InitProducerId error (CLUSTER_AUTHORIZATION_FAILED) puts the manager in a fatal state and
    fails every pending batch with it."""
    h = make_harness(idempotent=True)
    f = h.append()
    h.run_once()
    h.client.respond(init_producer_id_response(error=31))
    h.run_once(2)
    assert h.tm.has_fatal_error()
    with pytest.raises(ClusterAuthorizationFailedError):
        f.get()


def test_init_producer_id_retriable_error_is_retried() -> None:
    """§12: a retriable InitProducerId error (COORDINATOR_LOAD_IN_PROGRESS) is retried after the backoff."""
    h = make_harness(idempotent=True, retry_backoff_ms=100)
    h.run_once()
    h.client.respond(init_producer_id_response(error=14))
    h.run_once()
    h.time.sleep(100)
    h.run_once(2)
    assert len(h.client.requests_of(InitProducerIdRequest)) == 1
    h.client.respond(init_producer_id_response(5, 3))
    h.run_once()
    assert (h.tm.producer_id_and_epoch().producer_id, h.tm.producer_id_and_epoch().epoch) == (5, 3)


def test_sequence_wraps_at_int_max() -> None:
    """§12: Kafka's ``incrementSequence``: sequences wrap to 0 after Integer.MAX_VALUE."""
    assert increment_sequence(2**31 - 1, 1) == 0
    assert increment_sequence(2**31 - 2, 3) == 1
    assert increment_sequence(5, 3) == 8


def _without_init_producer_id(h: Harness) -> None:
    from strom.network.api_versions import CLIENT_VERSIONS, NodeApiVersions

    h.client.node_api_versions = NodeApiVersions({k: v for k, v in CLIENT_VERSIONS.items() if k != 22})


def test_default_idempotence_falls_back_without_init_producer_id() -> None:
    """§12 (divergence): when idempotence is only on by default and the broker lacks InitProducerId,
    the producer continues without idempotence instead of failing every send."""
    h = make_harness(idempotent=True, fallback=True)
    _without_init_producer_id(h)
    f = h.append()
    h.run_once(3)
    assert h.sender.transaction_manager is None and h.accumulator.transaction_manager is None
    batch = _sent_batch(h)
    assert batch.producer_id == -1 and batch.base_sequence == -1
    h.client.respond(produce_response(TP0, offset=2))
    h.run_once()
    assert f.get().offset == 2


def test_explicit_idempotence_without_init_producer_id_is_fatal() -> None:
    """§12: with idempotence explicitly enabled, a broker without InitProducerId is a fatal error for every
    pending batch (UnsupportedVersionException)."""
    from strom.common.error_codes import UnsupportedVersionError

    h = make_harness(idempotent=True)
    _without_init_producer_id(h)
    f = h.append()
    h.run_once(3)
    assert h.tm.has_fatal_error()
    with pytest.raises(UnsupportedVersionError):
        f.get()
