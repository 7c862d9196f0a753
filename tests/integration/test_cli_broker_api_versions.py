"""``strom broker-api-versions`` (kafka-broker-api-versions.sh) against strom's broker and librdkafka's mock
cluster: one block per broker in the metadata, each line the broker's range and the version strom's clients negotiate with
it; a broker that does not answer gets an ERROR line and the command exits 1."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.admin import AdminClient
from strom.broker_process import BrokerProcess
from strom.network.api_versions import CLIENT_VERSIONS
from strom.protocol.api_keys import ApiKey
from strom.server.apis import load_all
from strom.testing.mock_cluster import MockCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

_HEADER = re.compile(r"^(\S+):(\d+) \(id: (-?\d+) rack: (\S+)\) -> \($")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strom.cli.main", "broker-api-versions", *args],
                          capture_output=True, text=True, timeout=90)


def _blocks(stdout: str) -> dict[int, dict[str, str]]:
    """broker id → {"Name(key)": rest of the line}."""
    out: dict[int, dict[str, str]] = {}
    lines = stdout.splitlines()
    i = 0
    while i < len(lines):
        m = _HEADER.match(lines[i])
        assert m, f"not a broker line: {lines[i]!r}"
        entries: dict[str, str] = {}
        i += 1
        while lines[i] != ")":
            assert lines[i].startswith("\t")
            name, rest = lines[i][1:].rstrip(",").split(": ", 1)
            entries[name] = rest
            i += 1
        out[int(m.group(3))] = entries
        i += 1
    return out


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(data_dir=tmp_path_factory.mktemp("api-versions") / "data") as b:
        yield b


def test_strom_broker(broker: BrokerProcess) -> None:
    r = _cli("--bootstrap-server", broker.bootstrap)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == f"{broker.bootstrap} (id: 1 rack: null) -> ("
    entries = _blocks(r.stdout)[1]
    # (the telemetry APIs, KIP-714, only with somewhere to put clients' metrics: this broker has none)
    telemetry = {ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, ApiKey.PUSH_TELEMETRY}
    offered = {key: (spec.min_version, spec.max_version) for key, spec in load_all().items() if key not in telemetry}
    for key, (lo, hi) in offered.items():
        client_hi = CLIENT_VERSIONS[key][1]
        versions = str(lo) if lo == hi else f"{lo} to {hi}"
        assert entries[f"{ApiKey(key).name.title().replace('_', '')}({key})"] == \
            f"{versions} [usable: {min(hi, client_hi)}]"
    unsupported = {name for name, rest in entries.items() if rest == "UNSUPPORTED"}
    assert len(unsupported) == len(CLIENT_VERSIONS) - len(offered)
    assert "Produce(0)" not in unsupported and "ApiVersions(18)" not in unsupported
    assert {"GetTelemetrySubscriptions(71)", "PushTelemetry(72)"} <= unsupported


def test_mock_cluster_and_a_silent_broker(tmp_path: Path) -> None:
    with MockCluster(3) as mc:
        r = _cli("--bootstrap-server", mc.bootstrap_servers)
        assert r.returncode == 0, r.stderr
        blocks = _blocks(r.stdout)
        assert sorted(blocks) == sorted(mc.broker_ids)
        with AdminClient({"bootstrap.servers": mc.bootstrap_servers}) as admin:
            negotiated = admin.describe_broker_api_versions(mc.broker_ids).result(30)
        for broker_id, entries in blocks.items():
            produce_hi = negotiated[broker_id].api_version(ApiKey.PRODUCE)[1]
            assert entries["Produce(0)"].endswith(f"[usable: {min(produce_hi, CLIENT_VERSIONS[ApiKey.PRODUCE][1])}]")
            # the mock has no DescribeCluster (strom's admin falls back to Metadata for the broker list)
            assert entries["DescribeCluster(60)"] == "UNSUPPORTED"
        config = tmp_path / "client.properties"
        config.write_text("default.api.timeout.ms=3000\nrequest.timeout.ms=1000\n")
        down = mc.broker_ids[-1]
        mc.set_rtt(down, 30_000)  # listed in the metadata, but answers nothing within the timeouts
        r = _cli("--bootstrap-server", mc.bootstrap_servers, "--command-config", str(config))
        assert r.returncode == 1
        errors = [ln for ln in r.stdout.splitlines() if " -> ERROR: " in ln]
        assert len(errors) == 1 and f"(id: {down} " in errors[0], r.stdout
        assert len(_blocks("\n".join(ln for ln in r.stdout.splitlines() if " -> ERROR: " not in ln))) == 2


def test_bad_input() -> None:
    r = _cli()
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "bootstrap" in r.stderr
    r = _cli("--bootstrap-server", "127.0.0.1:1")
    assert r.returncode != 0 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1
