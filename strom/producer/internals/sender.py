"""The producer's I/O thread: drains the accumulator into one ProduceRequest per broker and handles responses.

Kafka counterpart: ``org.apache.kafka.clients.producer.internals.Sender`` (3.x; SPEC §8, §9, §11, §12).
``run`` loops on :meth:`Sender.run_once` until closed; an exception in one iteration is logged ("Uncaught
error in kafka producer I/O thread") and the loop goes on. ``run_once``: (idempotence) settle unresolved
sequences, get a producer id / bump the epoch → :meth:`Sender.send_producer_data` (metadata for unknown
leaders, ``accumulator.ready``, ``client.ready`` per node, ``drain(max.request.size)``, mute partitions when
``max.in.flight.requests.per.connection == 1``, expire batches older than ``delivery.timeout.ms``, one
ProduceRequest per node) → ``client.poll``. Responses complete batches (offsets, log append time), split
``MESSAGE_TOO_LARGE`` batches, retry retriable errors within the delivery timeout (refreshing metadata on
stale-metadata errors), treat ``DUPLICATE_SEQUENCE_NUMBER`` as success and otherwise fail the batch.
Close: :meth:`initiate_close` drains everything first, :meth:`force_close` aborts what is left.

Threading: ``run`` is the I/O thread; ``wakeup``, ``initiate_close``, ``force_close`` and ``is_running`` are
thread-safe. User callbacks run on the I/O thread, never under an internal lock.
"""

from __future__ import annotations

import logging
from typing import Any

from strom.common.error_codes import (
    ClusterAuthorizationFailedError,
    ErrorCode,
    InvalidRecordError,
    TopicAuthorizationFailedError,
)
from strom.common.errors import KafkaError, KafkaTimeoutError, error_class, for_code
from strom.common.structs import TopicPartition
from strom.common.time import SYSTEM_TIME, Time
from strom.metrics import Metrics
from strom.network.client_request import ClientResponse
from strom.network.kafka_client import KafkaClient
from strom.producer.internals.producer_batch import ProducerBatch
from strom.producer.internals.record_accumulator import RecordAccumulator
from strom.producer.internals.sender_metrics import SenderMetrics
from strom.producer.internals.transaction_manager import TransactionAbortedError, TransactionManager
from strom.protocol.messages import ProduceRequest, ProduceResponse
from strom.record.sizes import RECORD_BATCH_OVERHEAD

__all__ = ["Sender"]

log = logging.getLogger(__name__)

_PartitionResponse = ProduceResponse.PartitionProduceResponse
_TopicData = ProduceRequest.TopicProduceData
_PartitionData = ProduceRequest.PartitionProduceData
PRODUCE_MIN_VERSION = 3  # record batch v2 (magic 2) needs Produce v3+
LONG_MAX = 2**63 - 1


