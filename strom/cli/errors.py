"""The CLI's user-facing error (kept apart from ``main`` so ``python -m strom.cli.main`` sees one class)."""

from __future__ import annotations

__all__ = ["CliError"]


class CliError(Exception):
    """A user-facing error: printed as one line, exit code ``code``.

    ``main`` prefixes the message with ``Error: `` unless ``plain`` (for messages that already read like Kafka's
    own, e.g. ``Error while executing topic command : ...``).
    """

    def __init__(self, message: str, code: int = 1, *, plain: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.plain = plain
