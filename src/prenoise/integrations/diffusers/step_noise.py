"""Per-step sampler noise of diffusers' stochastic schedulers, drawn one step ahead.

Pipelines that build `prepare_extra_step_kwargs(generator, eta)` (CogVideoX, ...) hand the
caller's generator to `scheduler.step`; a stochastic scheduler then draws the whole latent from
it at every step, between two transformer calls. The engine-neutral
`prenoise.preparation.lookahead.StepLookahead` takes those draws off the request thread,
bitwise (served only on the exact key and generator state); this module says what is
diffusers' own:

- how many draws a scheduler makes in a loop (`STEP_DRAWS`, from its timesteps), only where its
  installed `step` is the reviewed code (`digests.step_code_problem`);
- whether a call will draw at all (`draws_in_this_call`: worth preparing the first draw);
- the limits `enable(pipe, steps_ahead=..., bytes_ahead=...)` records (`lookahead_limits_of`).

(see docs/background/diffusers-draw-order.md)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from prenoise.integrations.diffusers.digests import NEXT_STEP, step_code_problem
from prenoise.integrations.diffusers.report import first_time
from prenoise.preparation.executor import PreparationExecutor
from prenoise.preparation.lookahead import WORKER_NICE, LookaheadLimits, StepLookahead

__all__ = [
    "LIMITS_ATTR",
    "STEP_DRAWS",
    "WORKER_NICE",
    "LookaheadLimits",
    "StepLookahead",
    "draws_in_this_call",
    "expected_step_draws",
    "lookahead_limits_of",
    "scheduler_lookahead",
]

_SCHEDULERS = "diffusers.schedulers."

logger = logging.getLogger("prenoise.integrations.diffusers")


def _every_step(timesteps: torch.Tensor) -> int:
    return len(timesteps)


def _all_but_last(timesteps: torch.Tensor) -> int:
    return max(len(timesteps) - 1, 0)


def _cogvideox_dpm(timesteps: torch.Tensor) -> int:
    # one draw on the first and on the last step, two on every other (diffusers 0.40.0-0.42.1)
    n = len(timesteps)
    return 1 if n == 1 else 2 * n - 2


def _ddpm(timesteps: torch.Tensor) -> int:
    return int((timesteps > 0).sum())  # no variance noise at t = 0


STEP_DRAWS: dict[str, Callable[[torch.Tensor], int]] = {
    _SCHEDULERS + "scheduling_dpm_cogvideox.CogVideoXDPMScheduler": _cogvideox_dpm,
    _SCHEDULERS + "scheduling_ddim.DDIMScheduler": _every_step,  # eta > 0
    _SCHEDULERS + "scheduling_euler_ancestral_discrete.EulerAncestralDiscreteScheduler": (
        _every_step
    ),
    _SCHEDULERS + "scheduling_ddpm.DDPMScheduler": _ddpm,
    _SCHEDULERS + "scheduling_lcm.LCMScheduler": _all_but_last,
    _SCHEDULERS + "scheduling_tcd.TCDScheduler": _all_but_last,  # eta > 0
    _SCHEDULERS + "scheduling_dpmsolver_multistep.DPMSolverMultistepScheduler": _every_step,
    _SCHEDULERS + "scheduling_dpmsolver_singlestep.DPMSolverSinglestepScheduler": _every_step,
    _SCHEDULERS + "scheduling_flow_match_euler_discrete.FlowMatchEulerDiscreteScheduler": (
        _every_step
    ),
    # one float32 draw per step of the (upscaled, with `scale_factors`) prediction's shape: a
    # changed shape ends the look-ahead
    _SCHEDULERS + "scheduling_flow_match_lcm.FlowMatchLCMScheduler": _every_step,
}
"""Schedulers whose `step` draws one tensor of the sample's shape per draw, with the number of
draws per call from their timesteps (read in their `step` source, the same on diffusers
0.40.0-0.42.1). A scheduler counts only where its installed `step` is the reviewed code
(`digests.step_code_problem`, `reviewed.py`; else its draws stay plain, warned once naming
`step`). A wrong count costs only work, never bits: past it the look-ahead ends and draws
plainly, short of it the prepared rest is discarded. Only the draws of a stochastic
configuration exist (DDIM and TCD with `eta > 0`, DPM-Solver's SDE algorithms,
`stochastic_sampling=True`): a deterministic one makes none, and nothing starts. Any other
scheduler's draws (KDPM2-ancestral's sub-steps, torchsde's Brownian tree) are left plain."""


