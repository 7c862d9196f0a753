"""Record-batch compression codecs, byte-compatible with the Java client.

The codec id lives in bits 0-2 of the batch attributes; the whole records block after the 61-byte header
is one compressed stream. Formats written (and read):

* GZIP (1): a gzip member (RFC 1952) as ``java.util.zip.GZIPOutputStream`` writes it. Concatenated members
  are accepted on read.
* SNAPPY (2): Java (xerial ``SnappyOutputStream``) framing::

      magic  \\x82 S N A P P Y \\x00   (8 bytes)
      version INT32 = 1, compatible INT32 = 1
      repeated: block length INT32 (big-endian), raw snappy block (of <= 32 KiB input)

  On read both the xerial framing and a bare raw snappy block (what librdkafka writes) are accepted; the
  version/compat fields are ignored (some producers write them little-endian).
* LZ4 (3): the LZ4 *frame* format (magic 0x184D2204), independent 64 KiB blocks, no content size and no
  checksums: the FLG/BD bytes ``0x60 0x40`` that Java's ``Lz4BlockOutputStream`` writes. Magic v0 message
  sets (Kafka < 0.10) were written with a wrong header-checksum byte (computed over the magic number too);
  on read a frame whose header checksum does not verify is retried with the correct checksum.
* ZSTD (4): one zstd frame; on read, frames without a content size and concatenated frames are accepted.

Levels (``level=None`` is the Java default): gzip 6 (``Deflater.DEFAULT_COMPRESSION``); lz4: ``None`` or 9
(Java's default ``compression.lz4.level``, which keeps Java's fast compressor) use LZ4 fast, other values
use LZ4-HC at that level; zstd 3; snappy has no levels.

Kafka counterpart: ``org.apache.kafka.common.record.CompressionType`` and ``o.a.k.common.compress.*``.
Pure functions, no I/O, thread-safe (no compressor state is shared between calls).
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

__all__ = ["MAX_DECOMPRESSED_BATCH", "CompressionType", "DecompressedTooLarge", "compress", "decompress", "xxh32"]

# What a records block may decompress to, for every reader of batches (the broker's validator, the consumer, the
# log's timestamp search): far above any producer's batches (their batch.size bounds them before or after
# compression), low enough that a decompression bomb (1 MB of zstd can stand for 32 GB) is refused before it
# exhausts a process's memory. Kafka's readers stream the records instead.
MAX_DECOMPRESSED_BATCH = 256 << 20


class CompressionType(IntEnum):
    """Codec id as stored in the attributes' low three bits."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def config_name(self) -> str:
        """The name used in ``compression.type`` configs (``"none"``, ``"gzip"`` ...)."""
        return self.name.lower()

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        """Parse a producer ``compression.type`` value (case-insensitive); ``"uncompressed"`` means NONE.

        Raises ``ValueError`` naming the valid choices. ``"producer"`` (a topic-level value) is rejected
        here; use :meth:`from_topic_config` for topic configs.
        """
        key = name.strip().lower() if isinstance(name, str) else name
        codec = _NAMES.get(key)  # type: ignore[arg-type]
        if codec is None:
            hint = " ('producer' is only valid as a topic config)" if key == "producer" else ""
            raise ValueError(
                f"invalid compression type {name!r}{hint}; valid choices: none, uncompressed, gzip, snappy, "
                "lz4, zstd"
            )
        return codec

    @classmethod
    def from_topic_config(cls, name: str) -> CompressionType | None:
        """Parse a topic/broker ``compression.type``: ``"producer"`` gives ``None`` (keep the producer's)."""
        if isinstance(name, str) and name.strip().lower() == "producer":
            return None
        try:
            return cls.from_name(name)
        except ValueError:
            raise ValueError(
                f"invalid compression type {name!r}; valid choices: producer, none, uncompressed, gzip, "
                "snappy, lz4, zstd"
            ) from None

    @classmethod
    def from_attributes(cls, attributes: int) -> CompressionType:
        """The codec encoded in batch ``attributes``; ``ValueError`` for ids 5-7."""
        try:
            return cls(attributes & 0x07)
        except ValueError:
            raise ValueError(f"unknown compression codec id {attributes & 0x07}") from None


_NAMES: dict[str, CompressionType] = {
    "none": CompressionType.NONE,
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}

Buffer = bytes | bytearray | memoryview

# -- gzip -------------------------------------------------------------------------------------------

