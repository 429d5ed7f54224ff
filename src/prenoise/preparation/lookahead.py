"""Per-step sampler noise drawn one step ahead, served only on the exact generator state.

A stochastic sampler draws a tensor of one shape from the caller's generator at every step,
between two model calls. `StepLookahead` takes those draws off the request thread, bitwise, for
any engine (the integration says how many draws the loop makes and hands over each call):

- It starts at the loop's first per-step draw. That draw's key — shape, dtype, the one
  generator — is what it then prepares. The first draw itself may be prepared too
  (`prepare_first`): on the executor's lane, from a clone of the generator in the state the
  draws before it leave it in, in each dtype it may have. Served only when the call's key is one
  of them and the generator is in that state; otherwise the first draw is the plain one.
- The worker continues from the generator's state after that draw on a *clone* (a private
  `torch.Generator`), one draw after another: each job records the clone's state before and
  after its draw. At most `LookaheadLimits.steps` draws (and `bytes`) wait unserved at a time,
  and never more than the loop will still draw (`expected_draws`). The worker draws them at the
  lowest CPU priority (`WORKER_NICE`): they have a step of slack.
- A later call is served only if it has the same key and the caller's generator is exactly in
  the state the job's draw started from (compared byte for byte): then the generator is set to
  the state after it — where the plain draw leaves it — and the tensor is moved to the requested
  device. The caller's generator is never drawn from on the worker, so anything else that uses
  it between steps (a step callback) shows as a changed state.
- Anything else — another key, a changed state, a failed job, more draws than expected — ends
  the look-ahead: pending jobs are cancelled, the running one joined, and this and every later
  call runs the plain draw. `finish` does the same when the loop returns or raises; unserved
  draws are counted in `unused`.

Generator lists (per-sample draws) are not looked ahead: the first such call ends it.
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

from prenoise.preparation.draws import Draw, HalfDrawRule, run_draw
from prenoise.preparation.executor import PreparationExecutor

__all__ = ["WORKER_NICE", "LookaheadLimits", "StepLookahead"]

logger = logging.getLogger("prenoise.preparation.lookahead")

WORKER_NICE = 19
"""The nice value the worker thread takes when it starts its first per-step draw (Linux only:
there a thread has its own nice value; elsewhere nothing changes). A per-step draw has a whole
denoising step of slack, so the worker should never take a core from the request thread:
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
    generator: torch.Generator | None
    dtypes: tuple[torch.dtype, ...]
    start_state: Callable[[], torch.Tensor]
    before: torch.Tensor | None = None
    drawn: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)


def _target_device(device: Any) -> torch.device:
    if isinstance(device, str):
        device = torch.device(device)
    return device or torch.device("cpu")


