"""Collect the codegen ``--check`` tests only where Kafka's message definitions are (see that module)."""

from tools.codegen.__main__ import DEFAULT_SPEC_DIR

collect_ignore = [] if (DEFAULT_SPEC_DIR / "messages").is_dir() else ["test_protocol_codegen_check.py"]
