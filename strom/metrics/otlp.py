"""The part of OpenTelemetry's OTLP metrics format (protobuf ``MetricsData``) that KIP-714 clients push: gauges and
sums of number data points, with their attributes and the resource's. A small protobuf reader and writer of their
own (no protobuf dependency); histograms, summaries and exemplars are skipped when read.

Messages read (field numbers of ``opentelemetry/proto/metrics/v1/metrics.proto`` and ``common/v1/common.proto``):
``MetricsData{1: ResourceMetrics*}``, ``ResourceMetrics{1: Resource, 2: ScopeMetrics*}``,
``Resource{1: KeyValue*}``, ``ScopeMetrics{2: Metric*}``, ``Metric{1: name, 5: Gauge, 7: Sum}``,
``Gauge{1: NumberDataPoint*}``, ``Sum{1: NumberDataPoint*, 2: temporality, 3: monotonic}``,
``NumberDataPoint{7: KeyValue*, 2: start ns, 3: time ns, 4: double, 6: sfixed64}``,
``KeyValue{1: key, 2: AnyValue}``, ``AnyValue{1: string, 2: bool, 3: int64, 4: double}``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from strom.record.varint import decode_uvarint64, uvarint64_bytes

__all__ = ["OtlpError", "DataPoint", "MetricPoints", "parse_metrics_data", "encode_metrics_data",
           "DELTA", "CUMULATIVE", "GAUGE", "SUM"]

DELTA, CUMULATIVE = 1, 2  # AggregationTemporality
GAUGE, SUM = "gauge", "sum"

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


class OtlpError(ValueError):
    """The payload is not a readable OTLP ``MetricsData``."""


@dataclass(frozen=True, slots=True)
class DataPoint:
    attributes: tuple[tuple[str, str], ...]
    time_unix_nano: int
    value: float


@dataclass(frozen=True, slots=True)
class MetricPoints:
    name: str
    kind: str  # GAUGE or SUM
    temporality: int  # DELTA / CUMULATIVE for a sum, 0 for a gauge
    monotonic: bool
    points: tuple[DataPoint, ...]
    resource: tuple[tuple[str, str], ...]


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    try:
        return decode_uvarint64(buf, pos)
    except IndexError:
        raise OtlpError("truncated varint") from None
    except ValueError:
        raise OtlpError("varint too long") from None


def _fields(buf: memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """(field number, wire type, value): an int for varint / fixed fields, a view for length-delimited ones."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, pos = _varint(buf, pos)
            yield number, wire, value
        elif wire == _I64:
            if pos + 8 > end:
                raise OtlpError("truncated fixed64")
            yield number, wire, int.from_bytes(buf[pos:pos + 8], "little")
            pos += 8
        elif wire == _LEN:
            n, pos = _varint(buf, pos)
            if pos + n > end:
                raise OtlpError("truncated length-delimited field")
            yield number, wire, buf[pos:pos + n]
            pos += n
        elif wire == _I32:
            if pos + 4 > end:
                raise OtlpError("truncated fixed32")
            yield number, wire, int.from_bytes(buf[pos:pos + 4], "little")
            pos += 4
        else:
            raise OtlpError(f"unsupported protobuf wire type {wire}")


def _text(v: int | memoryview) -> str:
    if not isinstance(v, memoryview):
        raise OtlpError("a string field is not length-delimited")
    try:
        return bytes(v).decode()
    except UnicodeDecodeError as e:
        raise OtlpError(f"a string is not UTF-8: {e}") from None


def _msg(v: int | memoryview) -> memoryview:
    if not isinstance(v, memoryview):
        raise OtlpError("a message field is not length-delimited")
    return v


def _any_value(buf: memoryview) -> str:
    for number, _wire, v in _fields(buf):
        if number == 1:
            return _text(v)
        if number == 2:
            return "true" if v else "false"
        if number == 3 and isinstance(v, int):
            return str(v - (1 << 64) if v >= 1 << 63 else v)
        if number == 4 and isinstance(v, int):
            return repr(struct.unpack("<d", v.to_bytes(8, "little"))[0])
    return ""


def _key_value(buf: memoryview) -> tuple[str, str]:
    key = value = ""
    for number, _wire, v in _fields(buf):
        if number == 1:
            key = _text(v)
        elif number == 2:
            value = _any_value(_msg(v))
    return key, value


