"""The replay queue of one overlapped call: prepared draws handed out in order, checked first.

Each `PlannedDraw` is one job on the call's `PreparationExecutor` (one lane, so the jobs run in
plan order on the caller's generators). The worker records every generator's state before it
draws. When the pipeline calls `randn_tensor` in the call's context:

- a call that uses none of the planned generators (e.g. `generator=None`) runs unchanged;
- a call that matches the next planned draw — shape, dtype, the same generator objects, a CPU
  draw, strided layout — gets the prepared tensor (moved to the requested device, as
  `randn_tensor` does); the values are those `torch.randn` gives on the generator in the state
  the serial call would have it in, because the same draws ran before it in the same order;
- anything else (a mismatch, or a failed prepared job) *settles* the queue: pending jobs are
  cancelled, running ones joined, each generator is set back to its state before the first
  unconsumed draw — exactly where the serial call has it — and this and every later call runs
  the original `randn_tensor`.

`finish` settles whatever was not consumed, so the generators end exactly where the serial call
leaves them also when the call raises or draws less than planned.

Once every planned draw was served, later calls on the call's generators (a stochastic
scheduler's per-step noise) go to the call's `step_noise.StepLookahead`, when it has one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from prenoise.integrations.diffusers.draw_calls import (
    bind_randn_tensor,
    call_problem,
    generators_of,
    planned_rows,
    target_device,
    unique_generators,
)
from prenoise.integrations.diffusers.patching import RandnTensor
from prenoise.integrations.diffusers.plan import PlannedDraw
from prenoise.integrations.diffusers.step_noise import StepLookahead
from prenoise.preparation.draws import Draw, run_draw
from prenoise.preparation.executor import PreparationExecutor

__all__ = ["ReplayQueue"]

logger = logging.getLogger("prenoise.integrations.diffusers")


@dataclass
class _Entry:
    planned: PlannedDraw
    job: str
    draws: tuple[Draw, ...]
    before: list[tuple[torch.Generator, torch.Tensor]] | None = field(default=None, repr=False)


class ReplayQueue:
    """Prepared draws of one call, served in plan order to matching `randn_tensor` calls."""

    def __init__(
        self,
        planned: Sequence[PlannedDraw],
        noise_stream: str = "native",
        fallback: RandnTensor | None = None,
    ) -> None:
        """`noise_stream` draws the prepared values; `fallback` (None: diffusers' own) answers
        the calls the queue does not serve."""
        self._noise_stream = noise_stream
        self._fallback = fallback
        self._executor: PreparationExecutor | None = None
        self._entries = [self._entry(i, p) for i, p in enumerate(planned)]
        self._generator_ids = {id(g) for p in planned for g in p.generators}
        self._position = 0
        self._active = True
        self._lock = threading.Lock()
        self.wait_s = 0.0
        self.mismatch: str | None = None
        self.steps: StepLookahead | None = None
        """Set by the call after `start`: serves the per-step draws once the plan is served."""

    @staticmethod
    def _entry(index: int, planned: PlannedDraw) -> _Entry:
        # Built on the request thread: an invalid draw raises here, before anything runs.
        return _Entry(planned, f"{index}:{planned.label}", planned_rows(planned))

    # -- preparation (worker thread) ------------------------------------------------------------
    def start(self, executor: PreparationExecutor) -> None:
        """Submit one job per planned draw to `executor` (an open one), in plan order."""
        self._executor = executor
        for entry in self._entries:
            executor.submit(
                entry.job,
                lambda entry=entry: self._draw(entry, self._noise_stream),  # type: ignore[misc]
                predicted=entry.planned.key,
                generators=unique_generators(entry.planned.generators),
            )

    @staticmethod
    def _draw(entry: _Entry, noise_stream: str) -> torch.Tensor:
        generators = entry.planned.generators
        entry.before = [(g, g.get_state()) for g in unique_generators(generators)]
        rows = [
            run_draw(d, g, allow_scalar_path=True, noise_stream=noise_stream)
            for d, g in zip(entry.draws, generators, strict=True)
        ]
        return rows[0] if len(rows) == 1 else torch.cat(rows, dim=0)

    # -- consumption (request thread) -----------------------------------------------------------
    @property
    def served(self) -> int:
        """Prepared draws handed to the pipeline so far."""
        return self._position

    @property
    def planned(self) -> tuple[PlannedDraw, ...]:
        return tuple(e.planned for e in self._entries)

    def serve(self, original: RandnTensor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Answer one `randn_tensor(*args, **kwargs)` call of this context (see module doc)."""
        original = self._fallback or original
        try:
            shape, generator, device, dtype, layout = bind_randn_tensor(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)
        gens = generators_of(generator)
        with self._lock:
            if (
                not self._active
                or gens is None
                or not any(id(g) in self._generator_ids for g in gens)
            ):
                return original(*args, **kwargs)
            if self._position >= len(self._entries):
                if self.steps is None:
                    return original(*args, **kwargs)
                return self.steps.serve(original, args, kwargs, shape, gens, device, dtype, layout)
            entry = self._entries[self._position]
            assert self._executor is not None
            problem = call_problem(entry.planned, shape, gens, device, dtype, layout)
            if problem is None:
                start = time.perf_counter()
                try:
                    tensor: torch.Tensor = self._executor.take(entry.job, actual=entry.planned.key)
                except Exception as error:  # a failed preparation never reaches the caller
                    problem = f"prepared draw {entry.planned.label!r} failed: {error!r}"
                else:
                    self._position += 1
                    out = tensor.to(target_device(device))
                    self.wait_s += time.perf_counter() - start
                    return out
            self._settle_locked(problem)
        return original(*args, **kwargs)

    def _settle_locked(self, problem: str) -> None:
        if not self._active:
            return
        self._active = False
        self.mismatch = problem
        remaining = self._entries[self._position :]
        if not remaining or self._executor is None:
            return
        cancelled = set(self._executor.cancel_pending())
        for entry in remaining:
            if entry.job in cancelled:
                continue
            try:
                self._executor.take(entry.job, actual=entry.planned.key)  # joins; result dropped
            except Exception as error:
                logger.debug("discarded prepared draw %s failed: %r", entry.job, error)
        restored: set[int] = set()
        for entry in remaining:
            for g, state in entry.before or ():
                if id(g) not in restored:
                    g.set_state(state)
                    restored.add(id(g))

    def finish(self) -> str | None:
        """Settle draws the call did not consume; returns why the plan was left, if it was."""
        with self._lock:
            if self._active and self._position < len(self._entries):
                left = ", ".join(e.planned.label for e in self._entries[self._position :])
                self._settle_locked(f"the call did not make the planned draw(s): {left}")
            self._active = False
            if self.steps is not None:
                self.steps.finish()
            return self.mismatch
