"""Codecs: names, round trips, and the exact framings Java/librdkafka write and read."""

from __future__ import annotations

import gzip
import os
import struct
import tracemalloc

import cramjam
import lz4.frame
import pytest
import zstandard

from strom.record.compression import CompressionType, DecompressedTooLarge, compress, decompress, xxh32

pytestmark = pytest.mark.unit

DATA = os.urandom(300) + b"".join(b"line %d of semi-compressible text\n" % i for i in range(3000))


@pytest.mark.parametrize("codec", list(CompressionType))
def test_roundtrip(codec: CompressionType) -> None:
    for data in (b"", b"x", DATA, bytearray(DATA[:1000]), memoryview(DATA)[5:5000]):
        assert decompress(codec, compress(codec, data)) == bytes(data)
    assert isinstance(compress(codec, DATA), bytes)
    assert isinstance(decompress(codec, compress(codec, DATA)), bytes)


def test_names() -> None:
    assert CompressionType.from_name("gzip") is CompressionType.GZIP
    assert CompressionType.from_name(" LZ4 ") is CompressionType.LZ4
    assert CompressionType.from_name("uncompressed") is CompressionType.NONE
    assert CompressionType.from_name("none") is CompressionType.NONE
    assert CompressionType.ZSTD.config_name == "zstd"
    with pytest.raises(ValueError, match="valid choices: none, uncompressed, gzip, snappy, lz4, zstd"):
        CompressionType.from_name("brotli")
    with pytest.raises(ValueError, match="topic config"):
        CompressionType.from_name("producer")
    assert CompressionType.from_topic_config("producer") is None
    assert CompressionType.from_topic_config("snappy") is CompressionType.SNAPPY
    with pytest.raises(ValueError, match="producer, none"):
        CompressionType.from_topic_config("lzma")
    assert CompressionType.from_attributes(0x13) is CompressionType.LZ4
    with pytest.raises(ValueError):
        CompressionType.from_attributes(5)