_GZIP_WBITS = 16 + zlib.MAX_WBITS


def _gzip_compress(data: Buffer, level: int | None) -> bytes:
    c = zlib.compressobj(6 if level is None or level < 0 else level, zlib.DEFLATED, _GZIP_WBITS)
    return c.compress(data) + c.flush()


def _gzip_decompress(data: Buffer, max_size: int) -> bytes:
    parts = []
    total = 0
    while True:
        d = zlib.decompressobj(_GZIP_WBITS)
        out = d.decompress(data, max_size - total + 1)
        total += len(out)
        if total > max_size:
            raise DecompressedTooLarge(max_size)
        parts.append(out)
        if not d.eof:
            raise ValueError("gzip stream is truncated")
        data = d.unused_data
        if not data:
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


# -- snappy (xerial framing) ------------------------------------------------------------------------

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
_I32 = struct.Struct(">i")


def _snappy_compress(data: Buffer) -> bytes:
    mv = memoryview(data)
    parts: list[bytes | object] = [XERIAL_HEADER]
    compress_raw = cramjam.snappy.compress_raw
    for start in range(0, len(mv), XERIAL_BLOCK_SIZE):
        block = compress_raw(mv[start : start + XERIAL_BLOCK_SIZE])
        parts.append(_I32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)  # type: ignore[arg-type]


def _snappy_raw_length(block: memoryview) -> int:
    """The uncompressed length a raw snappy block declares (its leading unsigned varint)."""
    n = shift = 0
    for i in range(min(5, len(block))):
        n |= (block[i] & 0x7F) << shift
        if block[i] < 0x80:
            return n
        shift += 7
    raise ValueError("snappy block length does not parse")


