"""The CLI's user-facing error (kept apart from ``main`` so ``python -m strom.cli.main`` sees one class)."""

from __future__ import annotations

__all__ = ["CliError"]


class CliError(Exception):
    """A user-facing error: printed as one line, exit code ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code