class Sender:
    """Kafka's ``Sender`` (a ``Runnable`` run by the producer's daemon I/O thread)."""

    def __init__(self, client: KafkaClient, metadata: Any, accumulator: RecordAccumulator,
                 guarantee_message_order: bool, max_request_size: int, acks: int, retries: int,
                 metrics: Metrics | None, time: Time = SYSTEM_TIME, request_timeout_ms: int = 30_000,
                 retry_backoff_ms: int = 100, transaction_manager: TransactionManager | None = None, *,
                 log_context: str = "") -> None:
        self.client = client
        self.metadata = metadata
        self.accumulator = accumulator
        self.guarantee_message_order = guarantee_message_order
        self.max_request_size = max_request_size
        self.acks = acks
        self.retries = retries
        self.time = time
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.transaction_manager = transaction_manager
        self.log_context = log_context
        self.running = True
        self.force_closed = False
        self.in_flight_batches: dict[TopicPartition, list[ProducerBatch]] = {}
        self.metrics = metrics if metrics is not None else Metrics(time=time)
        self.sensors = SenderMetrics(self.metrics, lambda: self.client.in_flight_request_count(),
                                     lambda: self.time.milliseconds() - self.metadata.last_successful_update())

    # ------------------------------------------------------------------------------------- run loop

    def run(self) -> None:
        log.debug("%sStarting Kafka producer I/O thread.", self.log_context)
        while self.running:
            self._run_once_logged()
        log.debug("%sBeginning shutdown of Kafka producer I/O thread, sending remaining records.",
                  self.log_context)
        # No more appends; but records may still sit in the accumulator or wait for acknowledgement.
        while not self.force_closed and (self.accumulator.has_undrained() or self.client.in_flight_request_count() > 0
                                         or self._has_pending_transactional_requests()):
            self._run_once_logged()
        if self.force_closed:
            if self.transaction_manager is not None:
                log.debug("%sAborting incomplete transactional requests due to forced shutdown", self.log_context)
                self.transaction_manager.close()
            log.debug("%sAborting incomplete batches due to forced shutdown", self.log_context)
            self.accumulator.abort_incomplete_batches()
        try:
            self.client.close()
        except Exception:
            log.error("%sFailed to close network client", self.log_context, exc_info=True)
        log.debug("%sShutdown of Kafka producer I/O thread has completed.", self.log_context)

    def _run_once_logged(self) -> None:
        try:
            self.run_once()
        except Exception:
            log.error("%sUncaught error in kafka producer I/O thread: ", self.log_context, exc_info=True)

    def _has_pending_transactional_requests(self) -> bool:
        tm = self.transaction_manager
        return tm is not None and tm.has_pending_requests() and not tm.has_fatal_error()

    def run_once(self) -> None:
        """One iteration: idempotence bookkeeping, build produce requests, network I/O."""
        tm = self.transaction_manager
        if tm is not None:
            tm.maybe_resolve_sequences()
            if tm.has_fatal_error():
                if tm.last_error is not None:
                    self._maybe_abort_batches(tm.last_error)
                self.client.poll(self.retry_backoff_ms, self.time.milliseconds())
                return
            tm.bump_idempotent_epoch_and_reset_id_if_needed()
            if self._maybe_send_and_poll_transactional_request():
                return
        now = self.time.milliseconds()
        poll_timeout = self.send_producer_data(now)
        self.client.poll(poll_timeout, now)

    def _maybe_abort_batches(self, exception: BaseException) -> None:
        if self.accumulator.has_incomplete():
            log.error("%sAborting producer batches due to fatal error", self.log_context, exc_info=exception)
            self.accumulator.abort_batches(exception)

    def _maybe_send_and_poll_transactional_request(self) -> bool:
        tm = self.transaction_manager
        assert tm is not None
        client = self.client
        if tm.unsupported:  # the broker has no InitProducerId and idempotence was only a default
            self.transaction_manager = self.accumulator.transaction_manager = None
            return False
        if tm.has_in_flight_request():
            client.poll(self.retry_backoff_ms, self.time.milliseconds())
            return True
        if (tm.has_abortable_error() or tm.is_aborting()) and self.accumulator.has_incomplete():
            # The transaction will be aborted: what is not sent yet never will be (Kafka's Sender does the same).
            self.accumulator.abort_undrained_batches(tm.last_error or TransactionAbortedError(
                "Failing batch since transaction was aborted"))
        handler = tm.next_request(self.accumulator.has_incomplete())
        if handler is None:
            return False
        now = self.time.milliseconds()
        if handler.is_retry:
            if now < handler.retry_after_ms:  # Kafka sleeps retry.backoff.ms; we poll instead
                tm.retry(handler)
                client.poll(handler.retry_after_ms - now, now)
                return True
        if handler.coordinator_type is not None:
            node = tm.coordinator(handler.coordinator_type, handler.coordinator_key)
            if node is None:
                tm.lookup_coordinator(handler)
                return True
        else:
            node = client.least_loaded_node(now)
        if node is None or not client.ready(node, now):
            if node is not None and handler.coordinator_type is not None and client.connection_failed(node):
                tm.forget_coordinator(handler.coordinator_type, handler.coordinator_key)
            tm.retry(handler)
            client.poll(self.retry_backoff_ms, now)
            return True
        request = client.new_client_request(node.node_id, handler.request, now, True, self.request_timeout_ms,
                                            handler.on_complete, max_version=handler.max_version)
        log.debug("%sSending transactional request %s to node %s with correlation ID %d", self.log_context,
                  handler.request, node, request.correlation_id)
        client.send(request, now)
        tm.set_in_flight_correlation_id(request.correlation_id)
        client.poll(self.retry_backoff_ms, self.time.milliseconds())
        return True

    # ------------------------------------------------------------------------------ produce data

    def send_producer_data(self, now: int) -> int:
        """Build and send produce requests; returns how long the next poll may block."""
        cluster = self.metadata.fetch()
        accumulator = self.accumulator
        result = accumulator.ready(cluster, now)
        if result.unknown_leader_topics:
            # Leader election pending or topic expired: make sure the topic is in the next metadata request.
            for topic in result.unknown_leader_topics:
                self.metadata.add(topic, now)
            log.debug("%sRequesting metadata update due to unknown leader topics from the batched records: %s",
                      self.log_context, result.unknown_leader_topics)
            self.metadata.request_update()
        ready_nodes = set(result.ready_nodes)
        not_ready_timeout = LONG_MAX
        for node in result.ready_nodes:
            if not self.client.ready(node, now):
                ready_nodes.discard(node)
                not_ready_timeout = min(not_ready_timeout, self.client.poll_delay_ms(node, now))
        batches = accumulator.drain(cluster, ready_nodes, self.max_request_size, now)
        self._add_to_inflight_batches(batches)
        if self.guarantee_message_order:
            for batch_list in batches.values():
                for batch in batch_list:
                    accumulator.mute_partition(batch.topic_partition)
        accumulator.reset_next_batch_expiry_time()
        expired = self._get_expired_inflight_batches(now)
        expired.extend(accumulator.expired_batches(now))
        for batch in expired:
            message = (f"Expiring {batch.record_count} record(s) for {batch.topic_partition}:"
                       f"{now - batch.created_ms} ms has passed since batch creation")
            self._fail_batch(batch, KafkaTimeoutError(message), None, False)
            if self.transaction_manager is not None and batch.in_retry():
                # Its earlier attempt may have been written: resolve the sequence before sending more.
                self.transaction_manager.mark_sequence_unresolved(batch)
        poll_timeout = min(result.next_ready_check_delay_ms, not_ready_timeout,
                           accumulator.next_expiry_time_ms() - now)
        poll_timeout = max(poll_timeout, 0)
        if ready_nodes:
            # Data ready for a ready node: loop again at once. (If idempotence bookkeeping held every
            # batch back, wait for a response instead of spinning.)
            poll_timeout = 0 if any(batches.values()) else min(poll_timeout, self.retry_backoff_ms)
        self._send_produce_requests(batches, now)
        return poll_timeout

    def _add_to_inflight_batches(self, batches: dict[int, list[ProducerBatch]]) -> None:
        in_flight = self.in_flight_batches
        for batch_list in batches.values():
            for batch in batch_list:
                tp = batch.topic_partition
                lst = in_flight.get(tp)
                if lst is None:
                    in_flight[tp] = [batch]
                else:
                    lst.append(batch)

    def _maybe_remove_from_inflight_batches(self, batch: ProducerBatch) -> None:
        lst = self.in_flight_batches.get(batch.topic_partition)
        if lst is not None:
            try:
                lst.remove(batch)
            except ValueError:
                pass
            if not lst:
                del self.in_flight_batches[batch.topic_partition]

    def _maybe_remove_and_deallocate_batch(self, batch: ProducerBatch) -> None:
        self._maybe_remove_from_inflight_batches(batch)
        self.accumulator.deallocate(batch)

    def _get_expired_inflight_batches(self, now: int) -> list[ProducerBatch]:
        expired: list[ProducerBatch] = []
        delivery_timeout_ms = self.accumulator.delivery_timeout_ms
        update_expiry = self.accumulator.maybe_update_next_batch_expiry_time
        for tp in list(self.in_flight_batches):
            lst = self.in_flight_batches[tp]
            while lst:
                batch = lst[0]
                if batch.has_reached_delivery_timeout(delivery_timeout_ms, now):
                    lst.pop(0)
                    if batch.is_done():
                        raise KafkaError(f"{tp} batch created at {batch.created_ms} gets unexpected final state "
                                         f"{batch.final_state}")
                    expired.append(batch)
                else:
                    update_expiry(batch)
                    break
            if not lst:
                del self.in_flight_batches[tp]
        return expired

    def _send_produce_requests(self, collated: dict[int, list[ProducerBatch]], now: int) -> None:
        for node_id, batches in collated.items():
            if batches:
                self._send_produce_request(now, node_id, batches)

    def _send_produce_request(self, now: int, destination: int, batches: list[ProducerBatch]) -> None:
        """One ProduceRequest to ``destination`` with every drained batch, grouped by topic."""
        by_partition: dict[TopicPartition, ProducerBatch] = {}
        topic_data: dict[str, Any] = {}
        records = 0
        record_batch_sent = self.sensors.record_batch_sent
        for batch in batches:
            tp = batch.topic_partition
            data = topic_data.get(tp.topic)
            if data is None:
                data = topic_data[tp.topic] = _TopicData(name=tp.topic, partition_data=[])
            batch_records = batch.records()
            data.partition_data.append(_PartitionData(index=tp.partition, records=batch_records))
            by_partition[tp] = batch
            records += batch.record_count
            builder = batch.records_builder
            # record-size: as Kafka's estimate, the size of a batch holding the largest record alone
            record_batch_sent(tp.topic, batch.record_count, len(batch_records), batch.queue_time_ms(),
                              builder.compression_ratio if batch.compression_type else None, now,
                              builder.max_record_size + RECORD_BATCH_OVERHEAD)
        tm = self.transaction_manager
        request = ProduceRequest(transactional_id=tm.transactional_id if tm is not None and tm.is_transactional()
                                 else None, acks=self.acks, timeout_ms=self.request_timeout_ms,
                                 topic_data=list(topic_data.values()))
        self.sensors.records_per_request.record(records, now)

        def callback(response: ClientResponse) -> None:
            self._handle_produce_response(response, by_partition, self.time.milliseconds())

        client_request = self.client.new_client_request(destination, request, now, self.acks != 0,
                                                        self.request_timeout_ms, callback,
                                                        min_version=PRODUCE_MIN_VERSION)
        self.client.send(client_request, now)
        for batch in batches:
            batch.in_flight = True  # its buffer is not reused before the response (request_completed)
            batch.sent_to = destination
        log.debug("%sSent produce request to %s: %s", self.log_context, destination, client_request)

    # ------------------------------------------------------------------------------ responses

    def _handle_produce_response(self, response: ClientResponse, batches: dict[TopicPartition, ProducerBatch],
                                 now: int) -> None:
        correlation_id = response.request_header.correlation_id
        request_completed = self.accumulator.request_completed
        for batch in batches.values():
            request_completed(batch)  # the request no longer reads the batch's buffer
        if response.timed_out or response.disconnected:
            reason = (f"Disconnected from node {response.destination} due to timeout" if response.timed_out
                      else f"Disconnected from node {response.destination}")
            code = ErrorCode.REQUEST_TIMED_OUT if response.timed_out else ErrorCode.NETWORK_EXCEPTION
            log.debug("%sCancelled request with header %s due to node %s being disconnected", self.log_context,
                      response.request_header, response.destination)
            for batch in batches.values():
                self._complete_batch_or_fail(batch, _PartitionResponse(error_code=code, error_message=reason,
                                                                       base_offset=-1), correlation_id, now)
        elif response.version_mismatch is not None:
            log.warning("%sCancelled request %s due to a version mismatch with node %s", self.log_context,
                        response.request_header, response.destination)
            for batch in batches.values():
                self._complete_batch_or_fail(batch, _PartitionResponse(error_code=ErrorCode.UNSUPPORTED_VERSION,
                                                                       base_offset=-1), correlation_id, now)
        elif response.has_response():
            body = response.response_body
            for topic in body.responses:
                for p in topic.partition_responses:
                    batch = batches.get(TopicPartition(topic.name, p.index))
                    if batch is not None:
                        self._complete_batch_or_fail(batch, p, correlation_id, now)
            self.sensors.request_time.record(response.request_latency_ms, now)
            self.sensors.throttle_time.record(body.throttle_time_ms, now)
        else:  # acks=0: complete on send
            for batch in batches.values():
                self._complete_batch_or_fail(batch, _PartitionResponse(error_code=ErrorCode.NONE, base_offset=-1),
                                             correlation_id, now)

    def _complete_batch_or_fail(self, batch: ProducerBatch, response: Any, correlation_id: int, now: int) -> None:
        """:meth:`_complete_batch`, and should it raise (a bug, or state it did not expect), the batch fails now
        with that error instead of staying in flight until delivery.timeout.ms -- and the other batches of the
        same response are still completed."""
        try:
            self._complete_batch(batch, response, correlation_id, now)
        except Exception as e:
            log.error("%sUncaught error handling the produce response (correlation id %d) for %s; failing its batch",
                      self.log_context, correlation_id, batch.topic_partition, exc_info=True)
            self.accumulator.discard_queued(batch)  # in case it was put back for a retry before the error
            if not batch.is_done():
                self._fail_batch(batch, KafkaError(f"Unexpected error handling the produce response for "
                                                   f"{batch.topic_partition}: {type(e).__name__}: {e}"), None, False)
            self._maybe_remove_from_inflight_batches(batch)
            if self.guarantee_message_order:
                self.accumulator.unmute_partition(batch.topic_partition)

    def _complete_batch(self, batch: ProducerBatch, response: Any, correlation_id: int, now: int) -> None:
        error = response.error_code
        tm = self.transaction_manager
        if error == ErrorCode.MESSAGE_TOO_LARGE and batch.record_count > 1 and not batch.is_done():
            # Split and resend; the attempts are not counted against retries.
            log.warning("%sGot error produce response in correlation id %d on topic-partition %s, splitting and "
                        "retrying (%d attempts left). Error: %s", self.log_context, correlation_id,
                        batch.topic_partition, self.retries - batch.attempts, error_class(error).name)
            if tm is not None:
                tm.remove_in_flight_batch(batch)
            self.accumulator.split_and_reenqueue(batch)
            self._maybe_remove_and_deallocate_batch(batch)
            self.sensors.batch_split.record(1, now)
        elif error != ErrorCode.NONE:
            if self._can_retry(batch, response, now):
                log.warning("%sGot error produce response with correlation id %d on topic-partition %s, retrying "
                            "(%d attempts left). Error: %s", self.log_context, correlation_id,
                            batch.topic_partition, self.retries - batch.attempts - 1, error_class(error).name)
                self._reenqueue_batch(batch, now)
            elif error == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                # The broker has it but no longer knows its offset: success without an offset.
                self._complete_batch_success(batch, response)
            else:
                # Out of retries: we cannot know whether the broker wrote it, so the sequence is only
                # adjusted (epoch bump) if retries were not exhausted.
                self._fail_batch(batch, self._exception_for(batch, response), response,
                                 batch.attempts < self.retries)
            cls = error_class(error)
            if cls.invalid_metadata:
                if error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    log.warning("%sReceived unknown topic or partition error in produce request on partition %s. "
                                "The topic-partition may not exist or the user may not have Describe access to "
                                "it", self.log_context, batch.topic_partition)
                else:
                    log.warning("%sReceived invalid metadata error in produce request on partition %s due to %s. "
                                "Going to request metadata update now", self.log_context, batch.topic_partition,
                                cls.name)
                self.metadata.request_update()
        else:
            self._complete_batch_success(batch, response)
        if self.guarantee_message_order:
            self.accumulator.unmute_partition(batch.topic_partition)

    def _can_retry(self, batch: ProducerBatch, response: Any, now: int) -> bool:
        if batch.has_reached_delivery_timeout(self.accumulator.delivery_timeout_ms, now):
            return False
        if batch.attempts >= self.retries or batch.is_done():
            return False
        tm = self.transaction_manager
        if tm is None:
            return error_class(response.error_code).retriable
        return tm.can_retry(response.error_code, response.log_start_offset, batch)

    def _reenqueue_batch(self, batch: ProducerBatch, now: int) -> None:
        self.accumulator.reenqueue(batch, now)
        self._maybe_remove_from_inflight_batches(batch)
        self.sensors.record_retries(batch.topic_partition.topic, batch.record_count, now)

    def _complete_batch_success(self, batch: ProducerBatch, response: Any) -> None:
        if self.transaction_manager is not None:
            self.transaction_manager.handle_completed_batch(batch, response.base_offset)
        if batch.complete(response.base_offset, response.log_append_time_ms):
            self._maybe_remove_and_deallocate_batch(batch)

    @staticmethod
    def _exception_for(batch: ProducerBatch, response: Any) -> BaseException:
        if response.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            return TopicAuthorizationFailedError(f"Not authorized to access topics: [{batch.topic_partition.topic}]")
        if response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
            return ClusterAuthorizationFailedError("The producer is not authorized to do idempotent sends")
        return for_code(response.error_code, response.error_message)

    def _fail_batch(self, batch: ProducerBatch, top_level: BaseException, response: Any,
                    adjust_sequence_numbers: bool) -> None:
        record_errors = getattr(response, "record_errors", None) if response is not None else None
        record_exceptions = None
        if record_errors:
            mapping: dict[int, BaseException] = {}
            for record_error in record_errors:
                message = (record_error.batch_index_error_message or response.error_message
                           or error_class(response.error_code).description)
                mapping[record_error.batch_index] = (for_code(response.error_code, message) if len(record_errors) == 1
                                                     else InvalidRecordError(message))
            generic = KafkaError("Failed to append record because it was part of a batch which had one more more "
                                 "invalid records")

            def record_exceptions(index: int) -> BaseException:
                return mapping.get(index, generic)

        self.sensors.record_errors(batch.topic_partition.topic, batch.record_count)
        if batch.complete_exceptionally(top_level, record_exceptions):
            if self.transaction_manager is not None:
                try:
                    self.transaction_manager.handle_failed_batch(batch, top_level, adjust_sequence_numbers)
                except Exception:
                    log.debug("%sEncountered error when transaction manager was handling a failed batch",
                              self.log_context, exc_info=True)
            self._maybe_remove_and_deallocate_batch(batch)

    # ------------------------------------------------------------------------------ control

    def wakeup(self) -> None:
        """Interrupt a blocking poll (thread-safe)."""
        self.client.wakeup()

    def is_running(self) -> bool:
        return self.running

    def initiate_close(self) -> None:
        """Graceful close: no more appends; the loop ends once everything is sent and acknowledged."""
        self.accumulator.close()  # first, so no append slips in after the loop ends
        self.running = False
        self.wakeup()

    def force_close(self) -> None:
        """Close now: incomplete batches are aborted."""
        self.force_closed = True
        self.initiate_close()