def test_snappy_writes_xerial_framing() -> None:
    out = compress(CompressionType.SNAPPY, DATA)
    assert out[:8] == b"\x82SNAPPY\x00"
    assert struct.unpack(">ii", out[8:16]) == (1, 1)
    # 32 KiB input blocks, each INT32-length-prefixed raw snappy
    pos, blocks, plain = 16, 0, b""
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        plain += bytes(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + n]))
        pos += 4 + n
        blocks += 1
    assert plain == DATA
    assert blocks == -(-len(DATA) // (32 * 1024))


def test_snappy_reads_raw_and_odd_xerial() -> None:
    raw = bytes(cramjam.snappy.compress_raw(DATA))  # what librdkafka writes
    assert decompress(CompressionType.SNAPPY, raw) == DATA
    # version/compat written little-endian (seen from some producers): ignored
    odd = b"\x82SNAPPY\x00" + struct.pack("<ii", 1, 1) + struct.pack(">i", len(raw)) + raw
    assert decompress(CompressionType.SNAPPY, odd) == DATA
    # two concatenated xerial streams
    two = compress(CompressionType.SNAPPY, b"abc" * 10) + compress(CompressionType.SNAPPY, b"def")
    assert decompress(CompressionType.SNAPPY, two) == b"abc" * 10 + b"def"
    with pytest.raises(ValueError):
        decompress(CompressionType.SNAPPY, compress(CompressionType.SNAPPY, DATA)[:-3])


def test_lz4_frame_matches_java_layout() -> None:
    out = compress(CompressionType.LZ4, DATA)
    assert out[:4] == b"\x04\x22\x4d\x18"  # frame magic
    assert out[4] == 0x60  # version 01, independent blocks, no checksums, no content size
    assert out[5] == 0x40  # 64 KiB max block size
    assert out[6] == (xxh32(out[4:6]) >> 8) & 0xFF  # correct header checksum (v1/v2)
    assert lz4.frame.decompress(out) == DATA
    # level 9 (Java's default) keeps the fast compressor, other levels use HC
    assert compress(CompressionType.LZ4, DATA, level=9) == out
    assert decompress(CompressionType.LZ4, compress(CompressionType.LZ4, DATA, level=12)) == DATA


def test_xxh32_against_lz4_library() -> None:
    for opts in ({}, {"store_size": False}, {"content_checksum": True}, {"block_checksum": True}):
        frame = lz4.frame.compress(DATA[:100], **opts)
        end = 6 + (8 if frame[4] & 0x08 else 0) + (4 if frame[4] & 0x01 else 0)
        assert frame[end] == (xxh32(frame[4:end]) >> 8) & 0xFF
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a" * 40) == xxh32(bytearray(b"a" * 40))


def test_lz4_reads_old_kafka_broken_header_checksum() -> None:
    frame = bytearray(compress(CompressionType.LZ4, DATA))
    frame[6] = (xxh32(bytes(frame[0:6])) >> 8) & 0xFF  # Kafka 0.8/0.9 hashed the magic too
    assert frame[6] != (xxh32(bytes(frame[4:6])) >> 8) & 0xFF
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(bytes(frame))
    assert decompress(CompressionType.LZ4, bytes(frame)) == DATA


def test_zstd_without_content_size_and_multiple_frames() -> None:
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(DATA)
    assert decompress(CompressionType.ZSTD, no_size) == DATA
    with_size = zstandard.ZstdCompressor().compress(b"tail")
    assert decompress(CompressionType.ZSTD, no_size + with_size) == DATA + b"tail"
    with pytest.raises(ValueError, match="truncated"):
        decompress(CompressionType.ZSTD, no_size[:-10])


def test_gzip_is_a_gzip_member_and_multi_member_reads() -> None:
    out = compress(CompressionType.GZIP, DATA)
    assert out[:3] == b"\x1f\x8b\x08"
    assert gzip.decompress(out) == DATA
    two = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decompress(CompressionType.GZIP, two) == b"first second"
    with pytest.raises(ValueError):
        decompress(CompressionType.GZIP, out[:-20])
    assert decompress(CompressionType.GZIP, compress(CompressionType.GZIP, DATA, level=1)) == DATA


@pytest.mark.parametrize("codec", [c for c in CompressionType if c])
def test_garbage_raises_value_error(codec: CompressionType) -> None:
    with pytest.raises(ValueError):
        decompress(codec, b"\x00\x01garbage that is not compressed data" * 3)


def test_unknown_codec() -> None:
    with pytest.raises(ValueError):
        compress(7, b"x")
    with pytest.raises(ValueError):
        decompress(6, b"x")


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4,
                                   CompressionType.ZSTD])
def test_a_bound_stops_a_decompression_bomb_early(codec: CompressionType) -> None:
    """``max_size``: a block that holds more is refused as soon as that is known, before its output grows far past
    the bound (4 MiB of zeros against a 256 KiB bound: zstd's 4 MiB of zeros is 145 bytes); blocks within it, or at
    it exactly, decompress as without one; a truncated block is still refused."""
    bomb = compress(codec, bytes(4 << 20))
    with pytest.raises(DecompressedTooLarge, match="more than 262144 bytes"):
        decompress(codec, bomb, 256 << 10)
    assert decompress(codec, bomb, 4 << 20) == bytes(4 << 20)
    exact = compress(codec, DATA)
    assert decompress(codec, exact, len(DATA)) == DATA
    with pytest.raises(DecompressedTooLarge):
        decompress(codec, exact, len(DATA) - 1)
    with pytest.raises(ValueError):
        decompress(codec, exact[:-3], 1 << 20)


@pytest.mark.parametrize("max_size", [None, 1 << 20])
def test_an_empty_zstd_block_is_truncated(max_size: int | None) -> None:
    with pytest.raises(ValueError, match="zstd stream is truncated"):
        decompress(CompressionType.ZSTD, b"", max_size)


def test_a_zstd_bomb_is_refused_without_its_output() -> None:
    """256 MiB of zeros in a few kilobytes of zstd: refused with far less than that made (each piece of input fed
    to the decompressor is too small to expand past the bound by more than the bound again)."""
    bomb = compress(CompressionType.ZSTD, bytes(256 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(DecompressedTooLarge):
            decompress(CompressionType.ZSTD, bomb, 8 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(bomb) < 64 << 10 and peak < 32 << 20
