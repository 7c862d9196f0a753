"""Writing RecordBatch v2: ``MemoryRecordsBuilder`` and record size estimates.

Output layout: the 61-byte header (see ``strom.record.header``) then the records, each
``length VARINT | attributes INT8 = 0 | timestampDelta VARLONG | offsetDelta VARINT | keyLength VARINT |
key | valueLength VARINT | value | headersCount VARINT | headers``; with a codec the records block is
compressed as a whole. Fields written as Kafka's Java producer writes them: baseTimestamp = the first
record's timestamp, maxTimestamp = the largest, lastOffsetDelta = count - 1, CRC-32C over attributes..end.

Hot path: ``append`` encodes a record with table-driven varints and one ``bytes %`` format, written at the
write position of a single ``bytearray`` (the header is reserved at its front, so an uncompressed build
patches it in place). A failed ``append`` (e.g. a ``str`` value) leaves the builder unchanged.
``try_append`` (the producer's per-record path) hands a record bound for a pooled buffer to the optional C
accelerator ``strom/record/_fastencode.c`` where it was built: the same bytes, written in place (0.35 µs a
record against 0.8–1.0 µs).

Memory (the producer's ``buffer.memory`` bound): given ``buffer=`` (the ``bytearray`` the producer's
``BufferPool`` handed out), the builder writes *into* that buffer with same-size slice assignment and never
resizes it, so a batch's memory is the pooled buffer only, and ``build()`` returns a ``memoryview`` of it (no
copy). Only when a record does not fit (a compressed batch whose estimate lets it hold more uncompressed bytes
than the buffer, or a record larger than the buffer) does the builder move to a private, growing
``bytearray`` — Java's ``ByteBufferOutputStream.expandBuffer`` — leaving the pooled buffer to its owner for
deallocation. With a codec, ``close`` compresses the records block into a transient ``bytes`` (at most about
the uncompressed size, freed at once) and copies it back over the records in the same buffer. Without
``buffer=`` the builder owns a growing ``bytearray`` and ``build()`` returns ``bytes`` as before.

Kafka counterpart: ``org.apache.kafka.common.record.MemoryRecordsBuilder``,
``DefaultRecord.sizeInBytes``/``recordSizeUpperBound``, ``AbstractRecords.estimateSizeInBytesUpperBound``.
Control batches are built in ``strom.record.control``, re-splitting in ``strom.record.split``.
Not thread-safe: one builder is owned by one thread at a time.
"""

from __future__ import annotations

import struct
import threading
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate, chain, repeat
from operator import add
from typing import Any

from strom.common.errors import IllegalStateError
from strom.record.batch import Header
from strom.record.compression import CompressionType, compress
from strom.record.crc import crc32c
from strom.record.header import (
    ATTRIBUTES_OFFSET,
    CONTROL_FLAG,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
)
from strom.record.sizes import (
    COMPRESSION_RATE_ESTIMATION_FACTOR,
    MAX_RECORD_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    EncodedHeaders,
    _headers_size,
    encode_headers,
    record_size,
    record_size_upper_bound,
    upper_bound_size,
)
from strom.record.varint import CACHE_SIZE, UVARINT_TABLE, varint_bytes, varlong_bytes

try:  # the optional C accelerator of try_append (strom/record/_fastencode.c; setup.py builds it when it can)
    from strom.record._fastencode import encode_record as _encode_record
    from strom.record._fastencode import encode_records as _encode_records
except ImportError:  # pragma: no cover - an install without a C compiler (tests switch it off by attribute)
    _encode_record = _encode_records = None

__all__ = [
    "MemoryRecordsBuilder",
    "record_size",
    "record_size_upper_bound",
    "upper_bound_size",
    "RECORD_BATCH_OVERHEAD",
    "MAX_RECORD_OVERHEAD",
    "COMPRESSION_RATE_ESTIMATION_FACTOR",
]

