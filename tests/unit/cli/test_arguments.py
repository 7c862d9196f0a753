"""Argument checks that need no broker: one error line, exit code 2, Kafka's messages; --help with examples."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from strom.cli.console_producer import LineReader
from strom.cli.errors import CliError
from strom.cli.main import COMMANDS, main

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]

BS = ["--bootstrap-server", "127.0.0.1:1"]


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """main() quiets the root logger for client commands: undo that for the rest of the session."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.setLevel(level)
    root.handlers[:] = handlers


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_on_every_command_shows_examples(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "Examples:" in out or "Example" in out
    assert f"strom {command}" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["topics", *BS], "Command must include exactly one action: --list, --describe, --create, --alter or --delete"),
    (["topics", *BS, "--list", "--create"], "Command must include exactly one action"),
    (["topics", "--list"], 'Missing required argument "[bootstrap-server]"'),
    (["topics", *BS, "--create"], 'Missing required argument "[topic]"'),
    (["topics", *BS, "--alter", "--topic", "t"], 'Missing required argument "[partitions]"'),
    (["topics", *BS, "--list", "--partitions", "3"], "Option \"[partitions]\" can't be used with option \"[list]\""),
    (["topics", *BS, "--alter", "--topic", "t", "--partitions", "3", "--replication-factor", "2"],
     "Option \"[replication-factor]\" can't be used with option \"[alter]\""),
    (["topics", *BS, "--list", "--partitions", "x"], "argument --partitions: invalid int value: 'x'"),
    (["topics", *BS, "--list", "--bogus"], "unrecognized arguments: --bogus (see 'strom topics --help')"),
    (["console-consumer", *BS], "Exactly one of include/topic is required."),
    (["console-consumer", *BS, "--topic", "t", "--group", "g", "--partition", "0"],
     "Options group and partition cannot be specified together."),
    (["console-consumer", *BS, "--topic", "t", "--offset", "5"], "The partition is required when offset is specified."),
    (["console-consumer", *BS, "--topic", "t", "--partition", "0", "--offset", "x"],
     "The provided offset value 'x' is incorrect"),
    (["console-consumer", *BS, "--topic", "t", "--partition", "0", "--offset", "1", "--from-beginning"],
     "Options from-beginning and offset cannot be specified together."),
    (["console-producer", *BS], "the following arguments are required: --topic"),
    (["console-producer", *BS, "--topic", "t", "--compression-codec", "brotli"], "Invalid --compression-codec"),
    (["consumer-groups", *BS, "--describe"], "takes one of these options: [all-groups], [group]"),
    (["consumer-groups", *BS, "--reset-offsets", "--group", "g", "--to-earliest"],
     "One of the reset scopes should be defined: --all-topics, --topic."),
    (["consumer-groups", *BS, "--reset-offsets", "--group", "g", "--all-topics"],
     "Option [reset-offsets] takes exactly one of these options"),
    (["consumer-groups", *BS, "--reset-offsets", "--group", "g", "--all-topics", "--to-latest", "--dry-run",
      "--execute"], "Option [dry-run] can't be used with option [execute]"),
    (["configs", *BS, "--describe"], "At least one of --entity-type, --topic, --broker or --broker-defaults"),
    (["configs", *BS, "--topic", "t", "--alter"], "At least one of --add-config, --add-config-file, or --delete-config"),
    (["configs", *BS, "--entity-type", "brokers", "--entity-name", "x", "--describe"],
     "must be a valid integer broker id"),
    (["configs", *BS, "--entity-type", "bogus", "--describe"], "Invalid entity type bogus"),
    (["producer-perf-test", "--topic", "t", "--num-records", "1", "--throughput", "-1",
      "--producer-props", "bootstrap.servers=127.0.0.1:1"], "Exactly one of --record-size or --payload-file"),
    (["consumer-perf-test", *BS, "--topic", "t"], "the following arguments are required: --messages"),
    (["ui"], 'Missing required argument "[bootstrap-server]"'),
    (["end-to-end-latency", "127.0.0.1:1", "t", "10", "0", "100"],
     "Latency testing requires synchronous acknowledgement. Please use 1 or all"),
    (["end-to-end-latency", "127.0.0.1:1", "t", "0", "1", "100"], "num_messages must be positive, not 0"),
    (["end-to-end-latency", "127.0.0.1:1", "t", "ten", "1", "100"], "argument num_messages: invalid int value"),
    (["ui", *BS, "--port", "70000"], "--port must be between 0 and 65535, not 70000"),
    (["ui", *BS, "--port", "x"], "argument --port: invalid int value: 'x'"),
    (["ui", *BS, "--sample-interval", "0"], "--sample-interval must be positive, not 0.0"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("Error: ") and message in lines[0], lines[0]


@pytest.mark.parametrize("command", [["topics", *BS, "--list"], ["ui", *BS, "--port", "0"]])
def test_unreachable_broker_is_one_line(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(command) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["Error: Cannot connect to the broker at 127.0.0.1:1 (Connection refused). Is the broker running?"]


def test_line_reader_keys_headers_and_null_marker() -> None:
    reader = LineReader({"parse.key": "true", "key.separator": ":"})
    assert reader.parse("k:v:w") == (b"k", b"v:w", [])
    assert reader.parse("k:") == (b"k", b"", [])
    with pytest.raises(CliError, match="No key separator found on line number 3: 'novalue'"):
        reader.parse("novalue")
    lenient = LineReader({"parse.key": "true", "ignore.error": "true"})
    assert lenient.parse("novalue") == (None, b"novalue", [])
    headers = LineReader({"parse.headers": "true", "parse.key": "true", "null.marker": "NULL"})
    assert headers.parse("h1:a,h2:b\tNULL\tvalue") == (None, b"value", [("h1", b"a"), ("h2", b"b")])
    assert LineReader({}).parse("plain\tline") == (None, b"plain\tline", [])