def _snappy_decompress(data: Buffer, max_size: int) -> bytes:
    mv = memoryview(data)
    decompress_raw = cramjam.snappy.decompress_raw
    if len(mv) < 16 or mv[:8] != XERIAL_MAGIC:
        if _snappy_raw_length(mv) > max_size:
            raise DecompressedTooLarge(max_size)
        return bytes(decompress_raw(mv))
    parts = []
    total = 0
    pos, end = 16, len(mv)
    while pos < end:
        if end - pos >= 16 and mv[pos : pos + 8] == XERIAL_MAGIC:  # concatenated xerial streams
            pos += 16
            continue
        if end - pos < 4:
            raise ValueError("xerial snappy stream ends inside a block length")
        (n,) = _I32.unpack_from(mv, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise ValueError("xerial snappy block length exceeds the stream")
        total += _snappy_raw_length(mv[pos : pos + n])
        if total > max_size:
            raise DecompressedTooLarge(max_size)
        parts.append(decompress_raw(mv[pos : pos + n]))
        pos += n
    return b"".join(parts)


# -- lz4 (frame format) -----------------------------------------------------------------------------

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of ``data`` (pure Python; only used on the few bytes of an LZ4 frame descriptor)."""
    n = len(data)
    pos = 0
    if n >= 16:
        v1, v2, v3, v4 = (seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32
        while pos + 16 <= n:
            a, b, c, d = struct.unpack_from("<4I", data, pos)
            v1 = (_rotl((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + b * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + c * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + d * _P2) & _M32, 13) * _P1) & _M32
            pos += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (k,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + k * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


def _lz4_compress(data: Buffer, level: int | None) -> bytes:
    return lz4.frame.compress(
        data,
        compression_level=0 if level is None or level == 9 else level,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        block_checksum=False,
        store_size=False,
    )


def _lz4_fix_header_checksum(data: Buffer) -> bytes:
    """Rewrite the frame-descriptor checksum byte (Kafka < 0.10 computed it over the magic number too)."""
    buf = bytearray(data)
    if len(buf) < 7 or buf[:4] != b"\x04\x22\x4d\x18":
        raise ValueError("not an LZ4 frame (bad magic)")
    desc_end = 6 + (8 if buf[4] & 0x08 else 0) + (4 if buf[4] & 0x01 else 0)
    if len(buf) <= desc_end:
        raise ValueError("LZ4 frame descriptor is truncated")
    buf[desc_end] = (xxh32(bytes(buf[4:desc_end])) >> 8) & 0xFF
    return bytes(buf)


def _lz4_frame(data: Buffer, max_size: int) -> bytes:
    d = lz4.frame.LZ4FrameDecompressor()
    step = min(max_size + 1, 1 << 20)  # (the decompressor allocates what it may return: pieces of 1 MiB at most)
    parts = [d.decompress(data, step)]
    total = len(parts[0])
    while not d.eof and total <= max_size and not d.needs_input:
        out = d.decompress(b"", step)
        parts.append(out)
        total += len(out)
    if total > max_size:
        raise DecompressedTooLarge(max_size)
    if not d.eof:
        raise ValueError("lz4: the frame is truncated")
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _lz4_decompress(data: Buffer, max_size: int) -> bytes:
    try:
        return _lz4_frame(data, max_size)
    except RuntimeError as exc:
        if "header checksum" not in str(exc).lower() and "headerchecksum" not in str(exc).lower():
            raise ValueError(f"lz4: {exc}") from None
    try:
        return _lz4_frame(_lz4_fix_header_checksum(data), max_size)
    except RuntimeError as exc:
        raise ValueError(f"lz4: {exc}") from None


# -- zstd -------------------------------------------------------------------------------------------


def _zstd_compress(data: Buffer, level: int | None) -> bytes:
    # A fresh context per call: zstandard contexts must not be shared between threads.
    return zstandard.ZstdCompressor(level=3 if level is None else level).compress(data)


# A zstd block of 4 bytes (run-length encoded) may stand for 128 KiB: the input is fed in pieces so small that one
# piece cannot take the output far past the bound.
_ZSTD_MAX_RATIO = 1 << 15


def _zstd_decompress(data: Buffer, max_size: int) -> bytes:
    dctx = zstandard.ZstdDecompressor()
    parts = []
    total = 0
    remaining: Buffer = data
    step = max(512, max_size // _ZSTD_MAX_RATIO)
    while True:
        dobj = dctx.decompressobj()
        mv = memoryview(remaining)
        for start in range(0, len(mv), step):
            out = dobj.decompress(mv[start:start + step])
            parts.append(out)
            total += len(out)
            if total > max_size:
                raise DecompressedTooLarge(max_size)
            if dobj.eof:
                break
        if not dobj.eof:
            raise ValueError("zstd stream is truncated")
        remaining = dobj.unused_data
        if not remaining:
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


# -- dispatch ---------------------------------------------------------------------------------------


def compress(codec: CompressionType | int, data: Buffer, level: int | None = None) -> bytes:
    """Compress ``data`` with ``codec`` in the format Kafka expects inside a record batch."""
    if codec == CompressionType.LZ4:
        return _lz4_compress(data, level)
    if codec == CompressionType.ZSTD:
        return _zstd_compress(data, level)
    if codec == CompressionType.SNAPPY:
        return _snappy_compress(data)
    if codec == CompressionType.GZIP:
        return _gzip_compress(data, level)
    if codec == CompressionType.NONE:
        return bytes(data)
    raise ValueError(f"unknown compression codec {codec!r}")


class DecompressedTooLarge(ValueError):
    """A records block that decompresses to more than the caller's ``max_size``."""

    def __init__(self, max_size: int) -> None:
        super().__init__(f"decompresses to more than {max_size} bytes")


def decompress(codec: CompressionType | int, data: Buffer, max_size: int | None = None) -> bytes:
    """Decompress a batch's records block; raises ``ValueError`` when the stream is corrupt, and
    :class:`DecompressedTooLarge` (a ``ValueError``) as soon as it is known to hold more than ``max_size`` bytes
    (default :data:`MAX_DECOMPRESSED_BATCH`: the bound against decompression bombs; the output is never made much
    larger than it)."""
    if max_size is None:
        max_size = MAX_DECOMPRESSED_BATCH
    try:
        if codec == CompressionType.LZ4:
            return _lz4_decompress(data, max_size)
        if codec == CompressionType.ZSTD:
            return _zstd_decompress(data, max_size)
        if codec == CompressionType.SNAPPY:
            return _snappy_decompress(data, max_size)
        if codec == CompressionType.GZIP:
            return _gzip_decompress(data, max_size)
        if codec == CompressionType.NONE:
            return bytes(data)
    except ValueError:
        raise
    except Exception as exc:  # codec libraries raise their own error types (zlib.error, ZstdError ...)
        raise ValueError(f"{CompressionType(codec).config_name}: {exc}") from None
    raise ValueError(f"unknown compression codec {codec!r}")
