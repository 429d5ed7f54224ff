"""The replay queue of one modular pipeline call: draws made on clones, served on exact state.

A modular call learns its draws part-way through (when its first encoder block starts, see
`hook.py`), so the queue starts empty and `submit` adds the plan later. Unlike the classic
queue, the worker never touches the caller's generators: for each planned generator it makes a
private CPU clone in the caller's state at `submit` time and draws the planned tensors from it,
in plan order, recording each draw's start and end state. A `randn_tensor` call is served the
prepared tensor only when

- it is the next planned draw by key (shape, dtype, the identity of each generator),
  on a CPU device or a device the tensor is moved to, strided layout, and
- every one of its generators is, byte for byte, in the state the clone drew that tensor from.

Then each generator is set to the state the clone was left in — exactly what the plain draw
leaves. Anything else (a mismatch, a failed job, a generator someone else drew from since) ends
the plan: pending jobs are cancelled, running ones joined, and this and every later call runs
the plain `randn_tensor` (or the stream's). Nothing needs rewinding, since the caller's
generators were only ever moved by served draws. The values therefore are the plain call's
bit for bit whatever the plan says; a wrong plan costs only the time of the wasted draws.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
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
from prenoise.integrations.diffusers.plan import PlannedDraw
from prenoise.preparation.draws import Draw, run_draw
from prenoise.preparation.executor import PreparationExecutor

__all__ = ["CloneReplayQueue"]

RandnTensor = Callable[..., Any]


@dataclass
class _Entry:
    planned: PlannedDraw
    job: str
    draws: tuple[Draw, ...]
    # id(generator) -> its state before / after this entry's draws (set by the worker)
    before: dict[int, torch.Tensor] = field(default_factory=dict, repr=False)
    after: dict[int, torch.Tensor] = field(default_factory=dict, repr=False)


def _generators(generator: object) -> tuple[torch.Generator, ...] | None:
    gens = generators_of(generator)
    if gens is None or not all(isinstance(g, torch.Generator) for g in gens):
        return None
    return gens


class CloneReplayQueue:
    """Planned draws of one modular call, drawn on generator clones and served on exact state."""

    def __init__(
        self,
        executor: PreparationExecutor,
        noise_stream: str = "native",
        fallback: RandnTensor | None = None,
    ) -> None:
        """`executor` (open, one lane) runs the draws; `noise_stream` draws them; `fallback`
        (None: diffusers' own `randn_tensor`) answers every call the queue does not serve."""
        self._executor = executor
        self._noise_stream = noise_stream
        self._fallback = fallback
        self._entries: list[_Entry] = []
        self._generator_ids: set[int] = set()
        self._position = 0
        self._active = True
        self._lock = threading.Lock()
        self.wait_s = 0.0
        self.mismatch: str | None = None

    # -- planning (request thread) ------------------------------------------------------------
    @property
    def noise_stream(self) -> str:
        """The stream the prepared draws are made in."""
        return self._noise_stream

    @property
    def planned(self) -> tuple[PlannedDraw, ...]:
        return tuple(e.planned for e in self._entries)

    @property
    def served(self) -> int:
        """Prepared draws handed to the pipeline so far."""
        return self._position

    def submit(self, planned: Sequence[PlannedDraw]) -> None:
        """Clone the planned generators in their current state and submit one job per draw.

        Raises `ValueError` (before anything is submitted) for a draw that cannot be built."""
        entries = [self._entry(i, p) for i, p in enumerate(planned)]
        clones: dict[int, torch.Generator] = {}
        for entry in entries:
            for g in entry.planned.generators:
                if id(g) not in clones:
                    clone = torch.Generator(device="cpu")
                    clone.set_state(g.get_state())
                    clones[id(g)] = clone
        with self._lock:
            self._entries = entries
            self._generator_ids = set(clones)
        for entry in entries:
            self._executor.submit(
                entry.job,
                lambda entry=entry: self._draw(entry, clones, self._noise_stream),  # type: ignore[misc]
                predicted=entry.planned.key,
            )

    @staticmethod
    def _entry(index: int, planned: PlannedDraw) -> _Entry:
        return _Entry(planned, f"{index}:{planned.label}", planned_rows(planned))

    @staticmethod
    def _draw(entry: _Entry, clones: dict[int, torch.Generator], stream: str) -> torch.Tensor:
        """Worker: this entry's draws on the clones (which earlier entries already advanced)."""
        gens = [clones[id(g)] for g in entry.planned.generators]
        entry.before = {id(g): clones[id(g)].get_state() for g in entry.planned.generators}
        rows = [
            run_draw(d, g, allow_scalar_path=True, noise_stream=stream)
            for d, g in zip(entry.draws, gens, strict=True)
        ]
        entry.after = {id(g): clones[id(g)].get_state() for g in entry.planned.generators}
        return rows[0] if len(rows) == 1 else torch.cat(rows, dim=0)

    # -- consumption (request thread) ---------------------------------------------------------
    def serve(self, original: RandnTensor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Answer one `randn_tensor(*args, **kwargs)` call of this context (see module doc)."""
        original = self._fallback or original
        try:
            shape, generator, device, dtype, layout = bind_randn_tensor(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)
        gens = _generators(generator)
        with self._lock:
            if (
                not self._active
                or gens is None
                or self._position >= len(self._entries)
                or not any(id(g) in self._generator_ids for g in gens)
            ):
                return original(*args, **kwargs)
            entry = self._entries[self._position]
            problem = call_problem(entry.planned, shape, gens, device, dtype, layout)
            if problem is None:
                start = time.perf_counter()
                try:
                    tensor: torch.Tensor = self._executor.take(entry.job, actual=entry.planned.key)
                except Exception as error:  # a failed preparation never reaches the caller
                    problem = f"prepared draw {entry.planned.label!r} failed: {error!r}"
                else:
                    problem = self._state_problem(entry, gens)
                    if problem is None:
                        for g in unique_generators(gens):
                            g.set_state(entry.after[id(g)])
                        self._position += 1
                        out = tensor.to(target_device(device))
                        self.wait_s += time.perf_counter() - start
                        return out
            self._end_locked(problem)
        return original(*args, **kwargs)

    @staticmethod
    def _state_problem(entry: _Entry, gens: tuple[torch.Generator, ...]) -> str | None:
        for g in unique_generators(gens):
            if not torch.equal(g.get_state(), entry.before[id(g)]):
                return (
                    f"the generator moved since the draws were planned (before "
                    f"{entry.planned.label!r}): something else drew from it"
                )
        return None

    def end(self, problem: str) -> None:
        """Discard the draws not yet served (pending ones cancelled, running ones joined); every
        later call runs the plain draw. `problem` says why (the first reason is kept)."""
        with self._lock:
            self._end_locked(problem)

    def _end_locked(self, problem: str) -> None:
        if not self._active:
            return
        self._active = False
        self.mismatch = problem
        remaining = self._entries[self._position :]
        if not remaining:
            return
        cancelled = set(self._executor.cancel_pending())
        for entry in remaining:
            if entry.job in cancelled:
                continue
            # joins the job; the result (or a failure) is dropped: it changes nothing
            with contextlib.suppress(Exception):
                self._executor.take(entry.job, actual=entry.planned.key)

    def finish(self) -> str | None:
        """End the plan if it was not fully served; returns why it was left, if it was."""
        with self._lock:
            if self._active and self._position < len(self._entries):
                left = ", ".join(e.planned.label for e in self._entries[self._position :])
                self._end_locked(f"the call did not make the planned draw(s): {left}")
            self._active = False
            return self.mismatch
