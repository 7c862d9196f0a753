"""``MemoryRecordsBuilder(buffer=...)``: writes into the caller's (pooled) buffer, never resizes it, and builds
a zero-copy view with exactly the bytes a builder owning its buffer produces."""

from __future__ import annotations

import pytest

from strom.record import CompressionType, MemoryRecordsBuilder, RecordBatch

CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4,
          CompressionType.ZSTD]


def _fill(builder: MemoryRecordsBuilder, n: int, value: bytes = b"v" * 50) -> None:
    for i in range(n):
        assert builder.try_append(1_700_000_000_000 + i, b"k%d" % i, value, [("h", b"x")] if i % 3 else ()) == i


@pytest.mark.parametrize("codec", CODECS)
def test_builds_a_view_of_the_given_buffer_equal_to_an_owned_build(codec: CompressionType) -> None:
    buffer = bytearray(4096)
    pooled = MemoryRecordsBuilder(codec, write_limit=4096, buffer=buffer)
    owned = MemoryRecordsBuilder(codec, write_limit=4096)
    _fill(pooled, 20)
    _fill(owned, 20)
    built = pooled.build()
    assert isinstance(built, memoryview) and built.obj is buffer
    assert len(buffer) == 4096  # never resized
    assert bytes(built) == owned.build()
    assert pooled.compression_ratio == owned.compression_ratio
    assert pooled.uncompressed_bytes_written == owned.uncompressed_bytes_written
    assert len(RecordBatch(bytes(built)).records()) == 20


def test_record_larger_than_the_buffer_moves_to_a_private_copy_and_leaves_the_buffer_alone() -> None:
    buffer = bytearray(200)
    export = memoryview(buffer)  # e.g. a previous request still viewing it: a resize would raise BufferError
    builder = MemoryRecordsBuilder(write_limit=200, buffer=buffer)
    builder.append(1, b"k", b"x" * 500)
    assert len(buffer) == 200 and builder.buffer is not buffer
    built = builder.build()
    assert isinstance(built, bytes)
    assert [r.value for r in RecordBatch(built).records()] == [b"x" * 500]
    export.release()


def test_compressed_batch_holding_more_than_the_buffer_uncompressed() -> None:
    buffer = bytearray(1024)
    builder = MemoryRecordsBuilder(CompressionType.GZIP, write_limit=1024, estimated_compression_ratio=0.1,
                                   buffer=buffer)
    _fill(builder, 60, b"a" * 100)  # ~7 KB uncompressed, estimated under 1 KB compressed
    assert len(buffer) == 1024
    records = RecordBatch(bytes(builder.build())).records()
    assert [r.value for r in records] == [b"a" * 100] * 60


def test_rewrite_producer_state_patches_the_view_in_place() -> None:
    buffer = bytearray(1024)
    builder = MemoryRecordsBuilder(write_limit=1024, buffer=buffer)
    _fill(builder, 3)
    built = builder.build()
    builder.reopen_and_rewrite_producer_state(7, 1, 42, False)
    batch = RecordBatch(bytes(built))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 1, 42)
    batch.ensure_valid()  # CRC recomputed
    assert builder.build() is built


def test_buffer_smaller_than_a_header_is_rejected() -> None:
    with pytest.raises(ValueError):
        MemoryRecordsBuilder(buffer=bytearray(10))
