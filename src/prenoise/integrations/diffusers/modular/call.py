"""`overlapped_modular_call_with_report`: a modular pipeline call with its noise drawn early.

The call runs the pipeline's own `__call__` unchanged, inside two contexts: the `randn_tensor`
dispatcher (`patching.py`) routes the call's draws to a `RandnTensorServer` (the core's served
draws: made on clones, served on exact key and state), and the block hook
(`hook.py`) tells a `_Watcher` each leaf block that starts. When the first trigger block of the
class's `ModularPlan` starts (an encoder), the watcher plans the draws from the live state and
submits them; they are drawn on the worker while the encoders run. A confirm block checks what
the encoders produced before anything prepared is taken. Whatever cannot be planned runs plain
(the reason is warned once per class), never differently.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from prenoise.integrations.diffusers.digests import modular_code_problem, modular_live_problem
from prenoise.integrations.diffusers.modular.hook import block_watch, diffusers_method_problem
from prenoise.integrations.diffusers.modular.plan import (
    ModularPlan,
    PlanLater,
    block_path,
    state_values,
)
from prenoise.integrations.diffusers.modular.registry import modular_plan_for
from prenoise.integrations.diffusers.patching import (
    PATCHED_NAME,
    active_replay,
    is_dispatcher,
    original_randn_tensor,
    replay_context,
)
from prenoise.integrations.diffusers.pipeline_class import original_class
from prenoise.integrations.diffusers.plan import PlannedDraw, Unpredictable, call_generators
from prenoise.integrations.diffusers.report import (
    CallReport,
    log_once,
    say_active_once,
)
from prenoise.integrations.diffusers.rng_probe import probe_global_rng
from prenoise.integrations.diffusers.served_calls import RandnTensorServer, overlapped_report
from prenoise.integrations.diffusers.streams import (
    noise_stream_of,
    plain_in_stream,
    stream_randn_tensor,
)
from prenoise.preparation.executor import PreparationExecutor

__all__ = ["overlapped_modular_call_with_report"]


@dataclass
class _Watcher:
    """Plans the call's draws at its first trigger block and confirms them at confirm blocks."""

    pipe: Any
    plan: ModularPlan
    queue: RandnTensorServer
    planned: Sequence[PlannedDraw] = ()
    triggered: bool = False
    reason: str | None = None
    key: str | None = None
    plan_s: float = 0.0
    confirmed: set[str] = field(default_factory=set)

    def block_starts(self, block: Any, state: Any) -> None:
        path = block_path(block)
        if not self.triggered and path in self.plan.triggers:
            start = time.perf_counter()
            self.triggered = self._plan(state_values(state))
            self.plan_s += time.perf_counter() - start
        confirm = self.plan.confirms.get(path)
        if confirm is not None and self.planned and path not in self.confirmed:
            self.confirmed.add(path)
            problem = confirm(state_values(state), self.planned)
            if problem is not None:
                self.queue.end(problem)

    def _plan(self, values: Any) -> bool:
        """Plan and submit; False when the planner waits for a later trigger (`PlanLater`)."""
        try:
            gens = call_generators(values.get("generator"))
            try:
                planned = self.plan.planner(self.pipe, values, gens)
            except PlanLater:
                return False
            except Unpredictable:
                raise
            except Exception as error:
                raise Unpredictable(f"plan failed: {error!r}", "plan-error") from None
            if not planned:
                raise Unpredictable("nothing to prepare", "empty-plan")
            _check_draw_modules(planned)
            probe_global_rng(planned, self.queue.noise_stream)
            try:
                self.queue.submit(planned)
            except ValueError as error:
                raise Unpredictable(str(error), "draw") from None
        except Unpredictable as why:
            self.reason, self.key = why.reason, why.key
            return True
        self.planned = planned
        return True

    def not_planned(self) -> tuple[str, str] | None:
        """(reason, key) when the call ran without a plan."""
        if self.planned:
            return None
        if self.reason is not None and self.key is not None:
            return self.reason, self.key
        triggers = ", ".join(sorted(t.rsplit(".", 1)[-1] for t in self.plan.triggers))
        return f"no encoder block ran ({triggers})", "no-trigger"


def _check_draw_modules(planned: Sequence[PlannedDraw]) -> None:
    original = original_randn_tensor()
    for draw in planned:
        name = draw.module or ""
        current = getattr(sys.modules.get(name), PATCHED_NAME, None)
        if current is not original and not is_dispatcher(current):
            raise Unpredictable(f"{name}.{PATCHED_NAME} is replaced by someone else", "foreign")


def _unplannable(cls: type) -> tuple[ModularPlan | None, str | None, str | None]:
    """The class's plan, or why the call runs plain before it starts (reason, key).

    Whatever `diffusers.__version__` says, a plan is used only where the installed code it
    relies on is the reviewed code (`digests.modular_code_problem`, once per class)."""
    plan = modular_plan_for(cls)
    if plan is None:
        return None, f"no noise plan for {cls.__module__}.{cls.__qualname__}", "class"
    changed = modular_code_problem(cls)
    if changed is not None:
        return None, changed, "changed-code"
    live = modular_live_problem(cls) or diffusers_method_problem()
    if live is not None:
        return None, live, "live-code"
    if active_replay() is not None:
        return None, "nested inside another overlapped call", "nested"
    return plan, None, None


def overlapped_modular_call_with_report(
    pipe: Any, *args: Any, **kwargs: Any
) -> tuple[Any, CallReport]:
    """`overlapped_call` for a diffusers `ModularPipeline` (see the module doc)."""
    start = time.perf_counter()
    cls = original_class(pipe)
    name = cls.__name__
    stream = noise_stream_of(pipe)
    plain = cls.__call__
    fallback = None if stream == "native" else partial(stream_randn_tensor, stream)
    plan, reason, key = _unplannable(cls)
    if plan is None:
        assert reason is not None and key is not None
        log_once(name, key, reason)
        setup_s = time.perf_counter() - start
        call = plain if fallback is None else partial(plain_in_stream, plain, stream)
        output = call(pipe, *args, **kwargs)
        return output, CallReport(name, False, reason, stream=stream, setup_s=setup_s)
    # PRENOISE_DEBUG_RNG=1 probes prenoise's own draws when they are planned (rng_probe.py): the
    # executor's check around the whole call would count the pipeline's own global draws
    with PreparationExecutor(name="prenoise-diffusers", check_global_rng=False) as executor:
        queue = RandnTensorServer((), stream, fallback)
        queue.start(executor)
        watcher = _Watcher(pipe, plan, queue)
        with replay_context(queue), block_watch(watcher):
            call_start = time.perf_counter()
            output = plain(pipe, *args, **kwargs)
            call_end = time.perf_counter()
        left = queue.finish()
    end = time.perf_counter()
    setup_s = call_start - start + watcher.plan_s
    teardown_s = end - call_end
    unplanned = watcher.not_planned()
    if unplanned is not None:
        log_once(name, unplanned[1], unplanned[0])
        report = CallReport(
            name, False, unplanned[0], stream=stream, setup_s=setup_s, teardown_s=teardown_s
        )
        return output, report
    planned = watcher.planned
    say_active_once(name, planned)
    report = overlapped_report(name, queue, left, stream, setup_s, teardown_s)
    return output, report
