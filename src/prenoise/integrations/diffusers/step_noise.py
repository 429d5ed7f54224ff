"""Per-step sampler noise drawn ahead: a stochastic scheduler's `randn_tensor` draws in the loop.

Pipelines that build `prepare_extra_step_kwargs(generator, eta)` (CogVideoX, ...) hand the
caller's generator to `scheduler.step`; a stochastic scheduler then draws the whole latent from
it at every step, between two transformer calls. `StepLookahead` takes those draws off the
request thread, bitwise:

- It starts at the call's first per-step draw (after every planned initial draw was served).
  That draw's key — shape, dtype, the one generator — is what it then prepares, for a scheduler
  in `STEP_DRAWS` only. The first draw itself is prepared too when the call can be seen to make
  it (`prepare_first`: the pipeline hands its generator to `scheduler.step` and the scheduler is
  configured to draw, `draws_in_this_call`): right after the planned initial draws, on the same
  worker lane, from a clone of the generator in the state they leave it in, for the noise's
  shape and each likely dtype (the noise's and float32: the dtype of the model output the
  scheduler draws like). Served only when the call's key is one of them and the generator is in
  that state; otherwise the first draw is the plain one, drawn on the request thread.
- The worker continues from the generator's state after that draw on a *clone* (a private
  `torch.Generator`), one draw after another: each job records the clone's state before and
  after its draw. At most `LookaheadLimits.steps` draws (and `bytes`) wait unserved at a time,
  and never more than the scheduler will still draw (`STEP_DRAWS`, from its timesteps). The
  worker draws them at the lowest CPU priority (`WORKER_NICE`): they have a step of slack.
- A later call is served only if it has the same key and the caller's generator is exactly in
  the state the job's draw started from (compared byte for byte): then the generator is set to
  the state after it — where the plain call's own draw leaves it — and the tensor is moved to
  the requested device, as `randn_tensor` does. The caller's generator is never drawn from on
  the worker, so anything else that uses it between steps (a `callback_on_step_end`) shows as a
  changed state.
- Anything else — another key, a changed state, a failed job, more draws than expected — ends
  the look-ahead: pending jobs are cancelled, the running one joined, and this and every later
  call runs the plain `randn_tensor`. `finish` does the same when the call returns or raises
  (an interrupt, an exception); unserved draws are counted in `unused`.

Generator lists (per-sample draws) are not looked ahead: the first such call ends it.
(see docs/background/diffusers-draw-order.md)
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from prenoise.integrations.diffusers.digests import step_code_problem
from prenoise.integrations.diffusers.draw_calls import target_device
from prenoise.integrations.diffusers.report import first_time
from prenoise.preparation.draws import Draw, HalfDrawRule, run_draw
from prenoise.preparation.executor import PreparationExecutor

__all__ = [
    "LIMITS_ATTR",
    "STEP_DRAWS",
    "WORKER_NICE",
    "LookaheadLimits",
    "StepLookahead",
    "draws_in_this_call",
    "expected_step_draws",
    "lookahead_limits_of",
]

_SCHEDULERS = "diffusers.schedulers."

logger = logging.getLogger("prenoise.integrations.diffusers")

WORKER_NICE = 19
"""The nice value the call's worker thread takes when it starts its first per-step draw (Linux
only: there a thread has its own nice value; elsewhere nothing changes). A per-step draw has a
whole denoising step of slack, so the worker should never take a core from the request thread:
measured on 2 cores (benchmarks/diffusers.md), at the default nice 0 about a third of the serves
waited 1-4 ms for the CPU, at 19 none did. The worker thread belongs to one call and ends with
it; the planned initial draws, which run before, keep the default priority."""


def _lower_this_threads_priority() -> None:
    """Set the calling thread's nice value to `WORKER_NICE` (Linux; a no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    thread_id = threading.get_native_id()
    try:
        if os.getpriority(os.PRIO_PROCESS, thread_id) < WORKER_NICE:
            os.setpriority(os.PRIO_PROCESS, thread_id, WORKER_NICE)
    except OSError as error:  # raising a nice value is always allowed; say so if it was not
        logger.debug("prenoise: could not lower the step worker's priority: %r", error)


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
            "prenoise: %s: per-step noise drawn in the loop (%s)", cls.__qualname__, changed
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


@dataclass(frozen=True)
class LookaheadLimits:
    """How far ahead per-step draws may be prepared: at most `steps` draws, and `bytes` of
    tensors, drawn and not yet served (at least one draw whatever `bytes` says; `steps=0` turns
    the look-ahead off)."""

    steps: int = 4
    bytes: int = 256 << 20

    def __post_init__(self) -> None:
        if self.steps < 0 or self.bytes < 0:
            raise ValueError(f"look-ahead limits must be >= 0, got {self}")


LIMITS_ATTR = "_prenoise_step_lookahead"
"""Instance attribute where `enable(pipe, steps_ahead=..., bytes_ahead=...)` records limits."""


def lookahead_limits_of(pipe: Any) -> LookaheadLimits:
    """The per-step look-ahead limits `enable` recorded for `pipe` (the defaults when none)."""
    limits = getattr(pipe, LIMITS_ATTR, None)
    return limits if isinstance(limits, LookaheadLimits) else LookaheadLimits()


