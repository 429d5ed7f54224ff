"""diffusers' `randn_tensor` calls answered from the call's prepared draws (classic and modular).

What is diffusers' own here is only how a `randn_tensor(shape, generator, device, dtype,
layout)` call maps onto the engine-neutral `prenoise.preparation.served.ServedDraws`: its key
(shape, dtype, the identity of each generator; strided, on a device the CPU tensor moves to),
its generators, and the tensor moved to the requested device as `randn_tensor` returns it.
Everything about *when* a prepared draw is served — drawn on clones, handed over only on the
exact key and generator state, the generators then set to the clones' end state, anything else
ending the plan (pending cancelled, running joined) so this and every later call is the plain
one — is the core's.

- a call that uses none of the planned generators (e.g. `generator=None`) runs unchanged;
- the planned draws are served in plan order (a classic call submits its plan before it
  starts; a modular one when its first encoder block starts, `submit`);
- once every planned draw was served, later calls (a stochastic scheduler's per-step noise) go
  to `steps` (a `StepLookahead`), when the call has one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from prenoise.integrations.diffusers.draw_calls import (
    bind_randn_tensor,
    call_problem,
    generators_of,
    planned_rows,
    target_device,
)
from prenoise.integrations.diffusers.plan import PlannedDraw
from prenoise.integrations.diffusers.report import CallReport, warn_left_plan_once
from prenoise.observe.noise_record import rank_and_world, record_noise, recording, request_label
from prenoise.preparation.executor import PreparationExecutor
from prenoise.preparation.lookahead import StepLookahead
from prenoise.preparation.served import KeyedDraw, ServedDraws, rows_work

__all__ = ["RandnTensorServer", "keyed_draws", "overlapped_report"]

RandnTensor = Callable[..., Any]


def keyed_draws(planned: Sequence[PlannedDraw], noise_stream: str) -> list[KeyedDraw]:
    """The planned `randn_tensor` calls as the core's keyed draws (built on the request thread:
    a draw that cannot be built raises `ValueError` here, before anything runs)."""
    keyed = []
    for p in planned:
        for g in p.generators:
            if type(g) is not torch.Generator:
                raise ValueError(
                    f"planned draw {p.label!r}: generator of type {type(g).__name__} (only a "
                    "plain torch.Generator's state can be proven equal)"
                )
        work = rows_work(planned_rows(p), noise_stream)
        keyed.append(KeyedDraw(p.label, p.key, work, p.generators))
    return keyed


class RandnTensorServer:
    """The `randn_tensor` calls of one overlapped call, served from its prepared draws."""

    def __init__(
        self,
        planned: Sequence[PlannedDraw] = (),
        noise_stream: str = "native",
        fallback: RandnTensor | None = None,
    ) -> None:
        """`planned`: the draws known before the call (more may be `submit`ted once, after
        `start`); `noise_stream` draws them; `fallback` (None: diffusers' own) answers the calls
        that are not served."""
        self._noise_stream = noise_stream
        self._fallback = fallback
        self._planned = list(planned)
        self._keyed = keyed_draws(self._planned, noise_stream)
        self._served: ServedDraws | None = None
        self.steps: StepLookahead | None = None
        """Set by the call after `start`: serves the per-step draws once the plan is served."""
        self._record = recording()  # PRENOISE_NOISE_RECORD: read once per call, else no cost
        self._request: str | None = None
        self._answered = 0

    @property
    def noise_stream(self) -> str:
        """The stream the prepared draws are made in."""
        return self._noise_stream

    @property
    def planned(self) -> tuple[PlannedDraw, ...]:
        return tuple(self._planned)

    @property
    def draws(self) -> ServedDraws:
        """The core's served draws (after `start`)."""
        assert self._served is not None, "RandnTensorServer.start was not called"
        return self._served

    @property
    def served(self) -> int:
        """Prepared draws handed to the pipeline so far."""
        return self._served.served if self._served is not None else 0

    @property
    def wait_s(self) -> float:
        return self._served.wait_s if self._served is not None else 0.0

    @property
    def mismatch(self) -> str | None:
        """Why the plan was left before every draw was served, if it was."""
        return self._served.ended if self._served is not None else None

    def start(self, executor: PreparationExecutor) -> None:
        """Submit the planned draws (if any) to `executor` (an open one, one lane)."""
        self._served = ServedDraws(executor)
        if self._keyed:
            self._served.submit(self._keyed)

    def submit(self, planned: Sequence[PlannedDraw]) -> None:
        """Submit a plan learnt during the call (after `start`, with none before). `ValueError`
        (before anything is submitted) for a draw that cannot be built."""
        keyed = keyed_draws(planned, self._noise_stream)
        self.draws.submit(keyed)
        self._planned, self._keyed = list(planned), keyed

    def serve(self, original: RandnTensor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Answer one `randn_tensor(*args, **kwargs)` call of this context (see module doc)."""
        original = self._fallback or original
        try:
            shape, generator, device, dtype, layout = bind_randn_tensor(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)
        gens = generators_of(generator)
        served = self._served
        if served is None or gens is None or not any(served.owns(g) for g in gens):
            return original(*args, **kwargs)
        call = (original, args, kwargs)
        if not self._record:
            return self._answer(served, call, shape, gens, device, dtype, layout)
        tensor = self._answer(served, call, shape, gens, device, dtype, layout)
        self._record_draw(tensor, gens)
        return tensor

    def _record_draw(self, tensor: Any, gens: Sequence[torch.Generator]) -> None:
        """Record a draw on the call's generators (`prenoise rollout-check`): the planned ones
        by label (site `plan:LABEL`), then the per-step ones (site `step`, step = the index of
        the draw after the plan), whether served or drawn plainly."""
        index = self._answered
        self._answered += 1
        if not isinstance(tensor, torch.Tensor):
            return
        if self._request is None:
            self._request = request_label(f"call@rank{rank_and_world()[0]}")
        planned = len(self._planned)
        site = f"plan:{self._planned[index].label}" if index < planned else "step"
        record_noise(
            engine="diffusers",
            site=site,
            request=self._request,
            seed=gens[0].initial_seed() if len(gens) == 1 else None,
            step=None if index < planned else index - planned,
            noise=tensor,
        )

    def _answer(
        self,
        served: ServedDraws,
        call: tuple[RandnTensor, tuple[Any, ...], dict[str, Any]],
        shape: Any,
        gens: Any,
        device: Any,
        dtype: Any,
        layout: Any,
    ) -> Any:
        """Answer a call on the planned generators: prepared if it is exactly the next planned
        draw (or a prepared per-step one), else plainly."""
        original, args, kwargs = call
        if not served.active:
            return original(*args, **kwargs)
        if served.served >= len(self._planned):
            if self.steps is None:
                return original(*args, **kwargs)
            return self.steps.serve(
                shape, gens, dtype, layout, device, lambda: original(*args, **kwargs)
            )
        planned = self._planned[served.served]  # served in plan order: the next one
        problem = call_problem(planned, shape, gens, device, dtype, layout)
        if problem is not None:
            served.end(problem)
            return original(*args, **kwargs)
        tensor = served.serve(planned.key, gens)
        if tensor is None:
            return original(*args, **kwargs)
        return tensor.to(target_device(device))

    def end(self, problem: str) -> None:
        """Discard the draws not yet served; every later call runs the plain draw. `problem`
        says why (the first reason is kept)."""
        if self._served is not None:
            self._served.end(problem)

    def finish(self) -> str | None:
        """End what the call did not consume (and the per-step look-ahead); returns why the
        plan was left, if it was."""
        left = self._served.finish() if self._served is not None else None
        if self.steps is not None:
            self.steps.finish()
        return left


def overlapped_report(
    pipeline: str,
    server: RandnTensorServer,
    left: str | None,
    stream: str,
    setup_s: float,
    teardown_s: float,
    **extra: Any,
) -> CallReport:
    """The `CallReport` of a call whose draws `server` served (classic or modular), after
    warning once per class when the plan was `left` before every draw was served."""
    planned = server.planned
    warn_left_plan_once(pipeline, server.served, len(planned), left)
    return CallReport(
        pipeline,
        True,
        planned=tuple(p.label for p in planned),
        served=server.served,
        left_plan=left,
        wait_s=server.wait_s,
        stream=stream,
        setup_s=setup_s,
        teardown_s=teardown_s,
        **extra,
    )
