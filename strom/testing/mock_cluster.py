"""librdkafka's built-in mock cluster, driven through ctypes (tests only).

The confluent-kafka wheel bundles librdkafka, which contains a complete in-process mock Kafka cluster
(``rd_kafka_mock_*``): real TCP listeners on 127.0.0.1, topics auto-created with 4 partitions, idempotent
producer sequence checks, and fault injection. This wrapper creates a standalone cluster (``rd_kafka_new`` +
``rd_kafka_mock_cluster_new``), exposes its bootstrap string and the injection calls strom's client tests use:
request errors per API key (optionally with round-trip delays per broker), partition leaders and followers,
brokers down/up, request tracking. See ``../shared/notes/librdkafka-mock.md``.

Usage::

    with MockCluster(3) as mc:
        mc.create_topic("t", 6, 3)
        mc.push_request_errors(ApiKey.PRODUCE, [6, 7])   # NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT
        producer = KafkaProducer(bootstrap_servers=mc.bootstrap_servers, ...)

Thread-safety: the mock runs its own thread; the calls here are thread-safe (librdkafka locks internally).
"""

from __future__ import annotations

import ctypes
import glob
import os
from collections import Counter
from collections.abc import Iterable
from typing import Any

__all__ = ["MockCluster", "find_librdkafka"]

_c_void_p = ctypes.c_void_p
_c_char_p = ctypes.c_char_p
_c_int = ctypes.c_int
_c_int16 = ctypes.c_int16
_c_int32 = ctypes.c_int32
_c_int64 = ctypes.c_int64
_c_size_t = ctypes.c_size_t
RD_KAFKA_PRODUCER = 0


def find_librdkafka() -> str:
    """Path of the librdkafka shared library bundled with confluent-kafka."""
    import confluent_kafka

    base = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
    candidates = sorted(glob.glob(os.path.join(base, "confluent_kafka.libs", "librdkafka*.so*")))
    if not candidates:
        candidates = sorted(glob.glob(os.path.join(os.path.dirname(confluent_kafka.__file__), "**",
                                                   "librdkafka*.so*"), recursive=True))
    if not candidates:
        raise FileNotFoundError("librdkafka shared library not found in the confluent-kafka installation")
    return candidates[0]


def _load() -> ctypes.CDLL:
    lib = ctypes.CDLL(find_librdkafka())
    sig: dict[str, tuple[Any, list[Any]]] = {
        "rd_kafka_conf_new": (_c_void_p, []),
        "rd_kafka_conf_set": (_c_int, [_c_void_p, _c_char_p, _c_char_p, _c_char_p, _c_size_t]),
        "rd_kafka_new": (_c_void_p, [_c_int, _c_void_p, _c_char_p, _c_size_t]),
        "rd_kafka_destroy": (None, [_c_void_p]),
        "rd_kafka_mock_cluster_new": (_c_void_p, [_c_void_p, _c_int]),
        "rd_kafka_mock_cluster_destroy": (None, [_c_void_p]),
        "rd_kafka_mock_cluster_bootstraps": (_c_char_p, [_c_void_p]),
        "rd_kafka_mock_topic_create": (_c_int, [_c_void_p, _c_char_p, _c_int, _c_int]),
        "rd_kafka_mock_topic_set_error": (None, [_c_void_p, _c_char_p, _c_int]),
        "rd_kafka_mock_push_request_errors_array": (None, [_c_void_p, _c_int16, _c_size_t, ctypes.POINTER(_c_int)]),
        "rd_kafka_mock_clear_request_errors": (None, [_c_void_p, _c_int16]),
        "rd_kafka_mock_partition_set_leader": (_c_int, [_c_void_p, _c_char_p, _c_int32, _c_int32]),
        "rd_kafka_mock_partition_set_follower": (_c_int, [_c_void_p, _c_char_p, _c_int32, _c_int32]),
        "rd_kafka_mock_broker_set_down": (_c_int, [_c_void_p, _c_int32]),
        "rd_kafka_mock_broker_set_up": (_c_int, [_c_void_p, _c_int32]),
        "rd_kafka_mock_broker_set_rtt": (_c_int, [_c_void_p, _c_int32, _c_int]),
        "rd_kafka_mock_set_apiversion": (_c_int, [_c_void_p, _c_int16, _c_int16, _c_int16]),
        "rd_kafka_mock_start_request_tracking": (None, [_c_void_p]),
        "rd_kafka_mock_stop_request_tracking": (None, [_c_void_p]),
        "rd_kafka_mock_get_requests": (ctypes.POINTER(_c_void_p), [_c_void_p, ctypes.POINTER(_c_size_t)]),
        "rd_kafka_mock_clear_requests": (None, [_c_void_p]),
        "rd_kafka_mock_request_id": (_c_int32, [_c_void_p]),
        "rd_kafka_mock_request_api_key": (_c_int16, [_c_void_p]),
        "rd_kafka_mock_request_timestamp": (_c_int64, [_c_void_p]),
        "rd_kafka_mock_request_destroy_array": (None, [ctypes.POINTER(_c_void_p), _c_size_t]),
    }
    for name, (restype, argtypes) in sig.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    # Variadic: (mcluster, broker_id, ApiKey, cnt, err1, rtt1, err2, rtt2, ...); argtypes set per call.
    lib.rd_kafka_mock_broker_push_request_error_rtts.restype = _c_int
    return lib


_LIB: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _LIB
    if _LIB is None:
        _LIB = _load()
    return _LIB


