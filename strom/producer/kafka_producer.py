"""The producer: ``KafkaProducer(config).send(ProducerRecord(...))``.

Kafka counterpart: ``org.apache.kafka.clients.producer.KafkaProducer`` (3.x; SPEC §2, §4.6, §8.3). The
constructor builds serializers, partitioner, interceptors, ``BufferPool`` + ``RecordAccumulator``,
``ProducerMetadata`` (seeded with ``bootstrap.servers`` — no network I/O), a ``NetworkClient`` and the
``Sender``, and starts the daemon I/O thread ``kafka-producer-network-thread | <client.id>``; any failure closes
what was built and raises ``KafkaError("Failed to construct kafka producer")``. ``send`` runs, on the caller's
thread: interceptors → wait for the topic's metadata (``max.block.ms``) → serialize → partition → size checks →
``accumulator.append`` (the sticky partitioner switches partition when a new batch would be needed) → wake the
Sender when a batch is full or new. As in Kafka, API errors (timeouts, record too large, invalid topic — broker
error classes and :class:`KafkaTimeoutError`) are not raised: they go to the callback and the returned future;
other errors (serialization, closed producer) are raised. The test hooks of Kafka's constructor are keyword
arguments: ``time``, ``client`` (e.g. :class:`strom.testing.mock_client.MockClient`), ``metadata``,
``interceptors``.

Thread-safety: thread-safe; ``send``/``flush``/``partitions_for``/``metrics`` may be called from many threads.
Callbacks run on the I/O thread: keep them short, and do not call ``close`` with a timeout from one.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from strom.common.error_codes import InvalidTopicExceptionError, MessageTooLargeError
from strom.common.errors import BrokerResponseError, IllegalStateError, KafkaError, KafkaTimeoutError
from strom.common.serialization import ByteArraySerializer, SerializationError, make_serializer
from strom.common.structs import TopicPartition
from strom.common.time import SYSTEM_TIME, Time
from strom.config.common_client_configs import parse_bootstrap_servers
from strom.metrics import KafkaMetric, MetricName, Metrics, Sensor
from strom.metrics.client_metrics import new_client_metrics
from strom.network.api_versions import ApiVersions
from strom.network.channel_builder import ClientChannelBuilder
from strom.network.cluster import Cluster, PartitionInfo
from strom.network.kafka_client import KafkaClient
from strom.network.network_client import NetworkClient
from strom.network.selector import Selector
from strom.network.telemetry_sender import ClientTelemetrySender
from strom.producer.config import ENABLE_IDEMPOTENCE_CONFIG, ProducerConfig
from strom.producer.interceptors import InterceptorCallback, ProducerInterceptors, make_interceptors
from strom.producer.internals.buffer_pool import BufferPool
from strom.producer.internals.future_record_metadata import FutureRecordMetadata, ProduceRequestResult
from strom.producer.internals.producer_metadata import ProducerMetadata
from strom.producer.internals.record_accumulator import RecordAccumulator
from strom.producer.internals.sender import Sender
from strom.producer.internals.sender_metrics import ProducerMetrics
from strom.producer.internals.transaction_manager import TransactionalRequestResult, TransactionManager
from strom.producer.partitioner import make_partitioner
from strom.producer.record import ProducerRecord, checked_header
from strom.record.records import upper_bound_size
from strom.record.sizes import EncodedHeaders, encode_headers, encode_plain_headers

__all__ = ["KafkaProducer", "RecordTooLargeError", "NETWORK_THREAD_PREFIX"]

log = logging.getLogger(__name__)

NETWORK_THREAD_PREFIX = "kafka-producer-network-thread"
RecordTooLargeError = MessageTooLargeError
"""Kafka's ``RecordTooLargeException`` (error code 10, MESSAGE_TOO_LARGE)."""
_ApiErrors = (BrokerResponseError, KafkaTimeoutError)  # Kafka's ApiException family
_RAW_TYPES = {bytes, type(None)}
# Plain (str, bytes | None) header pairs straight to the C encoder when it is built (None: another shape).
_encode_plain_headers = encode_plain_headers or (lambda headers: None)


def _natural_or_none(value: Any) -> bool:
    return value is None or (type(value) is int and value >= 0)


def _serialize(serializer: Any, what: str, topic: str, data: Any, headers: Any) -> bytes | None:
    """``serializer.serialize``, a type mismatch reported as Kafka's SerializationException."""
    try:
        return serializer.serialize(topic, data, headers)  # type: ignore[no-any-return]
    except TypeError as e:
        raise SerializationError(f"Can't convert {what} of class {type(data).__name__} to class "
                                 f"{type(serializer).__name__} specified in {what}.serializer") from e


