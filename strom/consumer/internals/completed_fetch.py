"""One partition's records from one Fetch response, handed out in ``max.poll.records`` slices.

Kafka counterpart: ``org.apache.kafka.clients.consumer.internals.CompletedFetch`` (the record half of the
fetcher: batch iteration, CRC check, control batches, aborted transactions, deserialization).

Rules, as in Kafka:

* batches are iterated lazily; with ``check.crcs`` each batch's CRC-32C is verified before use and a bad
  batch raises :class:`~strom.consumer.errors.CorruptRecordError` (the position stays at the batch);
* records before the fetch offset (the broker returns whole batches) are skipped;
* control batches are never returned; moving past a batch sets the next fetch offset to the batch's
  ``next_offset`` (gaps left by compaction or control records are skipped over);
* ``read_committed``: the response's aborted transactions (``producer_id``, ``first_offset``) are consumed in
  ``first_offset`` order up to each batch's last offset; a transactional batch whose producer has an aborted
  transaction open is skipped, and that producer's ABORT marker closes it;
* a key/value deserialization failure raises :class:`~strom.consumer.errors.RecordDeserializationError` for
  that record, after the records before it have been returned.

For the columnar path (:meth:`CompletedFetch.fetch_columns`, ``poll_arrow``) the usable batches that follow one
another are decoded together in one vectorized pass (see ``CompletedFetch._group``), with the positions and
errors of batch-by-batch reading.

Not thread-safe: owned by the fetcher, used on the consumer's thread.
"""

from __future__ import annotations

import ctypes
import heapq
import struct
from collections.abc import Iterator
from typing import Any

from strom.common.error_codes import CorruptMessageError
from strom.common.errors import KafkaError
from strom.common.serialization import ByteArrayDeserializer
from strom.common.structs import TopicPartition
from strom.consumer.consumer_records import ConsumerRecord
from strom.consumer.errors import CorruptRecordError, RecordDeserializationError
from strom.consumer.internals.record_decoder import BatchRecords, decode_consumer_records
from strom.record.batch import ControlRecordType, RecordBatch
from strom.record.compression import CompressionType, decompress
from strom.record.header import COMPRESSION_MASK, HEADER_SIZE, LOG_OVERHEAD, MAGIC_OFFSET, TIMESTAMP_TYPE_MASK
from strom.record.legacy import LEGACY_RECORD_OVERHEAD_V0, LegacyRecordBatch

__all__ = ["CompletedFetch", "RecordConverter"]

_new = tuple.__new__
_MAX_GROUP = 64  # record batches decoded together in columnar mode (see CompletedFetch._group)
_I32 = struct.Struct(">i")


class RecordConverter:
    """Deserializers for one consumer; a ``ByteArrayDeserializer`` (or ``None``) means "pass bytes as is"."""

    __slots__ = ("key_deserializer", "value_deserializer", "raw")

    def __init__(self, key_deserializer: Any = None, value_deserializer: Any = None) -> None:
        self.key_deserializer = None if _is_raw(key_deserializer) else key_deserializer
        self.value_deserializer = None if _is_raw(value_deserializer) else value_deserializer
        self.raw = self.key_deserializer is None and self.value_deserializer is None


def _is_raw(deserializer: Any) -> bool:
    return deserializer is None or type(deserializer) is ByteArrayDeserializer