def _data_point(buf: memoryview) -> DataPoint | None:
    attrs: list[tuple[str, str]] = []
    t = 0
    value: float | None = None
    for number, wire, v in _fields(buf):
        if number == 7:
            attrs.append(_key_value(_msg(v)))
        elif number == 3 and wire == _I64:
            t = int(v)  # type: ignore[arg-type]
        elif number == 4 and wire == _I64:
            value = struct.unpack("<d", int(v).to_bytes(8, "little"))[0]  # type: ignore[arg-type]
        elif number == 6 and wire == _I64:
            n = int(v)  # type: ignore[arg-type]
            value = float(n - (1 << 64) if n >= 1 << 63 else n)
    return None if value is None else DataPoint(tuple(attrs), t, value)


def _metric(buf: memoryview, resource: tuple[tuple[str, str], ...]) -> MetricPoints | None:
    name = ""
    kind: str | None = None
    temporality, monotonic = 0, False
    points: list[DataPoint] = []
    for number, _wire, v in _fields(buf):
        if number == 1:
            name = _text(v)
        elif number in (5, 7):
            kind = GAUGE if number == 5 else SUM
            for n2, _w2, v2 in _fields(_msg(v)):
                if n2 == 1:
                    p = _data_point(_msg(v2))
                    if p is not None:
                        points.append(p)
                elif n2 == 2 and number == 7:
                    temporality = int(v2)  # type: ignore[arg-type]
                elif n2 == 3 and number == 7:
                    monotonic = bool(v2)
    if kind is None or not name:
        return None  # a histogram, summary or exponential histogram: not kept
    return MetricPoints(name, kind, temporality, monotonic, tuple(points), resource)


def parse_metrics_data(payload: bytes | memoryview) -> list[MetricPoints]:
    """Every gauge and sum of an OTLP ``MetricsData``; :class:`OtlpError` when it cannot be read."""
    out: list[MetricPoints] = []
    for number, _wire, rm in _fields(memoryview(payload)):
        if number != 1:
            continue
        resource: tuple[tuple[str, str], ...] = ()
        scopes: list[memoryview] = []
        for n2, _w2, v in _fields(_msg(rm)):
            if n2 == 1:
                resource = tuple(_key_value(_msg(kv)) for n3, _w3, kv in _fields(_msg(v)) if n3 == 1)
            elif n2 == 2:
                scopes.append(_msg(v))
        for scope in scopes:
            for n3, _w3, m in _fields(scope):
                if n3 == 2:
                    metric = _metric(_msg(m), resource)
                    if metric is not None:
                        out.append(metric)
    return out


# -- writing (strom's tests and clients) -----------------------------------------------------------------------------
def _key(number: int, wire: int) -> bytes:
    return uvarint64_bytes(number << 3 | wire)


def _len_field(number: int, data: bytes) -> bytes:
    return _key(number, _LEN) + uvarint64_bytes(len(data)) + data


def _enc_kv(key: str, value: str) -> bytes:
    return _len_field(1, key.encode()) + _len_field(2, _len_field(1, value.encode()))


def encode_metrics_data(metrics: list[MetricPoints]) -> bytes:
    """An OTLP ``MetricsData`` of ``metrics`` (one ResourceMetrics per distinct resource, in order)."""
    by_resource: dict[tuple[tuple[str, str], ...], list[MetricPoints]] = {}
    for m in metrics:
        by_resource.setdefault(m.resource, []).append(m)
    out = bytearray()
    for resource, ms in by_resource.items():
        res = b"".join(_len_field(1, _enc_kv(k, v)) for k, v in resource)
        scope = bytearray()
        for m in ms:
            points = b""
            for p in m.points:
                dp = b"".join(_len_field(7, _enc_kv(k, v)) for k, v in p.attributes)
                dp += _key(3, _I64) + p.time_unix_nano.to_bytes(8, "little") + _key(4, _I64) + struct.pack("<d", p.value)
                points += _len_field(1, dp)
            if m.kind == SUM:
                points += _key(2, _VARINT) + uvarint64_bytes(m.temporality) + _key(3, _VARINT) + uvarint64_bytes(int(m.monotonic))
            scope += _len_field(2, _len_field(1, m.name.encode()) + _len_field(5 if m.kind == GAUGE else 7, points))
        out += _len_field(1, _len_field(1, res) + _len_field(2, bytes(scope)))
    return bytes(out)
