"""CRC-32C (Castagnoli) as used by the RecordBatch v2 header.

Polynomial 0x1EDC6F41 (reflected 0x82F63B78), initial value 0xFFFFFFFF, final XOR 0xFFFFFFFF; check value
``crc32c(b"123456789") == 0xE3069283``. The batch CRC covers bytes 21 (attributes) to the end of the
batch (see ``strom.record.header``).

Kafka counterpart: ``org.apache.kafka.common.utils.Crc32C``. Wraps the hardware-accelerated ``crc32c``
package. Thread-safe.
"""

from __future__ import annotations

from crc32c import crc32c as _crc32c

__all__ = ["crc32c"]


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32C of ``data`` as an unsigned 32-bit int; pass a previous result as ``value`` to continue it."""
    return _crc32c(data, value)
