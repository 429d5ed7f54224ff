"""Prediction checks: prepared work is tied to a predicted key and confirmed before use.

Noise is drawn ahead from *predicted* shapes; the encoders later produce the *actual* shapes.
Before prepared work is consumed, the actual key must equal the predicted one. On a mismatch the
prepared result is never used: `MismatchPolicy.RAISE` raises `PredictionMismatchError` with both
keys; `MismatchPolicy.FALLBACK` discards it, recomputes serially and records a
`PredictionEvent`. Either way the consumer sees exactly what the serial path computes.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Hashable
from dataclasses import dataclass

__all__ = ["MismatchPolicy", "PredictionEvent", "PredictionMismatchError"]

logger = logging.getLogger("prenoise.preparation.prediction")


class MismatchPolicy(str, enum.Enum):
    """What to do when a predicted key differs from the actual one."""

    RAISE = "raise"
    FALLBACK = "fallback"


class PredictionMismatchError(RuntimeError):
    """Prepared work was computed for a key that differs from the actual one."""

    def __init__(self, name: str, predicted: Hashable, actual: Hashable) -> None:
        super().__init__(
            f"prepared {name!r} was computed for predicted {predicted!r} but the actual value "
            f"is {actual!r}; the prepared result was discarded (fix the prediction, or use "
            "MismatchPolicy.FALLBACK to recompute serially)"
        )
        self.name = name
        self.predicted = predicted
        self.actual = actual


@dataclass(frozen=True)
class PredictionEvent:
    """A mismatch that was handled by discarding prepared work and recomputing serially."""

    name: str
    predicted: Hashable
    actual: Hashable

    def log(self) -> None:
        logger.warning(
            "prediction mismatch for %r: predicted %r, actual %r; recomputed serially",
            self.name,
            self.predicted,
            self.actual,
        )