class StepLookahead:
    """One loop's per-step draws, prepared on `executor`'s lane (see the module doc).

    `expected_draws()` is how many per-step draws the whole loop makes (None: unknown, nothing
    is prepared and `unknown_why()` says why in `left`), asked once at the first draw."""

    def __init__(
        self,
        executor: PreparationExecutor,
        noise_stream: str,
        limits: LookaheadLimits,
        expected_draws: Callable[[], int | None],
        unknown_why: Callable[[], str],
    ) -> None:
        if limits.steps < 1:
            raise ValueError("a look-ahead needs limits.steps >= 1 (steps=0: make none)")
        self._executor = executor
        self._noise_stream = noise_stream
        self._limits = limits
        self._expected_draws = expected_draws
        self._unknown_why = unknown_why
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
        self,
        shape: tuple[int, ...],
        generator: torch.Generator | None,
        dtypes: tuple[torch.dtype, ...],
        start_state: Callable[[], torch.Tensor] | None = None,
    ) -> None:
        """Prepare the loop's first per-step draw: call right after the draws that come before
        it were submitted to the same lane. `start_state()` (run on the worker after them;
        default: the generator's own state) is the state the first draw starts from, e.g. the
        state `ServedDraws.clone_state` says the planned draws leave the generator in.
        `dtypes`: the dtypes it may be drawn in, each drawn from that state on its own clone.
        A guess from another state than the generator's at the call is not served.
        Unserved, it is dropped (not counted in `unused`).

        `generator=None`: the first draw's generator does not exist yet (the loop makes it,
        e.g. seeded with a known seed); `start_state` is then required, and the guess is served
        to the first draw's generator whatever object it is, on its state alone (a CPU
        `torch.Generator` in exactly that state: the same draw, bit for bit)."""
        if generator is None and start_state is None:
            raise ValueError("prepare_first(generator=None) needs start_state")
        if start_state is None:
            assert generator is not None
            start_state = generator.get_state
        with self._lock:
            if self._ended or self._key is not None or self._first is not None:
                return
            guess = _FirstGuess(
                self._next_job(),
                tuple(shape),
                generator,
                tuple(dtypes),
                start_state,
            )
            self._executor.submit(guess.job, lambda: self._run_first(guess))
            self._first = guess

    def _run_first(self, guess: _FirstGuess) -> None:
        _lower_this_threads_priority()
        guess.before = guess.start_state()
        for dtype in guess.dtypes:
            draw = Draw("step_noise", guess.shape, dtype, half_rule=HalfDrawRule.NATIVE)
            guess.drawn[dtype] = self._draw_from(draw, guess.before)

    def _next_job(self) -> str:
        name = f"step:{self._submitted}"
        self._submitted += 1
        return name

    def serve(
        self,
        shape: Any,
        gens: tuple[torch.Generator, ...],
        dtype: Any,
        layout: Any,
        device: Any,
        plain: Callable[[], Any],
    ) -> Any:
        """Answer one per-step draw `(shape, gens, dtype, layout)` on `device`: the prepared
        tensor, or `plain()` (the serial draw, made on this thread) where none is served."""
        with self._lock:
            if self._ended:
                return plain()
            problem = self._problem(shape, gens, dtype, layout)
            if problem is not None:
                self._end_locked(problem)
                return plain()
            if self._key is None:
                key_dtype = dtype or torch.get_default_dtype()
                out = self._take_first_locked(tuple(shape), gens[0], key_dtype, device)
                if out is None:
                    out = plain()  # the first per-step draw: the plain one
                self._start_locked(tuple(shape), gens[0], key_dtype)
                return out
            if not self._jobs:
                self._end_locked("the scheduler drew more than its timesteps say")
                return plain()
            return self._take_locked(plain, device)

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
        other = guess.generator is not None and guess.generator is not generator
        if guess.shape != shape or other or dtype not in guess.dtypes:
            self._drop_first(guess)
            return None
        start = time.perf_counter()
        try:
            self._executor.take(guess.job)
        except Exception:  # a failed guess never reaches the caller: the plain draw runs
            return None
        assert guess.before is not None
        if (
            type(generator) is not torch.Generator
            or generator.device.type != "cpu"
            or not torch.equal(generator.get_state(), guess.before)
        ):
            return None  # something drew from it after the draws before it
        tensor, after = guess.drawn[dtype]
        generator.set_state(after)
        self.served += 1
        self.first_ahead = True
        out = tensor.to(_target_device(device))
        self.wait_s += time.perf_counter() - start
        return out

    def _drop_first(self, guess: _FirstGuess) -> None:
        """Cancel an unserved guess if it has not started. One that ran or runs is left to the
        executor, whose exit (before the call returns) joins it and drops its result: it drew
        only on clones, so nothing of the call depends on it."""
        self._executor.cancel_pending([guess.job])

    def _start_locked(self, shape: tuple[int, ...], generator: torch.Generator, dtype: Any) -> None:
        expected = self._expected_draws()
        if expected is None:
            self._end_locked(self._unknown_why())
            return
        if type(generator) is not torch.Generator:
            self._end_locked(f"a per-step draw on a {type(generator).__name__} (not cloned)")
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
            self._end_locked(None)  # the loop draws nothing more: nothing to prepare
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

    def _take_locked(self, plain: Callable[[], Any], device: Any) -> Any:
        prepared = self._jobs[0]
        assert self._generator is not None
        start = time.perf_counter()
        try:
            tensor: torch.Tensor = self._executor.take(prepared.job)
        except Exception as error:  # a failed preparation never reaches the caller
            self._end_locked(f"a prepared per-step draw failed: {error!r}")
            return plain()
        self._jobs.pop(0)
        assert prepared.before is not None and prepared.after is not None
        if not torch.equal(self._generator.get_state(), prepared.before):
            self.unused += 1
            self._end_locked("the generator changed between steps (something else drew from it)")
            return plain()
        self._generator.set_state(prepared.after)
        self.served += 1
        out = tensor.to(_target_device(device))
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
        cancelled = set(self._executor.cancel_pending([p.job for p in self._jobs]))
        for prepared in self._jobs:
            self.unused += 1
            if prepared.job not in cancelled:
                with contextlib.suppress(Exception):  # its failure no longer matters
                    self._executor.take(prepared.job)  # joins the running draw; dropped
        self._jobs.clear()

    def finish(self) -> None:
        """End the look-ahead at the loop's end: discard what was not served."""
        with self._lock:
            left = self._jobs or self._to_submit > 0
            self._end_locked("the call ended before the planned per-step draws" if left else None)