def _failed_future(exception: BaseException, tp: TopicPartition) -> FutureRecordMetadata:
    """Kafka's ``FutureFailure``: an already failed future."""
    result = ProduceRequestResult(tp)
    result.set(-1, -1, lambda _i: exception)
    result.done()
    return FutureRecordMetadata(result, 0, -1, -1, -1)


def _bulk_columns(values: Any, keys: Any) -> tuple[Any, Any]:
    """``send_many``'s inputs as sequences: pyarrow tables, record batches and arrays become lists (string
    columns as UTF-8 bytes)."""
    if hasattr(values, "column_names") and hasattr(values, "column"):  # pyarrow Table / RecordBatch
        if keys is not None:
            raise ValueError("send_many: pass keys as the table's 'key' column, not as keys=")
        names = list(values.column_names)
        if "value" not in names:
            raise ValueError(f"send_many: the table has no 'value' column (columns: {names})")
        keys = values.column("key") if "key" in names else None
        values = values.column("value")
    return _arrow_to_list(values), _arrow_to_list(keys)


def _arrow_to_list(column: Any) -> Any:
    if column is None or isinstance(column, list):
        return column
    if hasattr(column, "to_pylist") and hasattr(column, "type"):  # pyarrow Array / ChunkedArray
        import pyarrow as pa

        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            column = column.cast(pa.large_binary() if pa.types.is_large_string(column.type) else pa.binary())
        return column.to_pylist()
    return list(column)


