"""`overlapped_call`: a pipeline call whose noise is drawn on a worker during encoding.

The call runs the pipeline's own `__call__` unchanged. Before it starts, the plan of the
pipeline's class lists the `randn_tensor` calls it will make; they are drawn on a
`PreparationExecutor` worker from the caller's generators while the request thread encodes the
prompt (and images), and handed back in order by the replay queue (see `queue.ReplayQueue`).
Whatever cannot be predicted safely runs the plain call and is logged once per reason.
"""

from __future__ import annotations

import inspect
import logging
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from prenoise.executor import PreparationExecutor
from prenoise.integrations.diffusers.enabling import original_class
from prenoise.integrations.diffusers.patching import (
    PATCHED_NAME,
    active_replay,
    is_dispatcher,
    original_randn_tensor,
    replay_context,
)
from prenoise.integrations.diffusers.plan import PlannedDraw, Unpredictable, call_generators
from prenoise.integrations.diffusers.queue import ReplayQueue
from prenoise.integrations.diffusers.registry import TESTED_DIFFUSERS_VERSIONS, planner_for
from prenoise.integrations.diffusers.streams import (
    StreamTarget,
    noise_stream_of,
    stream_randn_tensor,
)

__all__ = ["CallReport", "overlapped_call", "overlapped_call_with_report", "plan_call"]

logger = logging.getLogger("prenoise.integrations.diffusers")

_CALLER_CHOICES = frozenset({"generator-none", "latents-given", "audio-latents-given", "nested"})
_logged: set[tuple[str, str]] = set()
_logged_lock = threading.Lock()


def log_once(pipeline: str, key: str, message: str) -> None:
    """Log `message` the first time `(pipeline, key)` is seen in this process."""
    with _logged_lock:
        if (pipeline, key) in _logged:
            return
        _logged.add((pipeline, key))
    level = logging.INFO if key in _CALLER_CHOICES else logging.WARNING
    logger.log(level, "%s: plain call (%s)", pipeline, message)


@dataclass(frozen=True)
class CallReport:
    """How one call ran.

    `overlapped` is False when the plain call ran from the start (`reason` says why). `planned`
    lists the prepared draws, `served` how many the pipeline consumed, `left_plan` why the rest
    were discarded (the generators were set back; the output is the plain call's either way),
    and `wait_s` the request thread's time blocked on prepared draws. `stream` is the noise
    stream every draw of the call was made in (see `enable(pipe, stream=...)`).
    """

    pipeline: str
    overlapped: bool
    reason: str | None = None
    planned: tuple[str, ...] = ()
    served: int = 0
    left_plan: str | None = None
    wait_s: float = 0.0
    stream: str = "native"


def plan_call(pipe: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> list[PlannedDraw]:
    """The draws `pipe(*args, **kwargs)` will make, in order; `Unpredictable` if not safe."""
    import diffusers

    cls = original_class(pipe)
    if diffusers.__version__ not in TESTED_DIFFUSERS_VERSIONS:
        raise Unpredictable(
            f"diffusers {diffusers.__version__} is untested "
            f"(plans checked on {sorted(TESTED_DIFFUSERS_VERSIONS)})",
            "version",
        )
    planner = planner_for(cls)
    if planner is None:
        raise Unpredictable(f"no noise plan for {cls.__module__}.{cls.__qualname__}", "class")
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
    return planned


def overlapped_call_with_report(pipe: Any, *args: Any, **kwargs: Any) -> tuple[Any, CallReport]:
    """`overlapped_call`, also returning a `CallReport` of how the call ran."""
    cls = original_class(pipe)
    name = cls.__name__
    stream = noise_stream_of(pipe)
    plain = cls.__call__
    fall_through: Any = plain
    fallback = None
    if stream != "native":  # every draw of the call in the stream, even on the plain path
        fallback = partial(stream_randn_tensor, stream)
        fall_through = partial(_plain_in_stream, plain, stream)
    try:
        planned = plan_call(pipe, args, kwargs)
        queue = ReplayQueue(planned, stream, fallback)
    except Unpredictable as why:
        log_once(name, why.key, why.reason)
        output = fall_through(pipe, *args, **kwargs)
        return output, CallReport(name, False, why.reason, stream=stream)
    except ValueError as error:
        log_once(name, "draw", str(error))
        output = fall_through(pipe, *args, **kwargs)
        return output, CallReport(name, False, str(error), stream=stream)
    with PreparationExecutor(name="prenoise-diffusers") as executor:
        queue.start(executor)
        try:
            with replay_context(queue):
                output = plain(pipe, *args, **kwargs)
        except BaseException:
            queue.finish()
            raise
        left = queue.finish()
    if left is not None:
        log_once(name, "left-plan", f"prepared draws discarded: {left}")
    report = CallReport(
        name,
        True,
        planned=tuple(p.label for p in planned),
        served=queue.served,
        left_plan=left,
        wait_s=queue.wait_s,
        stream=stream,
    )
    return output, report


def _plain_in_stream(plain: Any, stream: str, pipe: Any, *args: Any, **kwargs: Any) -> Any:
    """The plain call with every `randn_tensor` draw made in the non-native `stream`."""
    with replay_context(StreamTarget(stream)):
        return plain(pipe, *args, **kwargs)


def overlapped_call(pipe: Any, *args: Any, **kwargs: Any) -> Any:
    """Return exactly what `pipe(*args, **kwargs)` returns, bitwise, with its noise drawn early.

    The pipeline's CPU noise draws are made on a worker thread while the prompt (and images)
    are encoded, from the caller's own generator(s), which end in exactly the state the plain
    call leaves them in (also when the call raises). The global RNG is not touched beyond what
    the plain call does. Calls that cannot be predicted safely — `generator=None`, non-CPU
    generators, caller-supplied `latents`, unknown classes, untested diffusers versions — run
    the plain call, and the reason is logged once on "prenoise.integrations.diffusers".
    """
    return overlapped_call_with_report(pipe, *args, **kwargs)[0]
