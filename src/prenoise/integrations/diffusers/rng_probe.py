"""`PRENOISE_DEBUG_RNG=1` for diffusers calls: check prenoise's own draws, not the pipeline's.

The executor's global-RNG check compares the global RNG around its whole `with` block; around a
pipeline call that block also holds the pipeline's own code, and pipelines that draw the global
RNG themselves (AnimateDiff SparseCtrl's simplified-embedding posterior sample, SkyReels-V2
diffusion forcing's `addnoise_condition`) were reported as prenoise's. So the integration runs
its executors without that check and, in debug mode, probes instead: before any prepared draw
is submitted, each planned draw is made once on a private clone of its generator, on the
request thread (nothing of the call runs meanwhile), exactly as the worker will make it
(`run_draw`, the call's stream); a changed global RNG raises `GlobalRNGChangedError` naming the
draw. The worker runs that same code on the same kinds of generator, so the probe covers it.
"""

from __future__ import annotations

from collections.abc import Sequence

from prenoise.guards.env import env_choice
from prenoise.integrations.diffusers.draw_calls import planned_rows
from prenoise.integrations.diffusers.plan import PlannedDraw
from prenoise.preparation.draws import run_draw
from prenoise.preparation.served import clone_generator
from prenoise.verify.rng_guard import GlobalRNGChangedError, snapshot_global_rng

__all__ = ["debug_rng", "probe_global_rng"]


def debug_rng() -> bool:
    """True when `PRENOISE_DEBUG_RNG=1` (the executor's start-up rule)."""
    return env_choice("PRENOISE_DEBUG_RNG", ("0", "1"), "0") == "1"


def probe_global_rng(planned: Sequence[PlannedDraw], noise_stream: str) -> None:
    """In debug mode, make every planned draw once on generator clones and raise
    `GlobalRNGChangedError` if that changed the global RNG; nothing otherwise. The caller's
    generators are only read."""
    if not debug_rng():
        return
    for draw in planned:
        before = snapshot_global_rng()
        for row, generator in zip(planned_rows(draw), draw.generators, strict=True):
            run_draw(
                row, clone_generator(generator), allow_scalar_path=True, noise_stream=noise_stream
            )
        changed = before.differences(snapshot_global_rng())
        if changed:
            raise GlobalRNGChangedError(
                f"prenoise's prepared draw {draw.describe()} changed the global RNG: {changed}"
            )