class KafkaProducer:
    """Kafka's ``KafkaProducer``. Thread-safe. Use as a context manager to ``close()`` on exit."""

    def __init__(self, config: Mapping[str, Any] | ProducerConfig | None = None, *, key_serializer: Any = None,
                 value_serializer: Any = None, time: Time | None = None, client: KafkaClient | None = None,
                 metadata: ProducerMetadata | None = None, interceptors: ProducerInterceptors | None = None,
                 **kwargs: Any) -> None:
        self._sender: Sender | None = None
        self._io_thread: threading.Thread | None = None
        self._client: KafkaClient | None = None
        # Configuration errors are raised as they are (Kafka builds ProducerConfig before its try block).
        if isinstance(config, ProducerConfig) and not kwargs and key_serializer is None and value_serializer is None:
            cfg = config
        else:
            base = dict(config.originals) if isinstance(config, ProducerConfig) else dict(config or {})
            cfg = ProducerConfig(base, key_serializer=key_serializer, value_serializer=value_serializer, **kwargs)
        try:
            self._init(cfg, time, client, metadata, interceptors)
        except Exception as e:
            self._close(0.0, swallow=True)
            raise KafkaError("Failed to construct kafka producer") from e

    def _init(self, cfg: ProducerConfig, time: Time | None, client: KafkaClient | None,
              metadata: ProducerMetadata | None, interceptors: ProducerInterceptors | None) -> None:
        self.config = cfg
        values = cfg.values
        self._time = time = time or SYSTEM_TIME
        self.client_id: str = values["client.id"]
        self._log_context = log_context = f"[Producer clientId={self.client_id}] "
        configs = dict(values)
        self._metrics: Metrics = new_client_metrics(values, self.client_id, time, "producer")
        self._partitioner = make_partitioner(values["partitioner.class"], configs)
        self._key_serializer = make_serializer(values["key.serializer"], True, configs)
        self._value_serializer = make_serializer(values["value.serializer"], False, configs)
        self._interceptors = interceptors if interceptors is not None else make_interceptors(
            values["interceptor.classes"], configs)
        # Checked on every send: a plain attribute (ProducerInterceptors' __bool__ is a Python call), and whether
        # the serializers are the pass-through ones (bytes and None are then used as they are, without a call).
        self._intercepting = bool(self._interceptors)
        self._raw_key = type(self._key_serializer) is ByteArraySerializer
        self._raw_value = type(self._value_serializer) is ByteArraySerializer
        self._max_request_size: int = values["max.request.size"]
        self._total_memory_size: int = values["buffer.memory"]
        self._compression = cfg.compression_type
        self._max_block_time_ms: int = values["max.block.ms"]
        self._record_size_limit = min(self._max_request_size, self._total_memory_size)
        self._tp_cache: dict[tuple[str, int], TopicPartition] = {}
        self._api_versions = ApiVersions()
        self._transaction_manager = None
        if cfg.idempotence_enabled:
            self._transaction_manager = TransactionManager(
                log_context, cfg.transactional_id, values["transaction.timeout.ms"], values["retry.backoff.ms"],
                allow_unsupported_fallback=ENABLE_IDEMPOTENCE_CONFIG not in cfg.originals, time=time)
        level = {"gzip": values["compression.gzip.level"], "lz4": values["compression.lz4.level"],
                 "zstd": values["compression.zstd.level"]}.get(values["compression.type"])
        self._producer_metrics = ProducerMetrics(self._metrics, lambda: self._buffer_pool.metric_values())
        self._buffer_pool = BufferPool(self._total_memory_size, values["batch.size"], self._producer_metrics, time)
        self._accumulator = RecordAccumulator(
            values["batch.size"], self._compression, cfg.linger_ms, values["retry.backoff.ms"],
            values["delivery.timeout.ms"], self._buffer_pool, time, transaction_manager=self._transaction_manager,
            compression_level=None if level == -1 else level, log_context=log_context)
        addresses = parse_bootstrap_servers(values["bootstrap.servers"])
        self._metadata = metadata or ProducerMetadata(values["retry.backoff.ms"], values["metadata.max.age.ms"],
                                                      values["metadata.max.idle.ms"], time, log_context=log_context)
        self._metadata.bootstrap(addresses, recovery_strategy=values["metadata.recovery.strategy"])
        self._metadata_wait = self._producer_metrics.metadata_wait
        self._flush_time = self._producer_metrics.flush_time
        self._client = client or self._new_network_client(values, time, log_context)
        max_in_flight = values["max.in.flight.requests.per.connection"]
        self._sender = Sender(self._client, self._metadata, self._accumulator, max_in_flight == 1,
                              self._max_request_size, values["acks"], values["retries"], self._metrics, time,
                              values["request.timeout.ms"], values["retry.backoff.ms"], self._transaction_manager,
                              log_context=log_context)
        self._errors = self._sender.sensors.errors
        name = f"{NETWORK_THREAD_PREFIX} | {self.client_id}" if self.client_id else NETWORK_THREAD_PREFIX
        self._io_thread = threading.Thread(target=self._sender.run, name=name, daemon=True)
        self._io_thread.start()
        log.info("%sKafka producer started", log_context)

    def _new_network_client(self, values: Mapping[str, Any], time: Time, log_context: str) -> NetworkClient:
        selector = Selector(values["connections.max.idle.ms"], time, log_context=log_context, metrics=self._metrics,
                            metric_grp_prefix="producer", channel_builder=ClientChannelBuilder.from_config(values))
        return NetworkClient(
            selector, self._metadata, self.client_id, values["max.in.flight.requests.per.connection"],
            values["reconnect.backoff.ms"], values["reconnect.backoff.max.ms"], values["send.buffer.bytes"],
            values["receive.buffer.bytes"], values["request.timeout.ms"],
            values["socket.connection.setup.timeout.ms"], values["socket.connection.setup.timeout.max.ms"], time,
            True, self._api_versions, log_context=log_context,
            telemetry=ClientTelemetrySender(self._metrics, time) if values["enable.metrics.push"] else None)

    # ------------------------------------------------------------------------------------------ send

    def send(self, record: ProducerRecord | str, callback: Any = None, *, value: Any = None, key: Any = None,
             partition: int | None = None, timestamp: int | None = None, headers: Any = None) -> FutureRecordMetadata:
        """Send a record asynchronously; returns its future. ``callback(metadata, exception)`` runs on the
        I/O thread when the record is acknowledged or fails (exactly one argument is not ``None``).

        ``record`` is a :class:`ProducerRecord`, or a topic name with the record's fields as keywords (or the
        value as the second positional argument: ``send("topic", b"value")``).
        """
        interceptors = self._interceptors
        if type(record) is str:
            if callback is not None and not callable(callback):
                value, callback = callback, None
            if (not self._intercepting and record
                    and (partition is None or (type(partition) is int and partition >= 0))
                    and (timestamp is None or (type(timestamp) is int and timestamp >= 0))):
                # Fast path: no interceptor needs a ProducerRecord and the fields are valid as given; headers as
                # a list or tuple of pairs go straight to the batch when no serializer needs to see them.
                if headers is None:
                    return self._do_send(record, partition, key, value, None, timestamp, callback, None)
                if self._raw_key and self._raw_value and type(headers) in (list, tuple):
                    return self._do_send(record, partition, key, value, None, timestamp, callback, None,
                                         _encode_plain_headers(headers) or encode_headers(headers, checked_header)
                                         if headers else None)
            record = ProducerRecord(record, value, key, partition, timestamp, headers)
        elif not isinstance(record, ProducerRecord):
            raise TypeError(f"send() takes a ProducerRecord or a topic name, not {type(record).__name__}")
        if interceptors:
            record = interceptors.on_send(record)
        return self._do_send(record.topic, record.partition, record.key, record.value, record.headers,
                             record.timestamp, callback, record)

    def _do_send(self, topic: str, partition: int | None, key: Any, value: Any, headers: Any, timestamp: int | None,
                 callback: Any, record: ProducerRecord | None,
                 encoded_headers: EncodedHeaders | None = None) -> FutureRecordMetadata:
        """Kafka's ``doSend`` (SPEC §2.4). ``record`` is ``None`` on the fast path (no interceptors), which may
        give the headers already checked and encoded (``headers`` is then ``None``)."""
        tp: TopicPartition | None = None
        interceptors = self._interceptors
        try:
            sender = self._sender
            if sender is None or not sender.running:
                raise IllegalStateError("Cannot perform operation after producer has been closed")
            tm = self._transaction_manager
            if tm is not None and tm.is_transactional():
                tm.fail_if_not_ready_for_send()
            now = self._time.milliseconds()
            try:
                cluster, waited_ms = self._wait_on_metadata(topic, partition, now, self._max_block_time_ms)
            except KafkaError as e:
                if self._metadata.is_closed():
                    raise KafkaError("Producer closed while send in progress") from e
                raise
            if waited_ms:
                now += waited_ms
            remaining_wait_ms = self._max_block_time_ms - waited_ms
            if self._raw_key and (key is None or type(key) is bytes):
                key_bytes = key
            else:
                key_bytes = _serialize(self._key_serializer, "key", topic, key, headers)
            if self._raw_value and (value is None or type(value) is bytes):
                value_bytes = value
            else:
                value_bytes = _serialize(self._value_serializer, "value", topic, value, headers)
            partitioner = self._partitioner
            explicit_partition = partition is not None
            if partition is None:
                partition = partitioner.partition(topic, key, key_bytes, value, value_bytes, cluster)
            tp = self._topic_partition(topic, partition)
            header_array: Any = encoded_headers or ()  # encoded once, for the size check and the batch
            if headers is not None:
                headers.set_read_only()
                if headers:
                    header_array = encode_headers(headers.to_array())
            size = (0 if key_bytes is None else len(key_bytes)) + (0 if value_bytes is None else len(value_bytes))
            if size + len(header_array) + 100 > self._record_size_limit:  # else surely within both limits
                self._ensure_valid_record_size(upper_bound_size(key_bytes, value_bytes, header_array,
                                                                self._compression))
            if timestamp is None:
                timestamp = now
            intercept_callback = InterceptorCallback(callback, interceptors, tp) if self._intercepting else callback
            accumulator = self._accumulator
            result = accumulator.append(tp, timestamp, key_bytes, value_bytes, header_array, intercept_callback,
                                        remaining_wait_ms, True, now)
            if result.abort_for_new_batch:
                # The sticky partitioner moves on before a new batch is created (Kafka 2.4+).
                on_new_batch = getattr(partitioner, "on_new_batch", None)
                if on_new_batch is not None:
                    on_new_batch(topic, cluster, partition)
                if not explicit_partition:
                    partition = partitioner.partition(topic, key, key_bytes, value, value_bytes, cluster)
                    tp = self._topic_partition(topic, partition)
                if self._intercepting:
                    intercept_callback = InterceptorCallback(callback, interceptors, tp)
                result = accumulator.append(tp, timestamp, key_bytes, value_bytes, header_array, intercept_callback,
                                            remaining_wait_ms, False, now)
            if tm is not None and tm.is_transactional():
                tm.maybe_add_partition(tp)
            if result.batch_is_full or result.new_batch_created:
                sender.wakeup()
            return result.future  # type: ignore[return-value]
        except _ApiErrors as e:
            # API errors go to the callback and the future, not to the caller.
            log.debug("%sException occurred during message send:", self._log_context, exc_info=True)
            if callback is not None:
                try:
                    callback(None, e)
                except Exception:
                    log.error("%sError executing user-provided callback", self._log_context, exc_info=True)
            self._errors.record()
            if interceptors:
                interceptors.on_send_error(record, tp, e)
            return _failed_future(e, tp or TopicPartition(topic, partition if partition is not None else -1))
        except KafkaError as e:
            self._errors.record()
            if interceptors:
                interceptors.on_send_error(record, tp, e)
            raise
        except Exception as e:
            if interceptors:
                interceptors.on_send_error(record, tp, e)
            raise

    def send_many(self, topic: str, values: Any, keys: Any = None, *, partition: int | None = None,
                  timestamp: int | None = None, callback: Any = None) -> list[FutureRecordMetadata]:
        """Send many records to ``topic`` at once (the bulk path); returns one future per batch segment.

        ``values`` is a sequence of values (``None`` = a tombstone), a pyarrow ``Array``/``ChunkedArray`` of
        binary or string values, or a pyarrow ``Table``/``RecordBatch`` with a ``value`` column and an optional
        ``key`` column (then ``keys`` must be ``None``); ``keys`` is a sequence (or pyarrow array) of the same
        length. Every record gets ``timestamp`` (default: now) and no headers.

        Records are appended to the accumulator as whole runs: the rest of a partition's open batch, then new
        batches of ``batch.size``, each encoded in one pass instead of one record at a time. Per partition the
        records keep their order, after any record sent before the call. Partitioning: ``partition`` if given;
        else, with keys, the partitioner per record; without keys the sticky partition, moving on (as ``send``
        does) whenever a batch fills up. Serializers are applied per value as ``send`` applies them; idempotence
        and transactions work as for ``send`` (sequence numbers are assigned per batch when it is drained).
        With interceptors configured, each record goes through :meth:`send` instead (interceptors see
        ``ProducerRecord`` s) and the list holds one future per record.

        The returned futures stand for segments: each completes with the :class:`RecordMetadata` of the last
        record of its segment (a batch succeeds or fails as a whole, so that outcome is every record's of the
        segment), and ``callback(metadata, exception)`` runs once per segment. ``flush()`` waits for all.
        Errors are reported as by ``send``: invalid topic, metadata timeout and a record larger than
        ``max.request.size`` fail the call before anything is appended (one failed future, ``callback``
        called); a buffer-allocation timeout (``max.block.ms``) leaves the records appended so far queued and
        adds a failed future for the rest; serialization errors and a closed producer raise.
        """
        values, keys = _bulk_columns(values, keys)
        n = len(values)
        if keys is not None and len(keys) != n:
            raise ValueError(f"send_many: {len(keys)} keys for {n} values")
        if not _natural_or_none(partition) or not _natural_or_none(timestamp):
            raise ValueError("send_many: partition and timestamp must be non-negative ints or None")
        if n == 0:
            return []
        if self._interceptors:
            return [self.send(topic, callback, value=values[i], key=keys[i] if keys is not None else None,
                              partition=partition, timestamp=timestamp) for i in range(n)]
        sender = self._sender
        if sender is None or not sender.running:
            raise IllegalStateError("Cannot perform operation after producer has been closed")
        tm = self._transaction_manager
        if tm is not None and tm.is_transactional():
            tm.fail_if_not_ready_for_send()
        now = self._time.milliseconds()
        try:
            try:
                cluster, waited_ms = self._wait_on_metadata(topic, partition, now, self._max_block_time_ms)
            except KafkaError as e:
                if self._metadata.is_closed():
                    raise KafkaError("Producer closed while send in progress") from e
                raise
            now += waited_ms
            remaining_wait_ms = self._max_block_time_ms - waited_ms
            key_bytes = self._serialize_all(topic, keys, self._key_serializer, "key") if keys is not None else None
            if key_bytes is not None and key_bytes.count(None) == n:
                key_bytes = None  # all null: partitioned (and encoded) as key-less records
            value_bytes = self._serialize_all(topic, values, self._value_serializer, "value")
            longest = max(map(len, filter(None, value_bytes)), default=0)
            if key_bytes is not None:
                longest += max(map(len, filter(None, key_bytes)), default=0)
            if longest + 100 > self._record_size_limit:  # else every record is surely within both limits
                for i in range(n):
                    self._ensure_valid_record_size(upper_bound_size(
                        key_bytes[i] if key_bytes is not None else None, value_bytes[i], (), self._compression))
        except _ApiErrors as e:
            self._errors.record()
            if callback is not None:
                try:
                    callback(None, e)
                except Exception:
                    log.error("%sError executing user-provided callback", self._log_context, exc_info=True)
            return [_failed_future(e, TopicPartition(topic, partition if partition is not None else -1))]
        if timestamp is None:
            timestamp = now
        futures: list[FutureRecordMetadata] = []
        if partition is not None or (key_bytes is not None and not getattr(self._partitioner, "ignore_keys", False)):
            if partition is not None:
                groups = {partition: (key_bytes, value_bytes)}
            else:
                groups = self._group_by_partition(topic, keys, key_bytes, values, value_bytes, cluster)
            for part, (ks, vs) in groups.items():
                tp = self._topic_partition(topic, part)
                pos = 0
                while pos < len(vs):  # a batch at a time, so the sender is woken for each batch that fills up
                    consumed = self._append_many(tp, timestamp, ks, vs, pos, len(vs), callback, remaining_wait_ms,
                                                 now, 1, futures)
                    if consumed is None:
                        return futures
                    pos += consumed
            return futures
        # key-less (or keys ignored): the sticky partition, moving on when a batch fills up
        partitioner = self._partitioner
        pos = 0
        while pos < n:
            part = partitioner.partition(topic, None, None, None, None, cluster)
            tp = self._topic_partition(topic, part)
            result = self._append_many(tp, timestamp, key_bytes, value_bytes, pos, n, callback, remaining_wait_ms,
                                       now, 1, futures)
            if result is None:
                break
            pos += result
            if pos < n:
                on_new_batch = getattr(partitioner, "on_new_batch", None)
                if on_new_batch is not None:
                    on_new_batch(topic, cluster, part)
        return futures

    def _append_many(self, tp: TopicPartition, timestamp: int, keys: Any, values: Any, start: int, stop: int,
                     callback: Any, max_block_ms: int, now: int, max_new_batches: int | None,
                     futures: list[FutureRecordMetadata]) -> int | None:
        """One ``accumulator.append_many``; the records appended, or ``None`` after an API error (reported in
        ``futures`` and to ``callback``)."""
        tm = self._transaction_manager
        try:
            result = self._accumulator.append_many(tp, timestamp, keys, values, start, stop, callback, max_block_ms,
                                                   now, max_new_batches)
        except _ApiErrors as e:
            self._errors.record()
            if callback is not None:
                try:
                    callback(None, e)
                except Exception:
                    log.error("%sError executing user-provided callback", self._log_context, exc_info=True)
            futures.append(_failed_future(e, tp))
            return None
        finally:
            if tm is not None and tm.is_transactional():
                tm.maybe_add_partition(tp)
        futures.extend(result.futures)
        if result.batch_is_full or result.new_batches:
            self._sender.wakeup()  # type: ignore[union-attr]
        return result.consumed

    @staticmethod
    def _serialize_all(topic: str, items: Any, serializer: Any, what: str) -> list[bytes | None]:
        if type(serializer) is ByteArraySerializer:
            if set(map(type, items)) <= _RAW_TYPES:
                return items if type(items) is list else list(items)
        try:
            return [serializer.serialize(topic, x, None) for x in items]
        except TypeError as e:
            raise SerializationError(f"Can't convert a {what} to class {type(serializer).__name__} specified in "
                                     f"{what}.serializer") from e

    def _group_by_partition(self, topic: str, keys: Any, key_bytes: list[bytes | None], values: Any,
                            value_bytes: list[bytes | None], cluster: Cluster
                            ) -> dict[int, tuple[list[bytes | None], list[bytes | None]]]:
        """The records by the partitioner's choice, in order within each partition."""
        partition = self._partitioner.partition
        groups: dict[int, tuple[list[bytes | None], list[bytes | None]]] = {}
        for i in range(len(value_bytes)):
            kb, vb = key_bytes[i], value_bytes[i]
            part = partition(topic, keys[i], kb, values[i], vb, cluster)
            group = groups.get(part)
            if group is None:
                group = groups[part] = ([], [])
            group[0].append(kb)
            group[1].append(vb)
        return groups

    def _topic_partition(self, topic: str, partition: int) -> TopicPartition:
        """Shared TopicPartition instances (creating a frozen dataclass per record is costly)."""
        cache = self._tp_cache
        tp = cache.get((topic, partition))
        if tp is None:
            if len(cache) > 100_000:
                cache.clear()
            tp = cache[(topic, partition)] = TopicPartition(topic, partition)
        return tp

    def _ensure_valid_record_size(self, size: int) -> None:
        if size > self._max_request_size:
            raise RecordTooLargeError(
                f"The message is {size} bytes when serialized which is larger than {self._max_request_size}, "
                f"which is the value of the max.request.size configuration.")
        if size > self._total_memory_size:
            raise RecordTooLargeError(
                f"The message is {size} bytes when serialized which is larger than the total memory buffer you "
                f"have configured with the buffer.memory configuration.")

    def _wait_on_metadata(self, topic: str, partition: int | None, now_ms: int,
                          max_wait_ms: int) -> tuple[Cluster, int]:
        """Kafka's ``waitOnMetadata``: the cluster once ``topic`` (and ``partition``) is known, and the wait."""
        metadata = self._metadata
        cluster = metadata.fetch()
        if topic in cluster.invalid_topics:
            raise InvalidTopicExceptionError(f"Invalid topics: [{topic}]")
        metadata.add(topic, now_ms)
        partitions_count = cluster.partition_count_for_topic(topic)
        if partitions_count is not None and (partition is None or partition < partitions_count):
            return cluster, 0
        remaining_wait_ms = max_wait_ms
        elapsed = 0
        time = self._time
        start_ns = time.nanoseconds()
        while True:
            log.debug("%sRequesting metadata update for %s.", self._log_context,
                      f"partition {partition} of topic {topic}" if partition is not None else f"topic {topic}")
            metadata.add(topic, now_ms + elapsed)
            version = metadata.request_update_for_topic(topic)
            self._sender.wakeup()  # type: ignore[union-attr]
            try:
                metadata.await_update(version, remaining_wait_ms)
            except KafkaTimeoutError:
                raise KafkaTimeoutError(f"Topic {topic} not present in metadata after {max_wait_ms} ms.") from None
            cluster = metadata.fetch()
            elapsed = time.milliseconds() - now_ms
            if elapsed >= max_wait_ms:
                if partitions_count is None:
                    raise KafkaTimeoutError(f"Topic {topic} not present in metadata after {max_wait_ms} ms.")
                raise KafkaTimeoutError(
                    f"Partition {partition} of topic {topic} with partition count {partitions_count} is not present "
                    f"in metadata after {max_wait_ms} ms.")
            metadata.maybe_throw_exception_for_topic(topic)
            remaining_wait_ms = max_wait_ms - elapsed
            partitions_count = cluster.partition_count_for_topic(topic)
            if partitions_count is not None and (partition is None or partition < partitions_count):
                break
        self._metadata_wait.record(time.nanoseconds() - start_ns)
        return cluster, elapsed

    def _send_may_block(self, topic: str, partition: int | None) -> bool:
        """Whether a ``send`` to ``topic`` could wait now: for the topic's (or the partition's) metadata, or for
        buffer memory (less than a batch free). ``strom.aio`` sends on the event loop only when it cannot."""
        count = self._metadata.fetch().partition_count_for_topic(topic)
        if count is None or (partition is not None and partition >= count):
            return True
        return self._buffer_pool.may_block()

    # ----------------------------------------------------------------------------------- other API

    def flush(self, timeout: float | None = None) -> None:
        """Make every buffered record sendable now and wait (``timeout`` seconds, ``None`` = forever) until
        all records sent before the call have completed."""
        if threading.current_thread() is self._io_thread:
            raise KafkaError("KafkaProducer.flush() invocation inside a callback is not permitted because it may "
                             "lead to deadlock.")
        start = self._time.nanoseconds()
        self._accumulator.begin_flush()
        self._sender.wakeup()  # type: ignore[union-attr]
        try:
            self._accumulator.await_flush_completion(None if timeout is None else int(timeout * 1000))
        finally:
            self._flush_time.record(self._time.nanoseconds() - start)

    # ----------------------------------------------------------------------------------- transactions

    def _require_transactional(self) -> TransactionManager:
        tm = self._transaction_manager
        if tm is None or not tm.is_transactional():
            raise IllegalStateError("Transactional method invoked on a non-transactional producer: set "
                                    "transactional.id.")
        return tm

    def _await_result(self, result: TransactionalRequestResult, timeout: float | None, sensor: Sensor,
                      start_ns: int) -> None:
        self._sender.wakeup()  # type: ignore[union-attr]
        result.await_(self._max_block_time_ms if timeout is None else int(timeout * 1000))
        sensor.record(self._time.nanoseconds() - start_ns)  # (a call that raised is not counted, as in Java)

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register the ``transactional.id`` with its coordinator: get the producer id and a new epoch, which
        fences every older producer with the same id and aborts its open transaction. Call once, first.
        Waits ``timeout`` seconds (default ``max.block.ms``); calling again after a timeout resumes the wait."""
        self._throw_if_producer_closed()
        start = self._time.nanoseconds()
        self._await_result(self._require_transactional().initialize_transactions(), timeout,
                           self._producer_metrics.txn_init, start)

    def begin_transaction(self) -> None:
        """Start a transaction: the records sent until commit/abort are written atomically."""
        self._throw_if_producer_closed()
        start = self._time.nanoseconds()
        self._require_transactional().begin_transaction()
        self._producer_metrics.txn_begin.record(self._time.nanoseconds() - start)

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, Any], group_metadata: Any,
                                    timeout: float | None = None) -> None:
        """Commit the consumer's ``offsets`` (the next offsets to read: ``{TopicPartition: OffsetAndMetadata or
        int}``) as part of this transaction; ``group_metadata`` is ``consumer.group_metadata()``."""
        self._throw_if_producer_closed()
        start = self._time.nanoseconds()
        self._await_result(self._require_transactional().send_offsets_to_transaction(dict(offsets), group_metadata),
                           timeout, self._producer_metrics.txn_send_offsets, start)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send every buffered record of the transaction, then commit it. Raises the error that made the
        transaction fail (then call :meth:`abort_transaction`), or ProducerFencedError (close the producer).
        Waits ``timeout`` seconds (default ``max.block.ms``); calling again after a timeout resumes the wait."""
        self._throw_if_producer_closed()
        start = self._time.nanoseconds()
        self._await_result(self._require_transactional().begin_commit(), timeout, self._producer_metrics.txn_commit,
                           start)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: unsent records fail with TransactionAbortedError, sent ones are never seen by
        read_committed consumers. After a failed record batch the producer's epoch is bumped too (KIP-360), so
        that the next transaction starts clean. Calling again after a timeout resumes the wait."""
        self._throw_if_producer_closed()
        start = self._time.nanoseconds()
        self._await_result(self._require_transactional().begin_abort(), timeout, self._producer_metrics.txn_abort,
                           start)

    def partitions_for(self, topic: str) -> list[PartitionInfo]:
        """The topic's partitions, waiting up to ``max.block.ms`` for its metadata (raises on timeout)."""
        if topic is None:
            raise ValueError("topic cannot be null")
        self._throw_if_producer_closed()
        cluster, _ = self._wait_on_metadata(topic, None, self._time.milliseconds(), self._max_block_time_ms)
        return cluster.partition_infos_for_topic(topic)

    def metrics(self) -> dict[MetricName, KafkaMetric]:
        """The producer's metrics by :class:`MetricName` (Kafka's ``metrics()``): groups ``producer-metrics``
        (record-send-rate, request-latency-avg, batch-size-avg, buffer-available-bytes, io-wait-ratio, ...),
        ``producer-topic-metrics`` (per topic), ``producer-node-metrics`` (per broker) and ``app-info``; read a
        value with ``metric.metric_value()`` (or :func:`strom.metrics.metric_values` for ``{name: value}``)."""
        return self._metrics.metrics()

    def _throw_if_producer_closed(self) -> None:
        if self._sender is None or not self._sender.is_running():
            raise IllegalStateError("Cannot perform operation after producer has been closed")

    # -------------------------------------------------------------------------------------- close

    def close(self, timeout: float | None = None) -> None:
        """Send everything buffered and stop (``timeout`` seconds, ``None`` = wait forever). Records still
        incomplete when the timeout passes are aborted; ``close(0)`` aborts at once."""
        self._close(timeout, swallow=False)

    def _close_telemetry(self, timeout: float | None) -> None:
        """KIP-714: the last push of the client's metrics, marked terminating, while the I/O thread still runs
        (bounded by ``timeout``, or by ``request.timeout.ms`` for an unbounded close)."""
        client = getattr(self, "_client", None)
        telemetry = getattr(client, "telemetry", None)
        thread = getattr(self, "_io_thread", None)
        if telemetry is None or thread is None or not thread.is_alive():
            return
        telemetry.initiate_close()
        telemetry.wait_terminated(client.default_request_timeout_ms / 1000 if timeout is None else timeout)

    def client_instance_id(self, timeout: float) -> uuid.UUID:
        """The id the cluster gave this client for its metrics (KIP-714, Java's ``clientInstanceId``): waits up to
        ``timeout`` seconds for the first GetTelemetrySubscriptions answer; :class:`IllegalStateError` when the
        client does not push metrics (``enable.metrics.push=false``, or no broker offers it)."""
        telemetry = getattr(self._client, "telemetry", None)
        if telemetry is None:
            raise IllegalStateError("Telemetry is not enabled. Set config enable.metrics.push to true.")
        return telemetry.client_instance_id(int(timeout * 1000))

    def _close(self, timeout: float | None, swallow: bool) -> None:
        if timeout is not None and timeout < 0:
            raise ValueError("The timeout cannot be negative.")
        log.info("%sClosing the Kafka producer with timeoutMillis = %s ms.", getattr(self, "_log_context", ""),
                 "max" if timeout is None else int(timeout * 1000))
        invoked_from_callback = threading.current_thread() is self._io_thread
        sender, thread = self._sender, self._io_thread
        if timeout is None or timeout > 0:
            if invoked_from_callback:
                log.warning("Overriding close timeout %s to 0 ms in order to prevent useless blocking due to "
                            "self-join. This means you have incorrectly invoked close with a non-zero timeout from "
                            "the producer call-back.", timeout)
            else:
                started = time.monotonic()
                self._close_telemetry(timeout)
                if sender is not None:
                    sender.initiate_close()
                if thread is not None and thread.ident is not None:
                    thread.join(None if timeout is None else max(0.0, timeout - (time.monotonic() - started)))
        if sender is not None and thread is not None and thread.is_alive():
            log.info("Proceeding to force close the producer since pending requests could not be completed within "
                     "timeout %s.", timeout)
            sender.force_close()
            if not invoked_from_callback:
                thread.join()
        elif sender is not None and (thread is None or thread.ident is None):
            sender.force_close()  # the I/O thread never started: release what the constructor built
            sender.accumulator.abort_incomplete_batches()
            sender.client.close()
        elif sender is None and self._client is not None:
            self._client.close()
        for name in ("_interceptors", "_key_serializer", "_value_serializer", "_partitioner"):
            obj = getattr(self, name, None)
            close = getattr(obj, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:
                    log.error("Failed to close %s", name, exc_info=True)
        metadata = getattr(self, "_metadata", None)
        if metadata is not None:
            metadata.close()
        metrics = getattr(self, "_metrics", None)
        if metrics is not None:
            metrics.close()
        log.debug("Kafka producer has been closed")

    def __enter__(self) -> KafkaProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KafkaProducer(client_id={getattr(self, 'client_id', None)!r})"