class MockCluster:
    """A librdkafka mock cluster of ``num_brokers`` brokers (ids 1..N) on loopback. Close it when done."""

    def __init__(self, num_brokers: int = 3, config: dict[str, str] | None = None) -> None:
        lib = _lib()
        self._lib = lib
        conf = lib.rd_kafka_conf_new()
        err = ctypes.create_string_buffer(512)
        for key, value in {"log_level": "0", **(config or {})}.items():
            if lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), err, len(err)) != 0:
                raise ValueError(f"librdkafka conf {key}={value}: {err.value.decode()}")
        self._rk = lib.rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, len(err))
        if not self._rk:
            raise RuntimeError(f"rd_kafka_new failed: {err.value.decode()}")
        self._mc = lib.rd_kafka_mock_cluster_new(self._rk, num_brokers)
        if not self._mc:
            lib.rd_kafka_destroy(self._rk)
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self.num_brokers = num_brokers
        self.bootstrap_servers: str = lib.rd_kafka_mock_cluster_bootstraps(self._mc).decode()

    @property
    def broker_ids(self) -> list[int]:
        return list(range(1, self.num_brokers + 1))

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"{what} failed with librdkafka error {code}")

    # ----------------------------------------------------------------------------------- topics

    def create_topic(self, topic: str, partitions: int = 4, replication_factor: int = 3) -> None:
        self._check(self._lib.rd_kafka_mock_topic_create(self._mc, topic.encode(), partitions,
                                                         replication_factor), "topic_create")

    def set_topic_error(self, topic: str, error_code: int) -> None:
        """Every metadata answer for ``topic`` carries ``error_code`` (0 clears it)."""
        self._lib.rd_kafka_mock_topic_set_error(self._mc, topic.encode(), error_code)

    def set_partition_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Move leadership (-1 = no leader)."""
        self._check(self._lib.rd_kafka_mock_partition_set_leader(self._mc, topic.encode(), partition, broker_id),
                    "partition_set_leader")

    def set_partition_follower(self, topic: str, partition: int, broker_id: int) -> None:
        self._check(self._lib.rd_kafka_mock_partition_set_follower(self._mc, topic.encode(), partition,
                                                                   broker_id), "partition_set_follower")

    # --------------------------------------------------------------------------------- brokers

    def broker_down(self, broker_id: int) -> None:
        """Close the broker's connections and refuse new ones until :meth:`broker_up`."""
        self._check(self._lib.rd_kafka_mock_broker_set_down(self._mc, broker_id), "broker_set_down")

    def broker_up(self, broker_id: int) -> None:
        self._check(self._lib.rd_kafka_mock_broker_set_up(self._mc, broker_id), "broker_set_up")

    def set_rtt(self, broker_id: int, rtt_ms: int) -> None:
        """Delay every response of ``broker_id`` by ``rtt_ms``."""
        self._check(self._lib.rd_kafka_mock_broker_set_rtt(self._mc, broker_id, rtt_ms), "broker_set_rtt")

    def set_api_version(self, api_key: int, min_version: int, max_version: int) -> None:
        self._check(self._lib.rd_kafka_mock_set_apiversion(self._mc, api_key, min_version, max_version),
                    "set_apiversion")

    # ------------------------------------------------------------------------------ fault injection

    def push_request_errors(self, api_key: int, errors: Iterable[int]) -> None:
        """The next ``len(errors)`` requests of ``api_key`` (any broker) fail with these codes, in order."""
        codes = list(errors)
        array = (_c_int * len(codes))(*codes)
        self._lib.rd_kafka_mock_push_request_errors_array(self._mc, api_key, len(codes), array)

    def push_broker_request_errors(self, broker_id: int, api_key: int,
                                   errors_and_rtts: Iterable[tuple[int, int]]) -> None:
        """The next requests of ``api_key`` to ``broker_id`` fail with ``(error code, delay ms)`` each."""
        pairs = list(errors_and_rtts)
        fn = self._lib.rd_kafka_mock_broker_push_request_error_rtts
        fn.argtypes = [_c_void_p, _c_int32, _c_int16, _c_size_t] + [_c_int, _c_int] * len(pairs)
        flat = [v for pair in pairs for v in pair]
        self._check(fn(self._mc, broker_id, api_key, len(pairs), *flat), "broker_push_request_error_rtts")

    def clear_request_errors(self, api_key: int) -> None:
        self._lib.rd_kafka_mock_clear_request_errors(self._mc, api_key)

    # ---------------------------------------------------------------------------- request tracking

    def start_request_tracking(self) -> None:
        self._lib.rd_kafka_mock_start_request_tracking(self._mc)

    def stop_request_tracking(self) -> None:
        self._lib.rd_kafka_mock_stop_request_tracking(self._mc)

    def requests(self) -> list[tuple[int, int, int]]:
        """Tracked requests as ``(broker_id, api_key, timestamp_us)``, oldest first."""
        count = _c_size_t(0)
        array = self._lib.rd_kafka_mock_get_requests(self._mc, ctypes.byref(count))
        out = []
        try:
            for i in range(count.value):
                req = array[i]
                out.append((self._lib.rd_kafka_mock_request_id(req), self._lib.rd_kafka_mock_request_api_key(req),
                            self._lib.rd_kafka_mock_request_timestamp(req)))
        finally:
            if array:
                self._lib.rd_kafka_mock_request_destroy_array(array, count.value)
        return out

    def request_counts(self) -> Counter[int]:
        """Tracked requests per api key."""
        return Counter(api_key for _b, api_key, _t in self.requests())

    def clear_requests(self) -> None:
        self._lib.rd_kafka_mock_clear_requests(self._mc)

    # ------------------------------------------------------------------------------------ close

    def close(self) -> None:
        if self._mc:
            self._lib.rd_kafka_mock_cluster_destroy(self._mc)
            self._mc = None
        if self._rk:
            self._lib.rd_kafka_destroy(self._rk)
            self._rk = None

    def __enter__(self) -> MockCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass
