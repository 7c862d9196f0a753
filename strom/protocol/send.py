"""A response frame made of encoded bytes and record regions that are not in memory (zero-copy Fetch).

Kafka counterparts: ``TransferableRecords`` (``FileRecords`` sends itself with ``transferTo``) and
``MultiRecordsSend`` (a response written as a sequence of sends: the encoded struct bytes around each records
field, and each records field straight from its file).

Layout of a :class:`MultiSend`: ``parts`` alternate between ``bytes``-like chunks of the encoded frame (size
prefix, header, every field but the records) and :class:`TransferableRecords` (the records field's payload;
its length prefix is in the chunk before it). The frame's size prefix counts every part, so whoever writes the
parts must write each region exactly: :attr:`TransferableRecords.size` bytes, no more, no fewer.

This module does no I/O: a :class:`TransferableRecords` is opaque here (a size and, for whoever writes it, a way
to get its bytes); the socket layer decides whether to ``sendfile`` it or to read it into memory.
Not thread-safe (plain values).
"""

from __future__ import annotations

from typing import Any

__all__ = ["TransferableRecords", "SendBuilder", "MultiSend"]


class TransferableRecords:
    """Record bytes that live elsewhere (a file region) and are written to the connection by the socket layer.

    ``size`` bytes at ``position`` of the file open as :meth:`fileno` (what ``sendfile`` needs). Subclasses
    implement :meth:`fileno`, :meth:`read_bytes` (the bytes in memory, for transports that cannot send from a
    file, e.g. TLS) and :meth:`release` (give back what holds the bytes; idempotent). Truthiness and ``len()``
    follow :attr:`size`, so code that only measures records treats a region like ``bytes``.
    """

    __slots__ = ("size", "position")

    def __init__(self, size: int, position: int = 0) -> None:
        self.size = size
        self.position = position

    def __len__(self) -> int:
        return self.size

    def fileno(self) -> int:
        raise NotImplementedError

    def read_bytes(self) -> bytes:
        raise NotImplementedError

    def release(self) -> None:
        raise NotImplementedError


class SendBuilder(bytearray):
    """The output buffer of an encoder that may meet :class:`TransferableRecords`: the encoded bytes stay in
    this bytearray; :meth:`add_transferable` remembers where a region goes (the generated codecs call it through
    ``write_records`` / ``write_compact_records``)."""

    def __init__(self, initial: Any = b"") -> None:
        super().__init__(initial)
        self.transferables: list[tuple[int, TransferableRecords]] = []  # (offset in self, region)
        self.transferable_size = 0

    def add_transferable(self, records: TransferableRecords) -> None:
        self.transferables.append((len(self), records))
        self.transferable_size += records.size

    @property
    def total_size(self) -> int:
        """Bytes the frame will have on the wire: encoded bytes plus every region."""
        return len(self) + self.transferable_size

    def build(self) -> bytearray | MultiSend:
        """Itself when no region was added (a plain frame), else the :class:`MultiSend` of its parts."""
        if not self.transferables:
            return self
        view = memoryview(self)
        parts: list[Any] = []
        start = 0
        for offset, region in self.transferables:
            if offset > start:
                parts.append(view[start:offset])
            parts.append(region)
            start = offset
        if start < len(self):
            parts.append(view[start:])
        return MultiSend(parts, self.total_size)


class MultiSend:
    """One response frame as ``parts`` (bytes-like chunks and :class:`TransferableRecords`) of ``size`` bytes."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[Any], size: int) -> None:
        self.parts = parts
        self.size = size

    def __len__(self) -> int:
        return self.size

    @property
    def regions(self) -> list[TransferableRecords]:
        return [p for p in self.parts if isinstance(p, TransferableRecords)]

    def read_parts(self) -> list[Any]:
        """The frame's parts in memory, each region read, nothing joined (for a transport that takes a list of
        buffers, e.g. TLS: the record bytes are not copied into a frame first). Raises what a region's
        ``read_bytes`` raises, e.g. an ``OSError`` when its file was cut shorter than the region."""
        parts = [p.read_bytes() if isinstance(p, TransferableRecords) else p for p in self.parts]
        size = sum(map(len, parts))
        if size != self.size:  # a region must give exactly its size; anything else would corrupt the stream
            raise ValueError(f"frame of {self.size} bytes assembled into {size} bytes")
        return parts

    def to_bytes(self) -> bytes:
        """The whole frame in memory (every region read, see :meth:`read_parts`)."""
        return b"".join(self.read_parts())

    def release(self) -> None:
        for p in self.parts:
            if isinstance(p, TransferableRecords):
                p.release()