class CompletedFetch:
    """Fetched data of one partition (see the module docstring).

    ``next_fetch_offset`` is where the consumer stands after the records handed out so far; the fetcher
    moves the subscription's position to it. ``error_code`` is the partition's error in the response (the
    fetcher handles it; a completed fetch with an error holds no records).
    """

    __slots__ = ("aggregator", "records_read",
                 "tp", "fetch_offset", "next_fetch_offset", "error_code", "high_watermark", "last_stable_offset",
                 "log_start_offset", "is_consumed", "initialized", "_started", "size_in_bytes", "_records_buf", "_batches",
                 "_current", "_index", "_pending_error", "_check_crcs", "_read_committed", "_aborted",
                 "_aborted_pids", "_converter", "last_epoch", "preferred_read_replica", "_batch_next_offset",
                 "_columnar", "_source", "_pushed", "_gaps")

    def __init__(self, tp: TopicPartition, fetch_offset: int, error_code: int, records: Any,
                 converter: RecordConverter, *, check_crcs: bool = True, read_committed: bool = False,
                 high_watermark: int = -1, last_stable_offset: int = -1, log_start_offset: int = -1,
                 aborted_transactions: list[tuple[int, int]] | None = None,
                 preferred_read_replica: int = -1) -> None:
        self.tp = tp
        self.aggregator: Any = None
        """The response's ``FetchResponseMetricAggregator`` (the fetcher's), told ``records_read`` once consumed."""
        self.records_read = 0
        self.fetch_offset = fetch_offset
        self.next_fetch_offset = fetch_offset
        self.error_code = error_code
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.preferred_read_replica = preferred_read_replica
        self.is_consumed = False
        self.initialized = False  # the fetcher checked the error code and the position
        self._started = False
        self._records_buf = records
        self.size_in_bytes = len(records) if records is not None else 0
        self._batches: Iterator[Any] | None = None
        self._current: Any = []  # list[ConsumerRecord] | BatchRecords | pyarrow.RecordBatch
        self._index = 0
        self._batch_next_offset = fetch_offset
        self._pending_error: BaseException | None = None
        self._check_crcs = check_crcs
        self._read_committed = read_committed
        # (first_offset, producer_id) min-heap
        self._aborted: list[tuple[int, int]] = [(first, pid) for pid, first in (aborted_transactions or [])]
        heapq.heapify(self._aborted)
        self._aborted_pids: set[int] = set()
        self._converter = converter
        self.last_epoch: int | None = None
        self._columnar = False  # _current holds Arrow columns (fetch_columns) rather than ConsumerRecords
        self._source: list[tuple[Any, Any, int, int]] | None = None  # the batches behind _current (to decode again)
        self._pushed: list[Any] = []  # batches (or a batch iteration error) to take before _batches, last first
        # batches decoded together: {last record of a batch inside the group: that batch's next offset} where they
        # differ (records compacted away at a batch's end), so positions move past a batch as one by one
        self._gaps: dict[int, int] | None = None

    def defer_error(self, exc: BaseException) -> None:
        """Raise ``exc`` from the next :meth:`fetch_records` (records of other partitions went out first)."""
        self._pending_error = exc
        self.is_consumed = False

    def drain(self) -> None:
        """Forget the remaining records (the partition was sought, paused away or unassigned)."""
        self.is_consumed = True
        self._current = []
        self._source = None
        self._batches = None
        self._pushed.clear()
        self._pending_error = None

    # ------------------------------------------------------------------------------------------ records

    def fetch_columns(self, max_records: int) -> list[Any]:
        """The columnar counterpart of :meth:`fetch_records`: up to ``max_records`` records from
        ``next_fetch_offset`` on as ``pyarrow.RecordBatch`` es of ``arrow_decoder.BATCH_SCHEMA`` (raw key and
        value bytes: no deserializers), one or more per fetched batch (or per run of consecutive batches decoded
        together, see :meth:`_group`); same positions, skipping and errors."""
        if self.is_consumed:
            return []
        if not self._columnar:
            self._switch_mode(True)
        out: list[Any] = []
        have = 0
        while have < max_records:
            current = self._current
            index = self._index
            size = len(current)
            if index < size:
                take = min(size - index, max_records - have)
                chunk = current.slice(index, take) if take < size else current
                self._index = index = index + take
                out.append(chunk)
                have += take
                last = chunk.column(0)[take - 1].as_py()
                self.next_fetch_offset = last + 1
                if index == size and self._pending_error is None:
                    self.next_fetch_offset = self._batch_next_offset
                elif self._gaps and last in self._gaps:
                    self.next_fetch_offset = self._gaps[last]
                continue
            if not self._next_batch_or_error(bool(out)):
                break
        return out

    def _next_batch_or_error(self, holding: bool) -> bool:
        """The current batch is used up: raise the pending error (CRC, deserialization) once no records are
        ``holding`` before it, else load the next batch. False: stop here (nothing more, or records to hand out
        before the error)."""
        if self._pending_error is not None:
            if holding:
                return False
            error = self._pending_error
            self._pending_error = None
            raise error
        try:
            loaded = self._load_next_batch()
        except CorruptRecordError as exc:
            self._batches = None
            self._pushed.clear()
            self._records_buf = None
            if not holding:
                self.is_consumed = True
                raise
            self._pending_error = exc
            return True
        if not loaded:
            self.is_consumed = True
            return False
        return True

    def _switch_mode(self, columnar: bool) -> None:
        """``poll`` and ``poll_arrow`` alternate on this partition: decode the current batch again in the
        other form, from the position reached (rare; keeps both paths exact)."""
        self._columnar = columnar
        source = self._source
        if source is None or self._index >= len(self._current):
            self._current = []
            self._index = 0
            return
        if len(source) > 1:  # batches decoded together: read them again one by one, from the position reached
            self._pushed.extend(reversed(source))
            self._source = None
            self._current = []
            self._index = 0
            return
        current = self._decode_current(*source[0])
        self._current = current
        self._index = 0

    def fetch_records(self, max_records: int) -> list[ConsumerRecord]:
        """Up to ``max_records`` records from ``next_fetch_offset`` on; raises a pending error (CRC,
        deserialization) once the records before it have been returned."""
        if self.is_consumed:
            return []
        if self._columnar:
            self._switch_mode(False)
        out: list[ConsumerRecord] = []
        while len(out) < max_records:
            current = self._current
            index = self._index
            if index < len(current):
                take = current[index:index + max_records - len(out)]
                if not take:  # a record failed to deserialize: the view now ends before it (error pending)
                    continue
                self._index = index = index + len(take)
                out.extend(take)
                self.next_fetch_offset = take[-1][2] + 1
                if index == len(current) and self._pending_error is None:
                    # the whole batch is out: skip any gap after its last record (compaction, markers)
                    self.next_fetch_offset = self._batch_next_offset
                continue
            if not self._next_batch_or_error(bool(out)):
                break
        return out

    def _iter_batches(self) -> Iterator[tuple[Any, Any, int, int]]:
        """``(batch, buffer, position, size)`` of every complete batch (a trailing partial batch is skipped).

        The buffer is the response's receive buffer itself when the records are a view into it (no copy: the
        network layer never reuses a receive buffer, as Java's consumer keeps slices of its responses); record
        decoders that hand out keys and values as objects copy their batch to ``bytes`` first (:func:`_as_bytes`).
        Legacy message sets are copied here."""
        data, pos, n = _in_place(self._records_buf)
        self._records_buf = None
        while n - pos >= LOG_OVERHEAD:
            size = _I32.unpack_from(data, pos + 8)[0] + LOG_OVERHEAD
            if size < LOG_OVERHEAD + LEGACY_RECORD_OVERHEAD_V0:
                raise CorruptMessageError(f"batch at position {pos} has size {size}, below the minimum overhead")
            if n - pos < size:
                return
            magic = data[pos + MAGIC_OFFSET]
            if magic == 2:
                yield RecordBatch(data, pos), data, pos, size
            elif magic < 2:
                legacy, at = _as_bytes(data, pos, size)
                yield LegacyRecordBatch(legacy, at), legacy, at, size
            else:
                raise CorruptMessageError(f"batch at position {pos} has unsupported magic {magic}")
            pos += size

    def _next_item(self) -> Any:
        """The next ``(batch, buffer, position, size)``: a pushed-back one first, else from ``_batches``."""
        if self._pushed:
            item = self._pushed.pop()
            if isinstance(item, BaseException):
                raise item
            return item
        return next(self._batches, None) if self._batches is not None else None

    def _load_next_batch(self) -> bool:
        """Decode the next usable batch (in columnar mode, the usable batches that follow it as well: see
        :meth:`_group`) into ``_current``; ``False`` when the data is exhausted."""
        if self._batches is None and not self._pushed:
            if self._records_buf is None or self._started:
                return False
            self._started = True
            self._batches = self._iter_batches()
        read_committed = self._read_committed
        while True:
            try:
                item = self._next_item()
            except KafkaError as exc:
                self._raise_corrupt(str(exc))
            if item is None:
                self._batches = None
                return False
            batch, data, pos, size = item
            if self._check_crcs:
                reason = batch.invalid_reason()
                if reason is not None:
                    self._raise_corrupt(f"Record batch for partition {self.tp} at offset {batch.base_offset} is "
                                        f"invalid, cause: {reason}")
            next_offset = batch.next_offset
            if next_offset <= self.next_fetch_offset:
                continue  # wholly before the fetch position
            if read_committed and batch.producer_id >= 0:
                self._consume_aborted_up_to(batch.last_offset)
                if batch.is_control:
                    try:
                        if batch.control_record_type() == ControlRecordType.ABORT:
                            self._aborted_pids.discard(batch.producer_id)
                    except KafkaError as exc:
                        self._raise_corrupt(str(exc))
                elif batch.is_transactional and batch.producer_id in self._aborted_pids:
                    self.next_fetch_offset = next_offset
                    continue
            if batch.is_control:
                self.next_fetch_offset = next_offset
                continue
            epoch = batch.partition_leader_epoch
            self.last_epoch = epoch if epoch >= 0 else None
            self._gaps = None
            if self._columnar and (group := self._group(item)) is not None:
                self._current, self._source, self._gaps = group
                next_offset = self._source[-1][0].next_offset
            else:
                self._source = [item]
                self._current = self._decode_current(batch, data, pos, size)
            self._index = 0
            self._batch_next_offset = next_offset
            if not self._current and self._pending_error is None:
                self.next_fetch_offset = next_offset
                continue
            return True

    def _group(self, first: tuple[Any, Any, int, int]) -> tuple[Any, list[Any], dict[int, int]] | None:
        """In columnar mode: ``first`` (a usable batch) and the usable batches right after it in the buffer, up to
        :data:`_MAX_GROUP`, decoded in one vectorized pass (``arrow_decoder.decode_blocks_columns``; a record
        batch's fixed decoding cost dominates for batches of a few hundred records). Joined: v2, uncompressed,
        with records, not control, not of an aborted transaction (read_committed), same timestamp type and leader
        epoch, CRC valid (with ``check.crcs``). The first batch that is not is pushed back and handled as
        usual after the group's records. ``(columns, batches, gaps)`` (see ``_gaps``), or ``None`` for no
        group (``first`` alone, or batches the vectorized path does not read: those are pushed back to be decoded
        one by one)."""
        batch, data, pos, size = first
        if batch.magic != 2:
            return None
        h = batch.header
        if h.attributes & COMPRESSION_MASK or h.records_count <= 0:
            return None
        ts_attr = h.attributes & TIMESTAMP_TYPE_MASK
        epoch = batch.partition_leader_epoch
        group = [first]
        end = pos + size
        while len(group) < _MAX_GROUP:
            try:
                item = self._next_item()
            except KafkaError as exc:
                self._pushed.append(exc)  # raised when the batches get there
                break
            if item is None:
                break
            b, d, p, sz = item
            ok = (b.magic == 2 and d is data and p == end and not b.is_control)
            if ok:
                hb = b.header
                ok = (not hb.attributes & COMPRESSION_MASK and hb.attributes & TIMESTAMP_TYPE_MASK == ts_attr
                      and hb.records_count > 0 and b.partition_leader_epoch == epoch
                      and (not self._check_crcs or b.invalid_reason() is None))
            if ok and self._read_committed and b.producer_id >= 0:
                self._consume_aborted_up_to(b.last_offset)
                ok = not (b.is_transactional and b.producer_id in self._aborted_pids)
            if not ok:
                self._pushed.append(item)
                break
            group.append(item)
            end = p + sz
        if len(group) == 1:
            return None
        from strom.consumer.internals import arrow_decoder

        blocks: list[arrow_decoder.Block] = []
        for b, _d, p, sz in group:
            hb = b.header
            blocks.append((p + HEADER_SIZE, p + sz, hb.records_count, hb.base_offset, hb.base_timestamp,
                           hb.max_timestamp if ts_attr else None))
        columns = arrow_decoder.decode_blocks_columns(data, blocks, int(batch.timestamp_type))
        if columns is None:
            self._pushed.extend(reversed(group[1:]))
            return None
        offsets = arrow_decoder.values_of(columns.column(0))
        row = -1
        gaps = {}
        for (b, _d, _p, _sz), block in zip(group[:-1], blocks, strict=False):
            row += block[2]
            last = int(offsets[row])
            if b.next_offset != last + 1:
                gaps[last] = b.next_offset
        start = self.next_fetch_offset
        if offsets[0] < start:
            columns = columns.slice(_first_at_or_after(columns, start))
        return columns, group, gaps

    def _decode_current(self, batch: Any, data: Any, pos: int, size: int) -> Any:
        """The records of ``batch`` from ``next_fetch_offset`` on, as ConsumerRecords (deserialized) or as
        Arrow columns (in columnar mode)."""
        start = self.next_fetch_offset
        try:
            if self._columnar:
                columns = self._decode_columns(batch, data, pos, size)
                if len(columns) and columns.column(0)[0].as_py() < start:
                    columns = columns.slice(_first_at_or_after(columns, start))
                return columns
            records = self._decode(batch, data, pos, size)
        except KafkaError as exc:
            self._raise_corrupt(str(exc))
        if records and records[0][2] < start:
            records = (records.starting_at(start) if isinstance(records, BatchRecords)
                       else [r for r in records if r[2] >= start])
        if self._converter.raw:
            return records
        if isinstance(records, BatchRecords):
            return _DeserializingRecords(records, self)  # deserialized per poll, as the records are made
        return self._deserialize(records)

    def _decode_columns(self, batch: Any, data: Any, pos: int, size: int) -> Any:
        """Every record of ``batch`` as Arrow columns (``arrow_decoder.BATCH_SCHEMA``)."""
        from strom.consumer.internals import arrow_decoder

        ts_type = int(batch.timestamp_type)
        if batch.magic != 2:  # legacy message set entry
            return arrow_decoder.records_to_columns(batch.records(), ts_type)
        h = batch.header
        data, start, end = _records_section(h, data, pos, size)
        log_append = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else None
        return arrow_decoder.decode_batch_columns(data, start, end, h.records_count, h.base_offset,
                                                  h.base_timestamp, log_append, ts_type)

    def _decode(self, batch: Any, data: Any, pos: int, size: int) -> list[ConsumerRecord]:
        """Every record of ``batch`` as a ConsumerRecord with raw key/value bytes."""
        tp = self.tp
        ts_type = int(batch.timestamp_type)
        if batch.magic != 2:  # legacy message set entry
            return [_new(ConsumerRecord, (tp.topic, tp.partition, r[0], r[1], ts_type, r[2], r[3], r[4],
                                          -1 if r[2] is None else len(r[2]), -1 if r[3] is None else len(r[3]),
                                          None)) for r in batch.records()]
        h = batch.header
        data, pos = _as_bytes(data, pos, size)  # keys and values are slices of it
        data, start, end = _records_section(h, data, pos, size)
        log_append = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else None
        return decode_consumer_records(data, start, end, h.records_count, h.base_offset, h.base_timestamp,
                                       h.records_count == h.last_offset_delta + 1, tp.topic, tp.partition,
                                       ts_type, self.last_epoch, log_append)

    def _consume_aborted_up_to(self, offset: int) -> None:
        aborted = self._aborted
        while aborted and aborted[0][0] <= offset:
            _first, pid = heapq.heappop(aborted)
            self._aborted_pids.add(pid)

    def _raise_corrupt(self, reason: str) -> Any:
        raise CorruptRecordError(self.tp, self.next_fetch_offset, reason)

    def _deserialization_failed(self, what: str, offset: int, exc: Exception) -> None:
        self._pending_error = RecordDeserializationError(
            self.tp, offset, f"Error deserializing {what} for partition {self.tp} at offset {offset}. "
            f"If needed, please seek past the record to continue consumption.", exc)

    def _deserialize(self, records: list[ConsumerRecord]) -> list[ConsumerRecord]:
        """Apply the key/value deserializers; stops at the first failure (raised after the records before)."""
        topic = self.tp.topic
        conv = self._converter
        kd = conv.key_deserializer
        vd = conv.value_deserializer
        out: list[ConsumerRecord] = []
        append = out.append
        for r in records:
            key, value, headers = r[5], r[6], r[7]
            what = "key"
            try:
                k = key if kd is None else kd.deserialize(topic, key, headers)
                what = "value"
                v = value if vd is None else vd.deserialize(topic, value, headers)
            except Exception as exc:
                self._deserialization_failed(what, r[2], exc)
                break
            append(_new(ConsumerRecord, (r[0], r[1], r[2], r[3], r[4], k, v, headers, r[8], r[9], r[10])))
        return out


