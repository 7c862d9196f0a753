"""Fetch session metadata (KIP-227): the (session id, epoch) pair a Fetch request carries (v7+).

Kafka counterpart: ``org.apache.kafka.common.requests.FetchMetadata``. Shared by the broker's session cache and
the clients' ``FetchSessionHandler``. Epoch 0 asks for a full fetch that may open a session, -1 for a full fetch
that must not (and closes the named session, if any); any other epoch is an incremental fetch in the named
session, and each one the broker accepts moves the epoch on by one (wrapping to 1, never back to 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

__all__ = ["FetchMetadata", "INVALID_SESSION_ID", "INITIAL_EPOCH", "FINAL_EPOCH"]

INVALID_SESSION_ID = 0  # no session: what a sessionless client sends and what a response without session names
INITIAL_EPOCH = 0  # full fetch; create (or re-create) a session
FINAL_EPOCH = -1  # full fetch; close the named session and create none
_MAX_EPOCH = 2**31 - 1


@dataclass(frozen=True, slots=True)
class FetchMetadata:
    session_id: int
    epoch: int

    INITIAL: ClassVar[FetchMetadata]  # no session yet: a full fetch that may open one
    LEGACY: ClassVar[FetchMetadata]  # sessionless: a full fetch that opens none

    @property
    def is_full(self) -> bool:
        """True for a full fetch request: every partition is named, none is implied by a session."""
        return self.epoch == INITIAL_EPOCH or self.epoch == FINAL_EPOCH

    @staticmethod
    def next_epoch(prev_epoch: int) -> int:
        if prev_epoch < 0:
            return FINAL_EPOCH  # a sessionless fetch stays sessionless
        if prev_epoch == _MAX_EPOCH:
            return 1
        return prev_epoch + 1

    @classmethod
    def new_incremental(cls, session_id: int) -> FetchMetadata:
        """The metadata of the first incremental request after the full fetch that created ``session_id``."""
        return cls(session_id, cls.next_epoch(INITIAL_EPOCH))

    def next_incremental(self) -> FetchMetadata:
        return FetchMetadata(self.session_id, self.next_epoch(self.epoch))

    def next_close_existing(self) -> FetchMetadata:
        """Close this session and open none (a final request, e.g. when the client closes)."""
        return FetchMetadata(self.session_id, FINAL_EPOCH)

    def next_close_existing_attempt_new(self) -> FetchMetadata:
        """Close this session and ask for a new one with the next (full) request."""
        return FetchMetadata(self.session_id, INITIAL_EPOCH)

    def __str__(self) -> str:
        if self.session_id == INVALID_SESSION_ID:
            return "(sessionId=INVALID, " + ("epoch=INITIAL)" if self.epoch == INITIAL_EPOCH else
                                            "epoch=FINAL)" if self.epoch == FINAL_EPOCH else f"epoch={self.epoch})")
        return f"(sessionId={self.session_id}, epoch={self.epoch})"


FetchMetadata.INITIAL = FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)
FetchMetadata.LEGACY = FetchMetadata(INVALID_SESSION_ID, FINAL_EPOCH)
