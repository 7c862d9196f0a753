"""Interceptor chain: ordered on_send, swallowed exceptions, on_send_error, InterceptorCallback."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

from strom.common.structs import TopicPartition
from strom.producer.interceptors import InterceptorCallback, ProducerInterceptors, make_interceptors
from strom.producer.record import ProducerRecord, RecordMetadata

pytestmark = pytest.mark.unit


class Appender:
    """Appends its tag to the value; records every acknowledgement."""

    def __init__(self, tag: str = "x", fail_on_send: bool = False, fail_on_ack: bool = False) -> None:
        self.tag = tag
        self.fail_on_send = fail_on_send
        self.fail_on_ack = fail_on_ack
        self.acks: list[tuple[Any, Any]] = []
        self.closed = False
        self.configs: dict | None = None

    def configure(self, configs: dict) -> None:
        self.configs = configs

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        if self.fail_on_send:
            raise RuntimeError("boom")
        return dataclasses.replace(record, value=record.value + self.tag)

    def on_acknowledgement(self, metadata: Any, exception: Any) -> None:
        self.acks.append((metadata, exception))
        if self.fail_on_ack:
            raise RuntimeError("ack boom")

    def close(self) -> None:
        self.closed = True
        raise RuntimeError("close boom")


def test_on_send_runs_in_order_and_chains() -> None:
    """§18 item 10: on_send in configured order, each sees the previous result."""
    chain = ProducerInterceptors([Appender("a"), Appender("b")])
    assert chain.on_send(ProducerRecord("t", "v")).value == "vab"


def test_on_send_exception_swallowed_chain_continues(caplog: pytest.LogCaptureFixture) -> None:
    """§18 item 10: an exception is logged and swallowed; the chain continues with the last good record."""
    chain = ProducerInterceptors([Appender("a"), Appender("b", fail_on_send=True), Appender("c")])
    with caplog.at_level(logging.WARNING):
        assert chain.on_send(ProducerRecord("t", "v", partition=3)).value == "vac"
    assert "Error executing interceptor onSend callback for topic: t, partition: 3" in caplog.text


def test_on_send_error_reaches_every_interceptor() -> None:
    """§18 item 11: on_send_error tells every interceptor (placeholder metadata, partition from tp, the record
    or -1), even when one of them raises."""
    a, b = Appender(fail_on_ack=True), Appender()
    chain = ProducerInterceptors([a, b])
    error = ValueError("bad")
    chain.on_send_error(ProducerRecord("t", "v"), None, error)
    chain.on_send_error(ProducerRecord("t", "v", partition=4), None, error)
    chain.on_send_error(ProducerRecord("t", "v"), TopicPartition("t", 7), error)
    chain.on_send_error(None, None, error)
    for interceptor in (a, b):
        parts = [m.partition if m is not None else None for m, _ in interceptor.acks]
        assert parts == [-1, 4, 7, None]
        assert all(e is error for _, e in interceptor.acks)
        assert all(m is None or m.offset == -1 for m, _ in interceptor.acks)


def test_interceptor_callback_exactly_one_non_null() -> None:
    """§18 item 9: the user callback gets exactly one of (metadata, exception); interceptors always get
    metadata (a -1 placeholder on error)."""
    seen: list[tuple[Any, Any]] = []
    interceptor = Appender()
    tp = TopicPartition("t", 1)
    cb = InterceptorCallback(lambda m, e: seen.append((m, e)), ProducerInterceptors([interceptor]), tp)
    md = RecordMetadata("t", 1, 5, 10, -1, 1)
    cb(md, None)
    err = RuntimeError("x")
    cb(None, err)
    assert seen == [(md, None), (None, err)]
    assert interceptor.acks[0] == (md, None)
    assert interceptor.acks[1][0] == RecordMetadata.unknown(tp) and interceptor.acks[1][1] is err
    InterceptorCallback(None, ProducerInterceptors(), tp)(md, None)  # no user callback, no interceptors


def test_close_swallows_and_make_interceptors() -> None:
    """SPEC §2.1 step 6 / §2.5: interceptor.classes built in order; close errors are logged, not raised."""
    made = make_interceptors([Appender, f"{__name__}.Appender", Appender("z")], {"client.id": "c"})
    assert len(made) == 3 and made.interceptors[0].configs == {"client.id": "c"}
    made.close()
    assert all(i.closed for i in made.interceptors)
    with pytest.raises(TypeError):
        make_interceptors([object()])
    assert not ProducerInterceptors()
