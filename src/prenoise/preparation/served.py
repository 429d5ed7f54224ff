"""Prepared draws served only when they are exactly what the serial code would draw.

The one mechanism every integration serves prepared noise through (diffusers' classic and
modular calls, the vLLM-Omni plugin, the SGLang plugin). An integration keeps only what is its
own: where it hooks, how it predicts the draws from upstream's code, what key a real call has.

- A plan is a sequence of `KeyedDraw`s: a label, the `key` the real call must have (whatever
  identifies it at the call site: shape, dtype, device, layout, stream, generator identity, a
  seed), the caller-owned generators it advances (none for a draw that seeds its own generator
  from a request seed), and the work that draws it.
- `ServedDraws.submit(plan)` copies every named generator, byte for byte, into a private CPU
  *clone* in the state it has now, and submits one job per draw in plan order to the
  executor. The worker draws from the clones only, recording each clone's state before and
  after the draw. The caller's generators are never touched by the worker.
- `serve(key, generators)` (request thread) hands a prepared tensor over only when the call's
  key equals the planned one and each generator is a plain `torch.Generator` whose state equals,
  byte for byte, the state its clone drew from; each generator is then set to its clone's state
  after the draw — exactly where the serial draw leaves it.
- Anything else — another key, a moved generator, a generator of another type, a failed job —
  *ends* the plan: pending jobs are cancelled, running ones joined and their results dropped,
  and `serve` returns None for this and every later call: the caller runs its serial draw.
  Nothing needs rewinding, since only served draws ever moved the caller's generators. So the
  values are the serial code's bit for bit whatever the plan says; a wrong plan costs time.

`finish()` ends what was not served (also when the call raised) and says why, if anything was
left. Per-step sampler noise, drawn one step ahead, is `lookahead.StepLookahead`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from prenoise.preparation.draws import Draw, run_draw
from prenoise.preparation.executor import PreparationExecutor

__all__ = [
    "DrawWork",
    "KeyMismatch",
    "KeyedDraw",
    "ServedDraws",
    "clone_generator",
    "rows_work",
    "unique_generators",
]

DrawWork = Callable[[tuple[torch.Generator, ...]], Any]
"""Draws one planned tensor (or a result holding it) from the clones of the draw's generators
(in `generators` order); `serve` hands over what it returns."""

KeyMismatch = Callable[[str, Hashable, Hashable], None]
"""Told `(label, planned key, actual key)` after a key mismatch ended the plan (it may raise)."""


@dataclass(frozen=True)
class KeyedDraw:
    """One draw the serial code will make, and how to make it ahead.

    `key`: what the real call must have (compared with `==`). `generators`: the caller's
    generators the serial draw advances, in the order `work` receives their clones (repeats
    allowed: one clone per distinct generator); empty for a draw that makes its own generator
    (from a seed that is then part of `key`). `work(clones)` runs on the worker thread."""

    label: str
    key: Hashable
    work: DrawWork
    generators: tuple[torch.Generator, ...] = ()


def unique_generators(generators: Sequence[torch.Generator]) -> list[torch.Generator]:
    """The generators in first-seen order, each once (by identity)."""
    seen: dict[int, torch.Generator] = {}
    for g in generators:
        seen.setdefault(id(g), g)
    return list(seen.values())


def clone_generator(generator: torch.Generator) -> torch.Generator:
    """A private CPU generator in `generator`'s state (its `get_state()` bytes)."""
    clone = torch.Generator(device="cpu")
    clone.set_state(generator.get_state())
    return clone


def rows_work(draws: Sequence[Draw], noise_stream: str = "native") -> DrawWork:
    """`work` for a tensor drawn as `draws[i]` on clone `i` and concatenated along dim 0 (one
    draw: returned as it is), as `torch.randn` on each generator of a list draws it."""

    def work(clones: tuple[torch.Generator, ...]) -> torch.Tensor:
        rows = [
            run_draw(d, g, allow_scalar_path=True, noise_stream=noise_stream)
            for d, g in zip(draws, clones, strict=True)
        ]
        return rows[0] if len(rows) == 1 else torch.cat(rows, dim=0)

    return work


