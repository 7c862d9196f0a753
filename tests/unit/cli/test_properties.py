"""Java .properties parsing (strom.config.properties): what --command-config and server.properties files hold."""

from __future__ import annotations

import pytest

from strom.common.errors import ConfigError
from strom.config.properties import load_properties_file, parse_properties

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


def test_separators_comments_and_blank_lines() -> None:
    text = "# comment\n! also a comment\n\nbootstrap.servers=h:9092\nacks : all\nlinger.ms 5\n  client.id =  x \n"
    assert parse_properties(text) == {"bootstrap.servers": "h:9092", "acks": "all", "linger.ms": "5",
                                      "client.id": "x "}


def test_continuation_lines_and_escapes() -> None:
    text = "sasl.jaas.config=a \\\n    b \\\n    c\nkey\\=with\\:seps=v\\tw\nunicode=\\u0041B\nempty=\n"
    assert parse_properties(text) == {"sasl.jaas.config": "a b c", "key=with:seps": "v\tw", "unicode": "AB",
                                      "empty": ""}


def test_last_key_wins_and_key_without_value() -> None:
    assert parse_properties("a=1\na=2\nflag\n") == {"a": "2", "flag": ""}


def test_even_backslashes_do_not_continue() -> None:
    assert parse_properties("path=c:\\\\\nnext=1\n") == {"path": "c:\\", "next": "1"}


def test_missing_file_is_a_config_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="Cannot read config file"):
        load_properties_file(tmp_path / "nope.properties")
    f = tmp_path / "ok.properties"
    f.write_text("a=b\n")
    assert load_properties_file(f) == {"a": "b"}