def _reviewed_count(cls: type) -> Callable[[torch.Tensor], int] | None:
    """`STEP_DRAWS`' count of scheduler class `cls` where its `step` is the reviewed code (a
    changed `step` is warned once per class and counts as not in `STEP_DRAWS`)."""
    count = STEP_DRAWS.get(f"{cls.__module__}.{cls.__qualname__}")
    if count is None:
        return None
    changed = step_code_problem(cls)
    if changed is None:
        return count
    if first_time(cls.__qualname__, "changed-code"):
        logger.warning(
            "prenoise: %s: per-step noise drawn in the loop (%s); %s",
            cls.__qualname__,
            changed,
            NEXT_STEP,
        )
    return None


def expected_step_draws(scheduler: Any) -> int | None:
    """How many draws `scheduler` makes in a whole denoising loop, if it is in `STEP_DRAWS`
    (with its `step` the reviewed code) and its timesteps are set; None otherwise. A loop that
    starts later (`set_begin_index`, as image- and video-to-video pipelines call it for
    `strength < 1`) is counted from there; one that slices its timesteps without telling the
    scheduler is over-counted (the surplus is prepared and discarded: `unused`)."""
    count = _reviewed_count(type(scheduler))
    timesteps = getattr(scheduler, "timesteps", None)
    if count is None or not isinstance(timesteps, torch.Tensor):
        return None
    begin = getattr(scheduler, "begin_index", None)
    if isinstance(begin, int) and 0 < begin <= len(timesteps):
        timesteps = timesteps[begin:]
    return count(timesteps)


_ETA_DRAWS = frozenset({"scheduling_ddim.DDIMScheduler", "scheduling_tcd.TCDScheduler"})
_SDE_DRAWS = frozenset(
    {
        "scheduling_dpmsolver_multistep.DPMSolverMultistepScheduler",
        "scheduling_dpmsolver_singlestep.DPMSolverSinglestepScheduler",
    }
)


def draws_in_this_call(pipe: Any, scheduler: Any, eta: object) -> bool:
    """True when a call of `pipe` with `eta` (its `eta=` argument; None: not given) will make
    per-step draws on the caller's generator: the pipeline hands it to `scheduler.step`
    (`prepare_extra_step_kwargs`), the scheduler is in `STEP_DRAWS`, and its configuration
    draws (DDIM and TCD: `eta > 0`, which the pipelines pass from their own `eta` argument,
    default 0; DPM-Solver: an `sde-*` algorithm; flow-match Euler: `stochastic_sampling`).

    Only decides whether the first per-step draw is worth preparing; a wrong answer costs
    one draw on the worker (or the plain first draw on the request thread), never bits.
    """
    if not callable(getattr(pipe, "prepare_extra_step_kwargs", None)):
        return False
    cls = type(scheduler)
    if _reviewed_count(cls) is None:
        return False
    short = f"{cls.__module__}.{cls.__qualname__}".removeprefix(_SCHEDULERS)
    config = getattr(scheduler, "config", None)
    if short in _ETA_DRAWS:
        return isinstance(eta, int | float) and eta > 0
    if short in _SDE_DRAWS:
        return str(getattr(config, "algorithm_type", "")).startswith("sde-")
    if short == "scheduling_flow_match_euler_discrete.FlowMatchEulerDiscreteScheduler":
        return bool(getattr(config, "stochastic_sampling", False))
    return True


LIMITS_ATTR = "_prenoise_step_lookahead"
"""Instance attribute where `enable(pipe, steps_ahead=..., bytes_ahead=...)` records limits."""


def lookahead_limits_of(pipe: Any) -> LookaheadLimits:
    """The per-step look-ahead limits `enable` recorded for `pipe` (the defaults when none)."""
    limits = getattr(pipe, LIMITS_ATTR, None)
    return limits if isinstance(limits, LookaheadLimits) else LookaheadLimits()


def scheduler_lookahead(
    executor: PreparationExecutor, scheduler: Any, noise_stream: str, limits: LookaheadLimits
) -> StepLookahead:
    """A `StepLookahead` for `scheduler`'s loop: it prepares `expected_step_draws(scheduler)`
    draws (asked at the loop's first draw, when the timesteps are set); for a scheduler not in
    `STEP_DRAWS`, or whose `step` is not the reviewed code, none, and `left` says why."""

    def unknown_why() -> str:
        cls = type(scheduler)
        known = f"{cls.__module__}.{cls.__qualname__}" in STEP_DRAWS
        return (step_code_problem(cls) if known else None) or (
            f"scheduler {cls.__qualname__} is not known to draw a plannable sequence (STEP_DRAWS)"
        )

    return StepLookahead(
        executor, noise_stream, limits, lambda: expected_step_draws(scheduler), unknown_why
    )
