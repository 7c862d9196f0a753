"""kafka-broker-api-versions.sh's text: ``NodeApiVersions.to_text`` and the broker line (Kafka's
``NodeApiVersions.toString(true)`` and ``Node.toString``)."""

from __future__ import annotations

import pytest

from strom.cli.broker_api_versions import node_text
from strom.common.structs import Node
from strom.network.api_versions import CLIENT_VERSIONS, NodeApiVersions
from strom.protocol.api_keys import ApiKey
from strom.protocol.messages import REQUESTS


def _lines(versions: NodeApiVersions) -> dict[str, str]:
    text = versions.to_text(line_breaks=True)
    assert text.startswith("(\n\t") and text.endswith("\n)")
    entries = text[3:-2].split(",\n\t")
    return {e.split(": ", 1)[0]: e.split(": ", 1)[1] for e in entries}


def test_usable_versions_and_what_the_node_lacks() -> None:
    produce_lo, produce_hi = CLIENT_VERSIONS[ApiKey.PRODUCE]
    fetch_lo, fetch_hi = CLIENT_VERSIONS[ApiKey.FETCH]
    versions = NodeApiVersions({
        ApiKey.PRODUCE: (3, produce_hi + 5),          # newer broker: strom uses its own latest
        ApiKey.FETCH: (fetch_lo, fetch_hi - 2),       # older broker: the broker's latest
        ApiKey.METADATA: (CLIENT_VERSIONS[ApiKey.METADATA][1] + 1, CLIENT_VERSIONS[ApiKey.METADATA][1] + 3),
        ApiKey.API_VERSIONS: (0, 0),
        999: (0, 2),                                  # an API strom does not know
    })
    lines = _lines(versions)
    assert lines["Produce(0)"] == f"3 to {produce_hi + 5} [usable: {produce_hi}]"
    assert lines["Fetch(1)"] == f"{fetch_lo} to {fetch_hi - 2} [usable: {fetch_hi - 2}]"
    assert lines["Metadata(3)"].endswith("[unusable: node too new]")
    assert lines["ApiVersions(18)"] == "0 [usable: 0]"
    assert lines["UNKNOWN(999)"] == "0 to 2"
    assert lines["CreateTopics(19)"] == "UNSUPPORTED"
    # every API strom knows is listed once, in ascending key order, then the unknown one
    keys = [int(k[k.index("(") + 1:-1]) for k in lines]
    assert keys == sorted(set(REQUESTS) | {999})


def test_node_too_old_and_one_line_form(monkeypatch: pytest.MonkeyPatch) -> None:
    # strom's codecs start every API at v0 today; a client whose oldest ListOffsets is v2 meets a v0-v1 broker
    monkeypatch.setitem(CLIENT_VERSIONS, ApiKey.LIST_OFFSETS, (2, CLIENT_VERSIONS[ApiKey.LIST_OFFSETS][1]))
    versions = NodeApiVersions({ApiKey.LIST_OFFSETS: (0, 1)})
    assert _lines(versions)["ListOffsets(2)"] == "0 to 1 [unusable: node too old]"
    one_line = versions.to_text()
    assert "\n" not in one_line and one_line.startswith("(Produce(0): UNSUPPORTED, Fetch(1): UNSUPPORTED, ")


def test_broker_line() -> None:
    assert node_text(Node(2, "b2.example", 9093, None)) == "b2.example:9093 (id: 2 rack: null)"
    assert node_text(Node(0, "127.0.0.1", 9092, "r1")) == "127.0.0.1:9092 (id: 0 rack: r1)"