@dataclass
class _Prepared:
    job: str
    before: torch.Tensor | None = None
    after: torch.Tensor | None = None


@dataclass
class _FirstGuess:
    """The first per-step draw, prepared for each dtype it may have (see `prepare_first`)."""

    job: str
    shape: tuple[int, ...]
    generator: torch.Generator
    dtypes: tuple[torch.dtype, ...]
    before: torch.Tensor | None = None
    drawn: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)


class StepLookahead:
    """One call's per-step draws, prepared on `executor`'s lane (see the module doc)."""

    def __init__(
        self,
        executor: PreparationExecutor,
        scheduler: Any,
        noise_stream: str,
        limits: LookaheadLimits,
    ) -> None:
        if limits.steps < 1:
            raise ValueError("a look-ahead needs limits.steps >= 1 (steps=0: make none)")
        self._executor = executor
        self._scheduler = scheduler
        self._noise_stream = noise_stream
        self._limits = limits
        self._lock = threading.Lock()
        self._key: tuple[tuple[int, ...], torch.dtype, int] | None = None
        self._generator: torch.Generator | None = None
        self._draw: Draw | None = None
        self._chain: torch.Tensor | None = None  # the clone's state after the last job's draw
        self._jobs: list[_Prepared] = []  # submitted, not served, in order
        self._submitted = 0  # jobs ever submitted: their names are step:0, step:1, ...
        self._first: _FirstGuess | None = None
        self._to_submit = 0
        self._ended = False
        self.served = 0
        self.unused = 0
        self.wait_s = 0.0
        self.left: str | None = None
        self.first_ahead = False
        """Whether the first per-step draw was served from `prepare_first`'s job."""

    def prepare_first(
        self, shape: tuple[int, ...], generator: torch.Generator, dtypes: tuple[torch.dtype, ...]
    ) -> None:
        """Prepare the call's first per-step draw: call right after the planned initial draws
        were submitted (the same lane runs this job after them, so the generator is then in the
        state they leave it in; the job only reads it, under the generator's own lock, so a
        draw the request thread makes meanwhile is seen whole or not at all, and a guess from
        a moved state is not served). `dtypes`: the dtypes it may be drawn
        in, each drawn from that state on its own clone. Unserved, it is dropped (not counted
        in `unused`)."""
        with self._lock:
            if self._ended or self._key is not None or self._first is not None:
                return
            guess = _FirstGuess(self._next_job(), tuple(shape), generator, tuple(dtypes))
            self._executor.submit(guess.job, lambda: self._run_first(guess))
            self._first = guess

    def _run_first(self, guess: _FirstGuess) -> None:
        _lower_this_threads_priority()
        guess.before = guess.generator.get_state()
        for dtype in guess.dtypes:
            draw = Draw("step_noise", guess.shape, dtype, half_rule=HalfDrawRule.NATIVE)
            guess.drawn[dtype] = self._draw_from(draw, guess.before)

    def _next_job(self) -> str:
        name = f"step:{self._submitted}"
        self._submitted += 1
        return name

    def serve(
        self,
        original: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        shape: Any,
        gens: tuple[torch.Generator, ...],
        device: Any,
        dtype: Any,
        layout: Any,
    ) -> Any:
        """Answer one per-step `randn_tensor(*args, **kwargs)` call on the call's generator."""
        with self._lock:
            if self._ended:
                return original(*args, **kwargs)
            problem = self._problem(shape, gens, dtype, layout)
            if problem is not None:
                self._end_locked(problem)
                return original(*args, **kwargs)
            if self._key is None:
                key_dtype = dtype or torch.get_default_dtype()
                out = self._take_first_locked(tuple(shape), gens[0], key_dtype, device)
                if out is None:
                    out = original(*args, **kwargs)  # the first per-step draw: the plain one
                self._start_locked(tuple(shape), gens[0], key_dtype)
                return out
            if not self._jobs:
                self._end_locked("the scheduler drew more than its timesteps say")
                return original(*args, **kwargs)
            return self._take_locked(original, args, kwargs, device)

    def _problem(
        self, shape: Any, gens: tuple[torch.Generator, ...], dtype: Any, layout: Any
    ) -> str | None:
        if len(gens) != 1:
            return f"a per-step draw on {len(gens)} generators (per-sample draws)"
        if layout not in (None, torch.strided) or not isinstance(shape, tuple | torch.Size):
            return f"a per-step draw of layout {layout} / shape {shape!r}"
        if self._key is None:
            return None
        actual = (tuple(shape), dtype or torch.get_default_dtype(), id(gens[0]))
        if actual != self._key:
            return f"a per-step draw of {list(shape)} {actual[1]}, not the first one's"
        return None

    def _take_first_locked(
        self, shape: tuple[int, ...], generator: torch.Generator, dtype: torch.dtype, device: Any
    ) -> torch.Tensor | None:
        """The prepared first draw when it is this call's (its key, the generator's state)."""
        guess, self._first = self._first, None
        if guess is None:
            return None
        if guess.shape != shape or guess.generator is not generator or dtype not in guess.dtypes:
            self._drop_first(guess)
            return None
        start = time.perf_counter()
        try:
            self._executor.take(guess.job)
        except Exception:  # a failed guess never reaches the caller: the plain draw runs
            return None
        assert guess.before is not None
        if not torch.equal(generator.get_state(), guess.before):
            return None  # something drew from it after the initial draws
        tensor, after = guess.drawn[dtype]
        generator.set_state(after)
        self.served += 1
        self.first_ahead = True
        out = tensor.to(target_device(device))
        self.wait_s += time.perf_counter() - start
        return out

    def _drop_first(self, guess: _FirstGuess) -> None:
        """Cancel an unserved guess if it has not started. One that ran or runs is left to the
        executor, whose exit (before the call returns) joins it and drops its result: it drew
        only on clones, so nothing of the call depends on it."""
        self._executor.cancel_pending([guess.job])

    def _start_locked(self, shape: tuple[int, ...], generator: torch.Generator, dtype: Any) -> None:
        expected = expected_step_draws(self._scheduler)
        if expected is None:
            cls = type(self._scheduler)
            known = f"{cls.__module__}.{cls.__qualname__}" in STEP_DRAWS
            self._end_locked(
                (step_code_problem(cls) if known else None)
                or f"scheduler {cls.__qualname__} is not known to draw a plannable "
                "sequence (STEP_DRAWS)"
            )
            return
        try:  # anything the look-ahead cannot draw ends it: the loop draws plainly
            draw = Draw("step_noise", shape, dtype, half_rule=HalfDrawRule.NATIVE)
        except (ValueError, TypeError) as error:
            self._end_locked(f"a per-step draw the look-ahead cannot prepare: {error}")
            return
        if draw.buffer_nbytes == 0:
            self._end_locked(f"a zero-element per-step draw {list(shape)}: nothing to prepare")
            return
        self._key = (shape, dtype, id(generator))
        self._generator = generator
        self._draw = draw
        self._chain = generator.get_state()
        self._to_submit = expected - 1  # the first was just drawn
        if self._to_submit <= 0:
            self._end_locked(None)  # the scheduler draws nothing more: nothing to prepare
            return
        window = min(self._limits.steps, max(1, self._limits.bytes // self._draw.buffer_nbytes))
        for _ in range(min(window, self._to_submit)):
            self._submit_locked()

    def _submit_locked(self) -> None:
        prepared = _Prepared(self._next_job())
        self._executor.submit(prepared.job, lambda: self._run(prepared))
        self._jobs.append(prepared)
        self._to_submit -= 1

    def _run(self, prepared: _Prepared) -> torch.Tensor:
        """On the worker, in submission order (one lane): the next draw of the clone chain."""
        assert self._draw is not None and self._chain is not None
        _lower_this_threads_priority()
        prepared.before = self._chain
        tensor, prepared.after = self._draw_from(self._draw, self._chain)
        self._chain = prepared.after
        return tensor

    def _draw_from(self, draw: Draw, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`draw` on a private clone of a generator in `state`: the tensor and the state after."""
        clone = torch.Generator(device="cpu")
        clone.set_state(state)
        tensor = run_draw(draw, clone, allow_scalar_path=True, noise_stream=self._noise_stream)
        return tensor, clone.get_state()

    def _take_locked(
        self,
        original: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        device: Any,
    ) -> Any:
        prepared = self._jobs[0]
        assert self._generator is not None
        start = time.perf_counter()
        try:
            tensor: torch.Tensor = self._executor.take(prepared.job)
        except Exception as error:  # a failed preparation never reaches the caller
            self._end_locked(f"a prepared per-step draw failed: {error!r}")
            return original(*args, **kwargs)
        self._jobs.pop(0)
        assert prepared.before is not None and prepared.after is not None
        if not torch.equal(self._generator.get_state(), prepared.before):
            self.unused += 1
            self._end_locked("the generator changed between steps (something else drew from it)")
            return original(*args, **kwargs)
        self._generator.set_state(prepared.after)
        self.served += 1
        out = tensor.to(target_device(device))
        self.wait_s += time.perf_counter() - start
        if self._to_submit > 0:  # last: the woken worker then competes with nothing here
            self._submit_locked()
        return out

    def _end_locked(self, why: str | None) -> None:
        if self._ended:
            return
        self._ended = True
        if why is not None:
            self.left = why
        guess, self._first = self._first, None
        if guess is not None:
            self._drop_first(guess)
        if not self._jobs:
            return
        cancelled = set(self._executor.cancel_pending())
        for prepared in self._jobs:
            self.unused += 1
            if prepared.job not in cancelled:
                with contextlib.suppress(Exception):  # its failure no longer matters
                    self._executor.take(prepared.job)  # joins the running draw; dropped
        self._jobs.clear()

    def finish(self) -> None:
        """End the look-ahead at the call's end: discard what was not served."""
        with self._lock:
            left = self._jobs or self._to_submit > 0
            self._end_locked("the call ended before the planned per-step draws" if left else None)