class _DeserializingRecords:
    """A :class:`BatchRecords` whose slices come deserialized by their fetch's converter. A record that fails
    ends the view there (``len`` drops to its index) and leaves the error pending on the fetch, as
    ``_deserialize`` does for a whole list."""

    __slots__ = ("_records", "_fetch", "_stop")

    def __init__(self, records: BatchRecords, fetch: CompletedFetch) -> None:
        self._records = records
        self._fetch = fetch
        self._stop = len(records)

    def __len__(self) -> int:
        return self._stop

    def __getitem__(self, index: slice) -> list[ConsumerRecord]:
        a, b, step = index.indices(self._stop)
        if step != 1:
            raise ValueError("step slices are not supported")
        if a >= b:
            return []
        fetch = self._fetch
        records = self._records
        topic = fetch.tp.topic
        converter = fetch._converter
        raw_keys, raw_values = records.raw_columns(a, b)
        n = b - a
        keys, key_failed, key_error = _deserialize_column(converter.key_deserializer, topic, raw_keys, n)
        values, failed, error = _deserialize_column(converter.value_deserializer, topic, raw_values, key_failed)
        what = "value" if failed < key_failed else "key"  # (a record's key is deserialized before its value)
        if what == "key":
            error = key_error
        if failed < n:
            fetch._deserialization_failed(what, records.offset(a + failed), error)  # type: ignore[arg-type]
            self._stop = a + failed
        return records.make(a, a + failed, None if keys is None else keys[:failed], values[:failed]) if failed else []


