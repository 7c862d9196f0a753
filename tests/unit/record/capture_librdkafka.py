"""Capture record batches written by librdkafka (confluent-kafka) and store them as test fixtures.

Run ``.venv/bin/python -m tests.unit.record.capture_librdkafka`` to (re)generate
``tests/unit/record/fixtures/librdkafka-<codec>.bin`` and ``librdkafka-meta.json``.

A tiny single-purpose fake broker on 127.0.0.1 answers just enough of the protocol for a producer:

* ApiVersions: a v0 body listing Produce 3-7, Metadata 0-4 and ApiVersions 0, plus Fetch 4-10 and
  FindCoordinator 0 which are never called but gate librdkafka's feature detection: without Fetch v4 it
  does not enable message format v2, without FindCoordinator it disables LZ4 and without Produce v7 +
  Fetch v10 it disables ZSTD -- silently sending *uncompressed* batches instead. A request above v0 gets
  error 35 (UNSUPPORTED_VERSION) with that v0 body, as real brokers do, and the client retries with v0.
* Metadata v0-v4: one broker (itself, node 1), one topic with one partition led by node 1.
* Produce v3-v7: records the raw ``records`` bytes of every partition and answers success.

This module is test tooling: it uses sockets and threads, which the record layer itself never does.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Sequence
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
TOPIC = "capture"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
BASE_TS = 1_700_000_000_000

# (timestamp, key, value, headers) of the records produced for every codec, in order.
EXPECTED: list[tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]] = [
    (BASE_TS, b"key-0", b"value-0 " * 20, ()),
    (BASE_TS + 1, None, b"record without a key " * 5, ()),
    (BASE_TS + 2, b"key-2", None, ()),  # tombstone
    (BASE_TS + 3, b"key-3", b"with headers " * 8, (("h1", b"v1"), ("empty", b""), ("null", None))),
    (BASE_TS + 4, b"", b"", ()),
    (BASE_TS + 5, b"key-5", bytes(range(256)) * 4, (("bin", bytes(range(16))),)),
    (
        BASE_TS - 10,
        b"\xff\x00key-6",
        b"earlier timestamp " * 10,
        (("\u043a\u043b\u044e\u0447", b"\xd0\x96"),),
    ),
    (BASE_TS + 300_000, b"key-7", b"x" * 3000, ()),
]

_API_PRODUCE, _API_FETCH, _API_METADATA, _API_FIND_COORDINATOR, _API_VERSIONS = 0, 1, 3, 10, 18


def _string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> int:
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def bytes_(self) -> bytes | None:
        n = self.take(">i")
        if n < 0:
            return None
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b


class CaptureBroker:
    """Fake broker recording Produce payloads: ``captured`` is a list of ``(produce_version, records)``."""

    def __init__(self, topic: str = TOPIC) -> None:
        self.topic = topic
        self.captured: list[tuple[int, bytes]] = []
        self.cond = threading.Condition()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self.port: int = self._sock.getsockname()[1]
        self._closed = False
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept_loop, daemon=True).start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._closed = True
        for s in [self._sock, *self._conns]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def wait_for(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.captured) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
        return True

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _recv_exact(conn: socket.socket, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            chunk = conn.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                head = self._recv_exact(conn, 4)
                if head is None:
                    return
                frame = self._recv_exact(conn, struct.unpack(">i", head)[0])
                if frame is None:
                    return
                reply = self._handle(frame)
                if reply is not None:
                    conn.sendall(struct.pack(">i", len(reply)) + reply)
        except OSError:
            return

    def _handle(self, frame: bytes) -> bytes | None:
        r = _Reader(frame)
        api_key, version, corr = r.take(">h"), r.take(">h"), r.take(">i")
        r.string()  # client id
        if api_key == _API_VERSIONS:
            return struct.pack(">i", corr) + self._api_versions(0 if version == 0 else 35)
        if api_key == _API_METADATA:
            return struct.pack(">i", corr) + self._metadata(version)
        if api_key == _API_PRODUCE:
            return struct.pack(">i", corr) + self._produce(version, r)
        return None  # unexpected request: let the client time out

    @staticmethod
    def _api_versions(error: int) -> bytes:
        apis = [
            (_API_PRODUCE, 3, 7),
            (_API_FETCH, 4, 10),
            (_API_METADATA, 0, 4),
            (_API_FIND_COORDINATOR, 0, 0),
            (_API_VERSIONS, 0, 0),
        ]
        return struct.pack(">hi", error, len(apis)) + b"".join(struct.pack(">hhh", *a) for a in apis)

    def _metadata(self, v: int) -> bytes:
        out = bytearray()
        if v >= 3:
            out += struct.pack(">i", 0)  # throttle
        out += (
            struct.pack(">i", 1) + struct.pack(">i", 1) + _string("127.0.0.1") + struct.pack(">i", self.port)
        )
        if v >= 1:
            out += _string(None)  # rack
        if v >= 2:
            out += _string("strom-capture")
        if v >= 1:
            out += struct.pack(">i", 1)  # controller
        out += struct.pack(">i", 1) + struct.pack(">h", 0) + _string(self.topic)
        if v >= 1:
            out += b"\x00"  # is_internal
        out += struct.pack(">i", 1) + struct.pack(">hii", 0, 0, 1)
        out += struct.pack(">ii", 1, 1) + struct.pack(">ii", 1, 1)  # replicas [1], isr [1]
        return bytes(out)

    def _produce(self, v: int, r: _Reader) -> bytes:
        r.string()  # transactional id (v3+)
        r.take(">h")  # acks
        r.take(">i")  # timeout
        topics = []
        for _ in range(r.take(">i")):
            name = r.string()
            parts = []
            for _ in range(r.take(">i")):
                index = r.take(">i")
                records = r.bytes_()
                parts.append(index)
                with self.cond:
                    self.captured.append((v, records or b""))
                    self.cond.notify_all()
            topics.append((name, parts))
        out = bytearray(struct.pack(">i", len(topics)))
        for name, parts in topics:
            out += _string(name) + struct.pack(">i", len(parts))
            for index in parts:
                out += struct.pack(">ihqq", index, 0, 0, -1)
                if v >= 5:
                    out += struct.pack(">q", 0)
        out += struct.pack(">i", 0)  # throttle
        return bytes(out)


def capture(
    codec: str,
    records: Sequence[
        tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]
    ] = EXPECTED,
    timeout: float = 15.0,
) -> tuple[int, bytes]:
    """Produce ``records`` with librdkafka using ``codec``; return ``(produce_version, records_bytes)``."""
    from confluent_kafka import Producer

    broker = CaptureBroker()
    try:
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "compression.codec": codec,
                "linger.ms": 200,
                "enable.idempotence": False,
                "message.timeout.ms": int(timeout * 1000),
                "socket.timeout.ms": int(timeout * 1000),
                "broker.address.family": "v4",
                "log_level": 3,  # our fake broker's disconnects are expected; keep the output quiet
            }
        )
        for ts, key, value, headers in records:
            producer.produce(
                TOPIC, value=value, key=key, headers=list(headers) or None, timestamp=ts, partition=0
            )
        left = producer.flush(timeout)
        if left or not broker.wait_for(1, timeout):
            raise TimeoutError(f"librdkafka did not deliver ({left} messages left)")
        if len(broker.captured) != 1:
            raise RuntimeError(f"expected one Produce request, got {len(broker.captured)}")
        return broker.captured[0]
    finally:
        broker.close()


def main() -> None:
    import confluent_kafka

    FIXTURES.mkdir(exist_ok=True)
    meta: dict[str, object] = {
        "confluent_kafka": confluent_kafka.__version__,
        "librdkafka": confluent_kafka.libversion()[0],
        "produce_versions": {},
    }
    for codec in CODECS:
        version, data = capture(codec)
        (FIXTURES / f"librdkafka-{codec}.bin").write_bytes(data)
        meta["produce_versions"][codec] = version  # type: ignore[index]
        print(f"{codec:7s} Produce v{version}: {len(data)} bytes")
    (FIXTURES / "librdkafka-meta.json").write_text(json.dumps(meta, indent=2) + "\n")


if __name__ == "__main__":
    main()