def _is_plain_generator(generator: object) -> bool:
    # a subclass may override get_state/set_state: its state could not be proven equal
    return type(generator) is torch.Generator and generator.device.type == "cpu"


@dataclass
class _Entry:
    planned: KeyedDraw
    job: str
    # id(caller generator) -> its clone's state before / after this draw (set by the worker)
    before: dict[int, torch.Tensor] = field(default_factory=dict, repr=False)
    after: dict[int, torch.Tensor] = field(default_factory=dict, repr=False)
    served: bool = False


class ServedDraws:
    """One call's (or one request's) prepared draws, served on key and exact generator state.

    `executor` (open) runs the draws; `job_name(index, draw)` names each draw's job (default
    `"<index>:<label>"`; plans that share one executor need distinct names). See the module
    doc for the exact semantics."""

    def __init__(
        self,
        executor: PreparationExecutor,
        job_name: Callable[[int, KeyedDraw], str] | None = None,
    ) -> None:
        self._executor = executor
        self._job_name = job_name or _index_and_label
        self._entries: list[_Entry] = []
        self._clones: dict[int, torch.Generator] = {}
        self._lock = threading.Lock()
        self._active = True
        self.served = 0
        """Prepared draws handed over so far."""
        self.wait_s = 0.0
        """Time `serve` waited for prepared draws (the request thread's share of the noise)."""
        self.ended: str | None = None
        """Why the plan ended before every draw was served (the first reason), if it did."""

    # -- planning (request thread) -------------------------------------------------------------
    @property
    def planned(self) -> tuple[KeyedDraw, ...]:
        return tuple(e.planned for e in self._entries)

    @property
    def active(self) -> bool:
        """Whether draws may still be served (False once the plan ended or finished)."""
        return self._active

    def owns(self, generator: torch.Generator) -> bool:
        """Whether `generator` is one the plan's draws advance."""
        return id(generator) in self._clones

    def submit(self, planned: Sequence[KeyedDraw]) -> None:
        """Clone the planned generators in their current state and submit one job per draw.

        Raises `ValueError` before anything is submitted when a generator cannot be cloned
        exactly (not a plain CPU `torch.Generator`), or when the plan was submitted already."""
        if self._entries:
            raise ValueError("a ServedDraws plan is submitted once")
        clones: dict[int, torch.Generator] = {}
        for draw in planned:
            for g in draw.generators:
                if not _is_plain_generator(g):
                    raise ValueError(
                        f"draw {draw.label!r}: generator of type {type(g).__name__} on "
                        f"{getattr(g, 'device', '?')} (only a plain CPU torch.Generator's "
                        "state can be proven equal)"
                    )
                if id(g) not in clones:
                    clones[id(g)] = clone_generator(g)
        entries = [_Entry(d, self._job_name(i, d)) for i, d in enumerate(planned)]
        with self._lock:
            self._entries = entries
            self._clones = clones
        for entry in entries:
            self._executor.submit(entry.job, lambda entry=entry: self._draw(entry))  # type: ignore[misc]

    def clone_state(self, generator: torch.Generator) -> torch.Tensor:
        """The state `generator`'s clone is in now (the caller's own state for a generator the
        plan does not advance). On the executor's lane after the plan's jobs, this is the
        state the planned draws leave it in: where a draw that follows them starts."""
        clone = self._clones.get(id(generator))
        return (clone or generator).get_state()

    def _draw(self, entry: _Entry) -> Any:
        """Worker: the entry's draw on the clones (which earlier entries already advanced)."""
        gens = entry.planned.generators
        entry.before = {id(g): self._clones[id(g)].get_state() for g in gens}
        tensor = entry.planned.work(tuple(self._clones[id(g)] for g in gens))
        entry.after = {id(g): self._clones[id(g)].get_state() for g in gens}
        return tensor

    # -- serving (request thread) --------------------------------------------------------------
    def _next_locked(self) -> _Entry | None:
        return next((e for e in self._entries if not e.served), None)

    def serve(
        self,
        key: Hashable,
        generators: Sequence[torch.Generator] = (),
        *,
        label: str | None = None,
        on_key_mismatch: KeyMismatch | None = None,
    ) -> Any:
        """The prepared tensor (what the draw's work returned) for a call with `key` on
        `generators`, or None: draw serially.

        `label` picks the planned draw (None: the first one not served yet). Served only on an
        equal key and every generator in the exact state its clone drew from; the generators are
        then set to the clones' end state. Otherwise the plan ends (see the module doc; `ended`
        names both keys of a key mismatch) and `on_key_mismatch` is told of it after."""
        with self._lock:
            if not self._active:
                return None
            entry = self._find_locked(label)
            if entry is None:
                return None
            if key != entry.planned.key:
                planned = entry.planned
                self._end_locked(
                    f"draw {planned.label!r} was planned as {planned.key!r}, the call is {key!r}"
                )
                mismatch = (entry.planned.label, entry.planned.key, key)
            else:
                mismatch = None
                start = time.perf_counter()
                problem, tensor = self._take_locked(entry, generators)
                if tensor is not None:
                    self.wait_s += time.perf_counter() - start
                    return tensor
                self._end_locked(problem)
        if mismatch is not None and on_key_mismatch is not None:
            on_key_mismatch(*mismatch)
        return None

    def _find_locked(self, label: str | None) -> _Entry | None:
        if label is None:
            return self._next_locked()
        return next((e for e in self._entries if e.planned.label == label and not e.served), None)

    def _take_locked(self, entry: _Entry, generators: Sequence[torch.Generator]) -> tuple[str, Any]:
        """(why not, None), or ("", the tensor) with the generators moved to the end state."""
        planned = entry.planned
        if [id(g) for g in generators] != [id(g) for g in planned.generators]:
            return f"draw {planned.label!r} was asked for on other generators", None
        entry.served = True  # taken from the executor now, whatever follows
        try:
            tensor: Any = self._executor.take(entry.job)
        except Exception as error:  # a failed preparation never reaches the caller
            return f"prepared draw {planned.label!r} failed: {error!r}", None
        for g in unique_generators(generators):
            if not _is_plain_generator(g) or not torch.equal(g.get_state(), entry.before[id(g)]):
                return (
                    f"the generator moved since the draws were planned (before "
                    f"{planned.label!r}): something else drew from it"
                ), None
        for g in unique_generators(generators):
            g.set_state(entry.after[id(g)])
        self.served += 1
        return "", tensor

    def discard(self, label: str) -> None:
        """Drop planned draw `label` unserved (cancelled, or joined and dropped) without ending
        the plan: for a draw the caller will not make."""
        with self._lock:
            entry = self._find_locked(label)
            if entry is None:
                return
            entry.served = True
            self._drop([entry])

    def end(self, problem: str) -> None:
        """End the plan: every later `serve` returns None. `problem` says why (the first reason
        is kept)."""
        with self._lock:
            self._end_locked(problem)

    def _end_locked(self, problem: str) -> None:
        if not self._active:
            return
        self._active = False
        self.ended = problem
        remaining = [e for e in self._entries if not e.served]
        for e in remaining:
            e.served = True
        self._drop(remaining)

    def _drop(self, entries: Sequence[_Entry]) -> None:
        """Cancel the entries' pending jobs and join the running ones, dropping every result."""
        if not entries:
            return
        jobs = [e.job for e in entries]
        cancelled = set(self._executor.cancel_pending(jobs))
        for job in jobs:
            if job not in cancelled:
                with contextlib.suppress(Exception):  # a result (or failure) that changes nothing
                    self._executor.take(job)

    def finish(self) -> str | None:
        """End what was not served; returns why the plan was left, if it was."""
        with self._lock:
            left = [e.planned.label for e in self._entries if not e.served]
            if self._active and left:
                self._end_locked(f"the call did not make the planned draw(s): {', '.join(left)}")
            self._active = False
            return self.ended


def _index_and_label(index: int, draw: KeyedDraw) -> str:
    return f"{index}:{draw.label}"