# header after the CRC: attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId,
# producerEpoch, baseSequence, recordsCount
_HEAD = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_TAIL = struct.Struct(">hiqqqhii")
_U32 = struct.Struct(">I")

_UV = UVARINT_TABLE
_HALF = CACHE_SIZE // 2  # non-negative values below this have a cached zig-zag encoding
_NULL = b"\x01"  # varint -1
_EMPTY_HEADERS = b"\x00"
_UNBOUNDED = 1 << 62  # capacity of a builder-owned buffer

# Tables of the bulk path (try_append_many), for non-negative values below 8192 (two-byte varints at most):
_ZZ = _UV[0::2]  # _ZZ[v] = zig-zag varint of v
_FIELD = tuple(v + len(_ZZ[v]) for v in range(len(_ZZ)))  # size of v bytes with their length prefix
_RUN_FULL = 1  # encode_records stopped at the write limit
_ODS_LIMIT = 1 << 20  # offset deltas of the bulk path (three-byte varints at most); more: record by record
_ODS: list[bytes] = []  # _ODS[d] = varint of offset delta d, grown on demand (_offset_tables)
_ODSIZE: list[int] = []  # len(_ODS[d])
_ODS_LOCK = threading.Lock()


def _offset_tables(n: int) -> None:
    """Make ``_ODS`` / ``_ODSIZE`` cover deltas below ``n`` (append-only, so readers need no lock)."""
    if len(_ODS) >= n:
        return
    with _ODS_LOCK:
        have = len(_ODS)
        if have < n:
            grown = [varint_bytes(d) for d in range(have, max(n, 2 * have, 1024))]
            _ODSIZE.extend(map(len, grown))
            _ODS.extend(grown)


