"""`overlapped_call`: a pipeline call whose noise is drawn on a worker during encoding.

The call runs the pipeline's own `__call__` unchanged. Before it starts, the plan of the
pipeline's class lists the `randn_tensor` calls it will make; they are drawn on a
`PreparationExecutor` worker from the caller's generators while the request thread encodes the
prompt (and images) — on clones of the caller's generators, by the engine-neutral
`prenoise.preparation.served.ServedDraws` — and handed back in order only on the exact key and
generator state (`served_calls.RandnTensorServer`).
Whatever cannot be predicted safely runs the plain call.

Logging (logger "prenoise.integrations.diffusers", messages prefixed "prenoise:"): each reason a
pipeline class runs the plain call is a warning, once per process; that overlap is active is
said once per class at INFO.
"""

from __future__ import annotations

import inspect
import logging
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch

from prenoise.integrations.diffusers.digests import (
    class_code_problem,
    class_live_problem,
    relied_on,
)
from prenoise.integrations.diffusers.patching import (
    PATCHED_NAME,
    active_replay,
    is_dispatcher,
    original_randn_tensor,
    replay_context,
)
from prenoise.integrations.diffusers.pipeline_class import (
    check_pipeline,
    is_modular,
    original_class,
)
from prenoise.integrations.diffusers.plan import PlannedDraw, Unpredictable, call_generators
from prenoise.integrations.diffusers.raw_draws import CallWindow, active_window, call_window
from prenoise.integrations.diffusers.registry import planner_for
from prenoise.integrations.diffusers.report import (
    CallReport,
    log_once,
    say_active_once,
)
from prenoise.integrations.diffusers.rng_probe import probe_global_rng
from prenoise.integrations.diffusers.served_calls import RandnTensorServer, overlapped_report
from prenoise.integrations.diffusers.step_noise import (
    draws_in_this_call,
    lookahead_limits_of,
    scheduler_lookahead,
)
from prenoise.integrations.diffusers.streams import (
    noise_stream_of,
    plain_in_stream,
    stream_randn_tensor,
)
from prenoise.preparation.executor import PreparationExecutor

__all__ = ["CallReport", "overlapped_call", "overlapped_call_with_report", "plan_call"]

logger = logging.getLogger("prenoise.integrations.diffusers")

CHANGED_CODE = "changed-code"
"""The warn-once key of a class whose relied-on diffusers code is not the reviewed code."""
LIVE_CODE = "live-code"
"""The warn-once key of a call whose running code is not the reviewed code (a runtime patch,
a wrapper, stale bytecode: `digests.class_live_problem`)."""


def _instance_override(pipe: Any, cls: type) -> str | None:
    """A relied-on method of `cls` shadowed on the instance (`pipe.prepare_latents = ...`)."""
    own = getattr(pipe, "__dict__", {})
    for key in relied_on(f"{cls.__module__}.{cls.__qualname__}"):
        qualname = key.partition(":")[2]
        owner, _, name = qualname.rpartition(".")
        if owner == cls.__qualname__ and name in own:
            return f"the code that runs is not the reviewed code: {qualname} is set on the instance"
    return None