def _deserialize_column(deserializer: Any, topic: str, raw: list[bytes] | None,
                        n: int) -> tuple[list[Any] | None, int, Exception | None]:
    """``(items, i, error)``: the first ``n`` raw items deserialized up to the first failure ``i`` (``n``
    when none failed); ``raw`` ``None`` (no keys) stays ``None`` unless a deserializer maps null keys."""
    if deserializer is None:
        return (None if raw is None else raw[:n]), n, None
    out: list[Any] = []
    append = out.append
    deserialize = deserializer.deserialize
    items = raw if raw is not None else [None] * n
    for i in range(n):
        try:
            append(deserialize(topic, items[i], ()))
        except Exception as exc:  # noqa: BLE001 - reported as the record's RecordDeserializationError
            return out, i, exc
    return out, n, None


def _in_place(records: Any) -> tuple[Any, int, int]:
    """``(buffer, start, end)`` of a partition's records: a view into a ``bytearray`` (the response's receive
    buffer) as that buffer and the view's place in it, ``bytes`` as they are, anything else copied."""
    if records is None:
        return b"", 0, 0
    if type(records) is bytes:
        return records, 0, len(records)
    if type(records) is memoryview and type(records.obj) is bytearray and len(records) and not records.readonly \
            and records.c_contiguous and records.itemsize == 1:
        obj = records.obj
        at = ctypes.addressof(ctypes.c_char.from_buffer(records)) - ctypes.addressof(ctypes.c_char.from_buffer(obj))
        return obj, at, at + len(records)
    data = bytes(records)
    return data, 0, len(data)


def _as_bytes(data: Any, pos: int, size: int) -> tuple[bytes, int]:
    """The batch at ``data[pos:pos + size]`` in a ``bytes`` object, and its position there (a copy of just that
    batch unless ``data`` is ``bytes``)."""
    if type(data) is bytes:
        return data, pos
    return bytes(memoryview(data)[pos:pos + size]), 0


def _first_at_or_after(columns: Any, offset: int) -> int:
    """The index of the first row of ``columns`` (in offset order) at or after ``offset``."""
    import numpy as np

    from strom.consumer.internals.arrow_decoder import values_of

    return int(np.searchsorted(values_of(columns.column(0)), offset))


def _records_section(h: Any, data: Any, pos: int, size: int) -> tuple[Any, int, int]:
    """``(buffer, start, end)`` of a v2 batch's records: in place, or decompressed (CorruptMessageError if that
    fails)."""
    codec = h.attributes & COMPRESSION_MASK
    if codec == 0:
        return data, pos + HEADER_SIZE, pos + size
    try:
        out = decompress(CompressionType(codec), memoryview(data)[pos + HEADER_SIZE:pos + size])
    except ValueError as exc:
        raise CorruptMessageError(f"cannot decompress record batch: {exc}") from None
    return out, 0, len(out)
