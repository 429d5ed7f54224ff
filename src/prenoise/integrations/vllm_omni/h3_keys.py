"""The keys prenoise's MiniMax-H3 draws are prepared and served under, and their records.

A prepared tensor is served only when the pipeline's actual call has the key it was drawn for.
"""

from __future__ import annotations

from dataclasses import dataclass

from prenoise.ref2va.noise import LatentShape

__all__ = ["ConditionKey", "DrawRecord", "InitialNoiseKey", "record_name"]


@dataclass(frozen=True)
class InitialNoiseKey:
    """The `_initial_noise` arguments the initial noise was drawn for."""

    seed: int
    latent_t: int
    latent_h: int
    latent_w: int
    audio_t: int


@dataclass(frozen=True)
class ConditionKey:
    """The condition-noise arguments the visual-condition noise was drawn for."""

    seed: int
    target_latent_t: int
    condition_shapes: tuple[LatentShape, ...]
    guided: bool = False
    """The `guided` recipe (0.32.0rc1's timeline-guided requests): `(rows, 96)` per condition."""


def record_name(field_name: str, seed: int, window: int = 0) -> str:
    """The name of one prepared draw: `field@seed`, `field#k@seed` for continuation window k > 0
    (observers receive the part before `@`)."""
    return f"{field_name}@{seed}" if window == 0 else f"{field_name}#{window}@{seed}"


@dataclass(frozen=True)
class DrawRecord:
    """Where and when one prepared tensor was drawn, and when the pipeline asked for it."""

    name: str
    seed: int
    thread: str
    started: float
    finished: float
    requested: float | None = None
    used: bool = False
    """False when the pipeline's actual arguments differed and upstream's serial code ran."""
    taken: float | None = None
    """When `take` returned on the request thread (`taken - requested` is the wait)."""

    @property
    def waited(self) -> float:
        """Seconds the request thread blocked for this draw (0 before it was taken)."""
        if self.requested is None or self.taken is None:
            return 0.0
        return max(0.0, self.taken - self.requested)

    @property
    def off_request_thread(self) -> float:
        """Seconds of drawing the request thread did not spend: the draw, less the wait."""
        if not self.used:
            return 0.0
        return max(0.0, (self.finished - self.started) - self.waited)