class MemoryRecordsBuilder:
    """Accumulates records into one v2 batch; ``build()`` returns the final bytes.

    ``write_limit`` (bytes, ``None`` = unlimited) drives :meth:`has_room_for`/:meth:`is_full` exactly as
    in Kafka: the first record always fits; later ones fit while ``estimated_size_in_bytes() +
    record_size(...) <= write_limit``, where a compressed batch is estimated as header + uncompressed
    records x ``estimated_compression_ratio`` x 1.05.

    ``timestamp_type=1`` (LogAppendTime) only sets the attribute bit; maxTimestamp is still the largest
    record timestamp (the broker stamps its own with ``header.set_max_timestamp_log_append``). An empty
    builder builds ``b""`` (Kafka's ``MemoryRecords.EMPTY``).
    """

    __slots__ = (
        "compression_type",
        "compression_level",
        "base_offset",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "is_transactional",
        "is_control",
        "partition_leader_epoch",
        "timestamp_type",
        "write_limit",
        "estimated_compression_ratio",
        "_buf",
        "_pos",
        "_cap",
        "_mv",
        "_raw_size",
        "_n",
        "_base_ts",
        "_max_ts",
        "_max_record",
        "_built",
    )

    def __init__(
        self,
        compression_type: CompressionType | int = CompressionType.NONE,
        *,
        base_offset: int = 0,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
        partition_leader_epoch: int = -1,
        timestamp_type: int = 0,
        write_limit: int | None = None,
        compression_level: int | None = None,
        estimated_compression_ratio: float = 1.0,
        buffer: bytearray | None = None,
    ) -> None:
        self.compression_type = CompressionType(compression_type)
        self.compression_level = compression_level
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.partition_leader_epoch = partition_leader_epoch
        if timestamp_type not in (0, 1):
            raise ValueError(
                f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), got {timestamp_type}"
            )
        self.timestamp_type = timestamp_type
        self.write_limit = write_limit
        self.estimated_compression_ratio = estimated_compression_ratio
        if buffer is None:
            self._buf = bytearray(HEADER_SIZE)  # header placeholder; records follow
            self._cap = _UNBOUNDED  # our own buffer: it grows as needed (``+=``)
            self._mv: memoryview | None = None
        else:
            if len(buffer) < HEADER_SIZE:
                raise ValueError(f"buffer of {len(buffer)} bytes cannot hold a {HEADER_SIZE}-byte batch header")
            self._buf = buffer  # written in place, never resized (it may be exported as a memoryview)
            self._cap = len(buffer)
            self._mv = memoryview(buffer)  # writes go through it: ~2x faster than bytearray slice assignment
        self._pos = HEADER_SIZE
        self._raw_size = 0  # uncompressed size once closed
        self._n = 0
        self._base_ts = 0
        self._max_ts = -1
        self._max_record = 0  # the largest record's encoded size (length varint included)
        self._built: bytes | memoryview | None = None

    # -- appending ------------------------------------------------------------------------------
    def append(
        self, timestamp: int, key: bytes | None, value: bytes | None, headers: Sequence[Header] = ()
    ) -> int:
        """Append one record; return its offset delta. Raises ``IllegalStateError`` once closed."""
        if self._built is not None:
            raise IllegalStateError("cannot append to a closed MemoryRecordsBuilder")
        if timestamp < 0 and timestamp != -1:
            raise ValueError(f"invalid negative timestamp {timestamp}")
        hb = (headers if type(headers) is EncodedHeaders else encode_headers(headers)) if headers else _EMPTY_HEADERS
        return self._write(timestamp, key, value, hb, _UNBOUNDED)

    def _write(self, timestamp: int, key: bytes | None, value: bytes | None, hb: bytes, room: int) -> int:
        """The Python encoding of one record (table-driven varints, one ``bytes`` format) at the write position:
        its offset delta, or -1 (nothing written) when it takes more than ``room`` bytes."""
        delta = self._n
        if delta == 0:
            tsb = b"\x00"
            od = b"\x00"
        else:
            tsd = timestamp - self._base_ts
            z = (tsd << 1) ^ (tsd >> 63)
            tsb = _UV[z] if z < CACHE_SIZE else varlong_bytes(tsd)
            od = _UV[delta << 1] if delta < _HALF else varint_bytes(delta)
        if key is None:
            kb = _NULL
            klen = 0
            key = b""
        else:
            klen = len(key)
            kb = _UV[klen << 1] if klen < _HALF else varint_bytes(klen)
        if value is None:
            vb = _NULL
            vlen = 0
            value = b""
        else:
            vlen = len(value)
            vb = _UV[vlen << 1] if vlen < _HALF else varint_bytes(vlen)
        body = 1 + len(tsb) + len(od) + len(kb) + klen + len(vb) + vlen + len(hb)
        lb = _UV[body << 1] if body < _HALF else varint_bytes(body)
        if len(lb) + body > room:
            return -1
        data = b"%b\x00%b%b%b%b%b%b%b" % (lb, tsb, od, kb, key, vb, value, hb)
        pos = self._pos
        end = pos + len(data)
        if end - pos > self._max_record:
            self._max_record = end - pos
        mv = self._mv
        if mv is None:
            self._buf += data
        elif end <= self._cap:
            mv[pos:end] = data
        else:
            self._expand()
            self._buf += data
        self._pos = end
        if delta == 0:
            self._base_ts = timestamp
        if timestamp > self._max_ts:
            self._max_ts = timestamp
        self._n = delta + 1
        return delta

    def try_append(
        self, timestamp: int, key: bytes | None, value: bytes | None, headers: Sequence[Header] = ()
    ) -> int:
        """``has_room_for`` + ``append`` in one pass (Kafka's ``ProducerBatch.tryAppend``).

        Returns the offset delta, or -1 (builder unchanged) when the record does not fit or the builder
        is closed. Same decision as :meth:`has_room_for`, at no extra cost: the exact size is known here.
        (The producer's hottest path: a record bound for a pooled buffer goes to the C accelerator where it was
        built, else to :meth:`_write`, as :meth:`append`'s do.)
        """
        if self._built is not None:
            return -1
        delta = self._n
        if timestamp < 0 and timestamp != -1:
            raise ValueError(f"invalid negative timestamp {timestamp}")
        pos = self._pos
        limit = self.write_limit
        if delta and limit is not None:  # (the first record always fits)
            written = pos
            if self.compression_type:
                written = HEADER_SIZE + int((written - HEADER_SIZE) * self.estimated_compression_ratio
                                            * COMPRESSION_RATE_ESTIMATION_FACTOR)
            room = limit - written
        else:
            room = _UNBOUNDED
        hb = (headers if type(headers) is EncodedHeaders else encode_headers(headers)) if headers else _EMPTY_HEADERS
        mv = self._mv
        if _encode_record is None or mv is None:
            return self._write(timestamp, key, value, hb, room)
        # The C accelerator writes the record in place, the bytes `_write` would.
        size = _encode_record(mv, pos, room, timestamp - self._base_ts if delta else 0, delta, key, value, hb)
        if size < 0:
            # -2: it fits the write limit but not the pooled buffer: `_write` moves to a growing buffer.
            return -1 if size == -1 else self._write(timestamp, key, value, hb, room)
        self._pos = pos + size
        if size > self._max_record:
            self._max_record = size
        if delta == 0:
            self._base_ts = timestamp
        if timestamp > self._max_ts:
            self._max_ts = timestamp
        self._n = delta + 1
        return delta

    def try_append_many(self, timestamp: int, keys: Sequence[bytes | None] | None,
                        values: Sequence[bytes | None], start: int, stop: int) -> int:
        """Append records ``start..stop-1`` of ``values`` (and ``keys``; ``None`` = no keys), all with
        ``timestamp`` and no headers, as many as fit under ``write_limit``; return how many were appended
        (0 only when the builder is closed or already holds records and the next one does not fit).

        The bulk counterpart of :meth:`try_append`, with the same size rule (the first record of an empty
        builder always fits). Into a pooled buffer without a codec (the producer's batches) the C accelerator
        ``strom/record/_fastencode.c`` (``encode_records``) writes the run where it was built. Otherwise the
        common shape — bytes values and keys (or no keys) shorter than 8 KiB — is encoded with table look-ups and
        ``map``/``join`` for the whole run instead of one format per record; anything else (null values or keys,
        longer ones) goes through :meth:`try_append` record by record.
        """
        if self._built is not None or stop <= start:
            return 0
        if timestamp < 0 and timestamp != -1:
            raise ValueError(f"invalid negative timestamp {timestamp}")
        done = 0
        while start < stop:
            n, full = self._append_run(timestamp, keys, values, start, stop)
            done += n
            start += n
            if full or n == 0:
                break
        return done

    def _append_run(self, timestamp: int, keys: Sequence[bytes | None] | None, values: Sequence[bytes | None],
                    start: int, stop: int) -> tuple[int, bool]:
        """One window of :meth:`try_append_many`: ``(records appended, the limit stopped us)``."""
        n0 = self._n
        limit = self.write_limit
        mv = self._mv
        if (_encode_records is not None and mv is not None and not self.compression_type and type(values) is list
                and (keys is None or type(keys) is list)):
            # The C accelerator writes the records into the pooled buffer, the bytes the code below would write;
            # it stops at the write limit, at the end of the buffer or at a key or value that is not bytes or None.
            timestamp_delta = 0 if n0 == 0 else timestamp - self._base_ts
            room = _UNBOUNDED if limit is None else limit - self._pos
            count, size, why, largest = _encode_records(mv, self._pos, room, timestamp_delta, n0, keys, values,
                                                        start, stop)
            if count:
                self._pos += size
                if largest > self._max_record:
                    self._max_record = largest
                if n0 == 0:
                    self._base_ts = timestamp
                if timestamp > self._max_ts:
                    self._max_ts = timestamp
                self._n = n0 + count
                return count, why == _RUN_FULL
            if why == _RUN_FULL:
                return 0, True
            # (nothing written: the next record needs a growing buffer or the general path, below)
        # Records are sized before they are encoded; look at a window of about what can still fit, so a call
        # with a million values does not size them all to fill one batch.
        if limit is None:
            window = stop - start
        else:
            first = values[start]
            guess = (len(first) if first is not None else 0) + 8
            if keys is not None and keys[start] is not None:
                guess += len(keys[start])  # type: ignore[arg-type]
            window = min(stop - start, self._room() // guess + 16)
        end = start + window
        vals = list(values[start:end])
        ks = list(keys[start:end]) if keys is not None else None
        if None in vals or (ks is not None and None in ks) or n0 + window > _ODS_LIMIT:
            return self._append_one_by_one(timestamp, ks, vals)
        base_ts = timestamp if n0 == 0 else self._base_ts
        tsd = timestamp - base_ts
        z = (tsd << 1) ^ (tsd >> 63)
        tsb = _UV[z] if z < CACHE_SIZE else varlong_bytes(tsd)
        _offset_tables(n0 + window)
        try:
            vlens = list(map(len, vals))
            vbs = list(map(_ZZ.__getitem__, vlens))  # IndexError from 8 KiB on: the general path
            parts: Any = map(_FIELD.__getitem__, vlens)
            if ks is not None:
                klens = list(map(len, ks))
                kbs = list(map(_ZZ.__getitem__, klens))
                parts = map(add, parts, map(_FIELD.__getitem__, klens))
                const = 2 + len(tsb)  # attributes, headers count, timestamp delta
            else:
                const = 3 + len(tsb)  # ... and the null key length
            bodies = list(map(add, map(add, parts, _ODSIZE[n0:n0 + window]), repeat(const)))
            lbs = list(map(_ZZ.__getitem__, bodies))
            sizes = list(accumulate(map(_FIELD.__getitem__, bodies)))
        except (IndexError, TypeError):
            return self._append_one_by_one(timestamp, ks, vals)
        count = window
        full = False
        if limit is not None:
            count = bisect_right(sizes, self._room()) if not self.compression_type else self._fit_compressed(sizes)
            if count == 0 and n0 == 0:
                count = 1  # the first record always fits (it may be larger than the batch)
            if count < window:
                full = True
                if count == 0:
                    return 0, True
                del vals[count:], lbs[count:], vbs[count:]
                if ks is not None:
                    del ks[count:], kbs[count:]
        largest = _FIELD[max(bodies[:count])]
        if largest > self._max_record:
            self._max_record = largest
        ods = _ODS[n0:n0 + count]
        head = b"\x00" + tsb
        if ks is None:
            data = b"".join(chain.from_iterable(zip(lbs, repeat(head), ods, repeat(_NULL), vbs, vals,
                                                    repeat(_EMPTY_HEADERS))))
        else:
            data = b"".join(chain.from_iterable(zip(lbs, repeat(head), ods, kbs, ks, vbs, vals,
                                                    repeat(_EMPTY_HEADERS))))
        if len(data) != sizes[count - 1]:  # pragma: no cover - the sizing above and the encoding disagree
            raise IllegalStateError(f"bulk encoding wrote {len(data)} bytes, sized {sizes[count - 1]}")
        pos = self._pos
        end_pos = pos + len(data)
        if mv is None:
            self._buf += data
        elif end_pos <= self._cap:
            mv[pos:end_pos] = data
        else:
            self._expand()
            self._buf += data
        self._pos = end_pos
        if n0 == 0:
            self._base_ts = timestamp
        if timestamp > self._max_ts:
            self._max_ts = timestamp
        self._n = n0 + count
        return count, full

    def _fit_compressed(self, sizes: list[int]) -> int:
        """How many of the records (cumulative ``sizes``) pass :meth:`try_append`'s check one after the other:
        the estimate grows with every record, so the check is repeated as it does."""
        limit = self.write_limit
        assert limit is not None
        factor = self.estimated_compression_ratio * COMPRESSION_RATE_ESTIMATION_FACTOR
        written = self._pos - HEADER_SIZE
        prev = 0
        for i, cum in enumerate(sizes):
            if (i or self._n) and HEADER_SIZE + int((written + prev) * factor) + cum - prev > limit:
                return i
            prev = cum
        return len(sizes)

    def _room(self) -> int:
        """Record bytes that still fit under ``write_limit`` (Kafka's rule: the estimated size so far plus the
        uncompressed size of the next record)."""
        assert self.write_limit is not None
        return max(self.write_limit - self.estimated_size_in_bytes(), 0)

    def _append_one_by_one(self, timestamp: int, keys: Sequence[bytes | None] | None,
                           values: Sequence[bytes | None]) -> tuple[int, bool]:
        for i, value in enumerate(values):
            if self.try_append(timestamp, keys[i] if keys is not None else None, value) < 0:
                return i, True
        return len(values), False

    def has_room_for(
        self, timestamp: int, key: bytes | None, value: bytes | None, headers: Sequence[Header] = ()
    ) -> bool:
        """Whether one more record fits under ``write_limit`` (always true for the first record)."""
        if self._built is not None:
            return False
        limit = self.write_limit
        if self._n == 0 or limit is None:
            return True
        written = self._pos
        if self.compression_type:
            est = HEADER_SIZE + int(
                (written - HEADER_SIZE)
                * self.estimated_compression_ratio
                * COMPRESSION_RATE_ESTIMATION_FACTOR
            )
        else:
            est = written
        # Cheap upper bound first (MAX_RECORD_OVERHEAD + two 5-byte length varints); exact size only when
        # the bound does not fit, so the answer is the same as Kafka's exact computation.
        bound = 31 + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
        if headers:
            bound += _headers_size(headers)
        if est + bound <= limit:
            return True
        return limit >= est + record_size(self._n, timestamp - self._base_ts, key, value, headers)

    def is_full(self) -> bool:
        """Closed, or holds a record and has reached ``write_limit`` (Kafka's ``isFull``)."""
        if self._built is not None:
            return True
        limit = self.write_limit
        if limit is None:
            return False
        if not self.compression_type:  # uncompressed: the size is exact (estimated_size_in_bytes inlined)
            return self._n > 0 and limit <= self._pos
        return self._n > 0 and limit <= self.estimated_size_in_bytes()

    def estimated_size_in_bytes(self) -> int:
        """The built size once closed, else the estimate (exact when uncompressed)."""
        if self._built is not None:
            return len(self._built)
        if self.compression_type == CompressionType.NONE:
            return self._pos
        written = self._pos - HEADER_SIZE
        return HEADER_SIZE + int(
            written * self.estimated_compression_ratio * COMPRESSION_RATE_ESTIMATION_FACTOR
        )

    @property
    def uncompressed_bytes_written(self) -> int:
        """Header plus records as encoded before compression."""
        return self._raw_size or self._pos

    @property
    def max_record_size(self) -> int:
        """The encoded size of the largest record appended so far (0 while empty)."""
        return self._max_record

    @property
    def num_records(self) -> int:
        return self._n

    @property
    def is_closed(self) -> bool:
        return self._built is not None

    @property
    def compression_ratio(self) -> float:
        """Built records size / uncompressed records size (1.0 before close or when empty)."""
        raw = self._raw_size
        if self._built is None or raw <= HEADER_SIZE:
            return 1.0
        return (len(self._built) - HEADER_SIZE) / (raw - HEADER_SIZE)

    def set_producer_state(
        self, producer_id: int, producer_epoch: int, base_sequence: int, is_transactional: bool
    ) -> None:
        """Set idempotence/transaction fields before close (Kafka's ``setProducerState``)."""
        if self._built is not None:
            raise IllegalStateError(
                "cannot set producer state of a closed batch (this is a bug in the caller)"
            )
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional

    def reopen_and_rewrite_producer_state(
        self, producer_id: int, producer_epoch: int, base_sequence: int, is_transactional: bool
    ) -> None:
        """Rewrite producer fields of an already built batch and recompute its CRC (retry after a reset)."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        built = self._built
        if built is not None and built:
            if isinstance(built, memoryview):  # a view of our buffer: patch it in place
                self._write_header(self._buf, len(built) - HEADER_SIZE)
                return
            out = bytearray(built)
            self._write_header(out, len(built) - HEADER_SIZE)
            self._built = bytes(out)

    # -- closing --------------------------------------------------------------------------------
    def _attributes(self) -> int:
        attrs = int(self.compression_type)
        if self.timestamp_type == 1:
            attrs |= TIMESTAMP_TYPE_MASK
        if self.is_transactional:
            attrs |= TRANSACTIONAL_FLAG
        if self.is_control:
            attrs |= CONTROL_FLAG
        return attrs

    def _write_header(self, out: bytearray, records_size: int) -> None:
        _HEAD.pack_into(
            out,
            0,
            self.base_offset,
            HEADER_SIZE - LOG_OVERHEAD + records_size,
            self.partition_leader_epoch,
            2,
        )
        _TAIL.pack_into(
            out,
            ATTRIBUTES_OFFSET,
            self._attributes(),
            self._n - 1,
            self._base_ts,
            self._max_ts,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self._n,
        )
        with memoryview(out) as mv:
            _U32.pack_into(out, CRC_OFFSET, crc32c(mv[ATTRIBUTES_OFFSET:HEADER_SIZE + records_size]))

    def close(self) -> None:
        """Finish the batch (compress, write header and CRC); later appends raise. Idempotent."""
        if self._built is not None:
            return
        if self._n == 0:
            self._built = b""
            return
        buf = self._buf
        end = self._pos
        self._raw_size = end
        if self.compression_type != CompressionType.NONE:
            with memoryview(buf) as mv:
                payload = compress(self.compression_type, mv[HEADER_SIZE:end], self.compression_level)
            end = HEADER_SIZE + len(payload)
            if end > self._cap:  # incompressible data outgrew the pooled buffer
                self._expand()
                buf = self._buf
            # Over the uncompressed records (same-size assignment on a pooled buffer; an owned one shrinks).
            buf[HEADER_SIZE:self._pos if self._mv is None else end] = payload
            del payload
            self._pos = end
        self._write_header(buf, end - HEADER_SIZE)
        mv = self._mv
        if mv is None:
            self._built = bytes(buf) if len(buf) == end else bytes(memoryview(buf)[:end])
        else:
            self._built = mv[:end]  # zero-copy view of the pooled buffer

    def _expand(self) -> None:
        """Leave the caller's buffer for a private growing copy (a record did not fit in it)."""
        mv = self._mv
        if mv is not None:
            self._buf = bytearray(mv[: self._pos])
            self._mv = None
        self._cap = _UNBOUNDED

    @property
    def buffer(self) -> bytearray:
        """The buffer being written (the caller's until a record outgrows it)."""
        return self._buf

    def build(self) -> bytes | memoryview:
        """Close if needed and return the batch bytes (``b""`` when no record was appended) — a
        ``memoryview`` of the caller's buffer when the builder was given one and it still holds the batch."""
        if self._built is None:
            self.close()
        assert self._built is not None
        return self._built

    def __len__(self) -> int:
        return self._n

    #: Kafka's ``AbstractRecords.estimateSizeInBytesUpperBound`` as a static helper (see module function).
    upper_bound_size = staticmethod(upper_bound_size)
    record_size = staticmethod(record_size)

    def __repr__(self) -> str:
        return (
            f"MemoryRecordsBuilder(codec={self.compression_type.config_name}, records={self._n}, "
            f"estimated_size={self.estimated_size_in_bytes()}, closed={self._built is not None})"
        )