def plan_call(pipe: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> list[PlannedDraw]:
    """The draws `pipe(*args, **kwargs)` will make, in order; `Unpredictable` if not safe.

    A modular pipeline's draws are planned during the call, once its encoder blocks start:
    `Unpredictable` here (`CallReport.planned` lists them after an overlapped call)."""
    if is_modular(pipe):
        raise Unpredictable(
            "a modular pipeline's draws are planned during the call (see CallReport.planned)",
            "modular",
        )
    return _plan_with_arguments(pipe, args, kwargs)[0]


def _plan_with_arguments(
    pipe: Any, args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[list[PlannedDraw], dict[str, Any]]:
    """`plan_call`, also returning the bound call arguments (defaults applied) it planned from.

    Whatever `diffusers.__version__` says, the class is planned only where the installed code
    its plan relies on is the reviewed code (`digests.class_code_problem`, once per class)."""
    cls = original_class(pipe)
    planner = planner_for(cls)
    if planner is None:
        raise Unpredictable(f"no noise plan for {cls.__module__}.{cls.__qualname__}", "class")
    changed = class_code_problem(cls)
    if changed is not None:
        raise Unpredictable(changed, CHANGED_CODE)
    live = class_live_problem(cls) or _instance_override(pipe, cls)
    if live is not None:
        raise Unpredictable(live, LIVE_CODE)
    if active_replay() is not None:
        raise Unpredictable("nested inside another overlapped call", "nested")
    signature = inspect.signature(cls.__call__)
    try:
        bound = signature.bind(pipe, *args, **kwargs)
    except TypeError as error:
        raise Unpredictable(f"arguments do not bind: {error}", "bind") from None
    bound.apply_defaults()
    values = dict(bound.arguments)
    values.pop(next(iter(signature.parameters)))
    if values.get("latents") is not None:
        raise Unpredictable("caller-supplied latents", "latents-given")
    generators = call_generators(values.get("generator"))
    try:
        planned = planner(pipe, values, generators)
    except Unpredictable:
        raise
    except Exception as error:
        raise Unpredictable(f"plan failed: {error!r}", "plan-error") from None
    if not planned:
        raise Unpredictable("nothing to prepare", "empty-plan")
    original = original_randn_tensor()
    for draw in planned:
        name = draw.module or cls.__module__
        current = getattr(sys.modules.get(name), PATCHED_NAME, None)
        if current is not original and not is_dispatcher(current):
            raise Unpredictable(f"{name}.{PATCHED_NAME} is replaced by someone else", "foreign")
    return planned, values


def _plain_call(
    pipe: Any,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    key: str,
    reason: str,
    start: float,
    call: Callable[..., Any],
    stream: str,
    window: CallWindow | None,
) -> tuple[Any, CallReport]:
    """The pipeline's own call (`call`: plain, or in the pipe's noise stream), reported."""
    name = original_class(pipe).__name__
    log_once(name, key, reason)
    setup_s = time.perf_counter() - start
    with active_window(window):
        output = call(pipe, *args, **kwargs)
    raw = window.served if window is not None else 0
    report = CallReport(name, False, reason, stream=stream, setup_s=setup_s, raw_in_stream=raw)
    return output, report


def overlapped_call_with_report(pipe: Any, *args: Any, **kwargs: Any) -> tuple[Any, CallReport]:
    """`overlapped_call`, also returning a `CallReport` of how the call ran."""
    start = time.perf_counter()
    check_pipeline(pipe, "overlapped_call")
    if is_modular(pipe):
        from prenoise.integrations.diffusers.modular.call import (
            overlapped_modular_call_with_report,
        )

        return overlapped_modular_call_with_report(pipe, *args, **kwargs)
    cls = original_class(pipe)
    name = cls.__name__
    stream = noise_stream_of(pipe)
    plain = cls.__call__
    fall_through: Any = plain
    fallback = None
    if stream != "native":  # every draw of the call in the stream, even on the plain path
        fallback = partial(stream_randn_tensor, stream)
        fall_through = partial(plain_in_stream, plain, stream)
    window = call_window(cls, pipe, stream)  # the pipeline's own torch.randn draws, if covered
    try:
        planned, arguments = _plan_with_arguments(pipe, args, kwargs)
    except Unpredictable as why:
        return _plain_call(
            pipe, args, kwargs, why.key, why.reason, start, fall_through, stream, window
        )
    try:
        queue = RandnTensorServer(planned, stream, fallback)
    except ValueError as error:  # only a planned draw that cannot be built is a "draw" fallback
        return _plain_call(
            pipe, args, kwargs, "draw", str(error), start, fall_through, stream, window
        )
    say_active_once(name, planned)
    limits = lookahead_limits_of(pipe)
    probe_global_rng(planned, stream)  # PRENOISE_DEBUG_RNG=1: prenoise's draws, not the call's
    with PreparationExecutor(name="prenoise-diffusers", check_global_rng=False) as executor:
        queue.start(executor)
        scheduler = getattr(pipe, "scheduler", None)
        if limits.steps > 0 and scheduler is not None:
            queue.steps = scheduler_lookahead(executor, scheduler, stream, limits)
            if draws_in_this_call(pipe, scheduler, arguments.get("eta")):
                _prepare_first_step_draw(queue, planned)
        try:
            with replay_context(queue), active_window(window):
                call_start = time.perf_counter()
                output = plain(pipe, *args, **kwargs)
                call_end = time.perf_counter()
        except BaseException:
            queue.finish()
            raise
        left = queue.finish()
    end = time.perf_counter()
    report = overlapped_report(
        name,
        queue,
        left,
        stream,
        call_start - start,
        end - call_end,
        raw_in_stream=window.served if window is not None else 0,
        **_step_fields(queue.steps),
    )
    return output, report


def _prepare_first_step_draw(queue: RandnTensorServer, planned: Sequence[PlannedDraw]) -> None:
    """Prepare the first per-step draw at the noise's shape, on its one generator, in the
    noise's dtype and in float32 (the schedulers draw like the model output, which the
    pipelines often upcast), from the state the planned draws leave that generator in (its
    clone's, read on the worker after them)."""
    noise = [p for p in planned if p.label == "noise" and len(p.generators) == 1]
    if noise and queue.steps is not None:
        draw = noise[-1]
        generator = draw.generators[0]
        dtypes = tuple(dict.fromkeys((draw.dtype, torch.float32)))
        served = queue.draws
        queue.steps.prepare_first(
            draw.shape, generator, dtypes, lambda: served.clone_state(generator)
        )


def _step_fields(steps: Any) -> dict[str, Any]:
    if steps is None:
        return {}
    return {
        "step_served": steps.served,
        "step_unused": steps.unused,
        "step_left": steps.left,
        "step_wait_s": steps.wait_s,
        "step_first_ahead": steps.first_ahead,
    }


def overlapped_call(pipe: Any, *args: Any, **kwargs: Any) -> Any:
    """Return exactly what `pipe(*args, **kwargs)` returns, bitwise, with its noise drawn early.

    The pipeline's CPU noise draws are made on a worker thread while the prompt (and images)
    are encoded, from the caller's own generator(s), which end in exactly the state the plain
    call leaves them in (also when the call raises). The global RNG is not touched beyond what
    the plain call does. Calls that cannot be predicted safely — `generator=None`, the default
    generator (`torch.manual_seed(seed)`'s return value, which other code on the calling thread
    also draws from), non-CPU generators, caller-supplied `latents`, unknown classes, a class
    whose relied-on diffusers code is not the reviewed code (`digests.py`; the warning names the
    changed function) — run the plain call, and the reason is warned once per pipeline class on
    "prenoise.integrations.diffusers". `pipe` must be a diffusers pipeline instance (`TypeError`
    otherwise).
    """
    return overlapped_call_with_report(pipe, *args, **kwargs)[0]
