"""Exponential backoff with jitter.

Kafka counterpart: ``org.apache.kafka.common.utils.ExponentialBackoff``: ``backoff(attempts)`` =
``initial * multiplier ** min(attempts, exp_max)`` times a random factor in ``[1 - jitter, 1 + jitter)``,
capped at ``max``. Used for ``reconnect.backoff.ms`` / ``reconnect.backoff.max.ms`` and the connection setup
timeout (``socket.connection.setup.timeout.ms`` / ``.max.ms``). Thread-safe (``random`` is).
"""

from __future__ import annotations

import math
import random

__all__ = ["ExponentialBackoff"]


class ExponentialBackoff:
    """``backoff(attempts)`` grows exponentially from ``initial_interval`` up to ``max_interval``."""

    __slots__ = ("initial_interval", "multiplier", "max_interval", "jitter", "exp_max", "_rng")

    def __init__(self, initial_interval: int, multiplier: int, max_interval: int, jitter: float,
                 rng: random.Random | None = None) -> None:
        self.initial_interval = min(max_interval, initial_interval)
        self.multiplier = multiplier
        self.max_interval = max_interval
        self.jitter = jitter
        self.exp_max = (math.log(max_interval / max(initial_interval, 1)) / math.log(multiplier)
                        if max_interval > initial_interval else 0.0)
        self._rng = rng or random.Random()

    def backoff(self, attempts: int) -> int:
        if self.exp_max == 0:
            return self.initial_interval
        exp = min(attempts, self.exp_max)
        term = self.initial_interval * self.multiplier ** exp
        factor = 1.0 if self.jitter <= 0 else self._rng.uniform(1 - self.jitter, 1 + self.jitter)
        value = int(factor * term)
        return self.max_interval if value > self.max_interval else value
