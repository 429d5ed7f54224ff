"""`enable(pipe)` / `disable(pipe)`: route plain `pipe(...)` calls through `overlapped_call`.

Python looks `__call__` up on the type, so `enable` swaps the instance's class for a cached
subclass with the same name, module and signature whose `__call__` calls `overlapped_call`;
`disable` swaps the original class back. Other instances of the class are not affected.

The subclass cannot be found by name (its name leads to the original class), so it pickles
itself as the original class and is enabled again on load: `pickle` and `copy` give an enabled
pipeline, and unpickling needs only prenoise and diffusers.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

from prenoise.guards.sizes import byte_count
from prenoise.integrations.diffusers.pipeline_class import (
    ORIGINAL_CLASS_ATTR,
    check_pipeline,
    is_enabled,
    is_modular,
    original_class,
)

__all__ = ["check_pipeline", "disable", "enable", "is_enabled", "original_class"]

logger = logging.getLogger("prenoise.integrations.diffusers")

_subclasses: dict[type, type] = {}
_lock = threading.Lock()


def _rebuild_enabled(rebuild: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """Unpickling: rebuild the pipeline as its original class, then enable it again."""
    pipe = rebuild(*args)
    pipe.__class__ = _overlapped_subclass(type(pipe))
    return pipe


def _reduce_ex(self: Any, protocol: Any) -> Any:
    """Pickle an enabled pipeline as its original class, re-enabled by `_rebuild_enabled`."""
    cls, sub = original_class(self), type(self)
    reduce_ex: Any = cls.__reduce_ex__  # the original class's own reduction, unbound
    reduced = reduce_ex(self, protocol)
    if isinstance(reduced, str):  # a global name: nothing to rebuild
        return reduced
    rebuild, args, *rest = reduced
    # The default reductions (`copyreg.__newobj__`, `_reconstructor`) name the class in `args`.
    args = tuple(cls if a is sub else a for a in args)
    return (_rebuild_enabled, (rebuild, args), *rest)


def _overlapped_subclass(cls: type) -> type:
    with _lock:
        sub = _subclasses.get(cls)
        if sub is None:

            @functools.wraps(cls.__call__)
            def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
                from prenoise.integrations.diffusers.call import overlapped_call

                return overlapped_call(self, *args, **kwargs)

            from prenoise.integrations.diffusers.raw_draws import class_overrides

            namespace = {
                **class_overrides(cls),  # opens a stream window after a method (raw_draws.py)
                "__call__": __call__,
                "__reduce_ex__": _reduce_ex,
                ORIGINAL_CLASS_ATTR: cls,
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
                "__doc__": cls.__doc__,
            }
            sub = type(cls.__name__, (cls,), namespace)
            _subclasses[cls] = sub
        return sub


def enable(
    pipe: Any,
    stream: str = "native",
    *,
    steps_ahead: int = 4,
    bytes_ahead: int | str = 256 << 20,
) -> Any:
    """Make plain `pipe(...)` calls of this instance run as `overlapped_call(pipe, ...)`.

    `pipe` must be a diffusers pipeline instance (`TypeError` otherwise). Idempotent; returns
    `pipe`. An enabled pipeline pickles and copies as an enabled pipeline. With
    `stream="native"` (default) outputs are unchanged bit for bit (see `overlapped_call`).
    `stream="x86"` or `"libm"` is an explicit opt-in to a named noise stream
    (`prenoise.noise.streams`): the pipeline's `randn_tensor` draws (and the raw `torch.randn`
    draws `raw_draws.py` covers) are then what torch draws on an x86 AVX2 / a libm (ARM) host,
    the same on every machine — different from local torch on one of them. The stream is
    self-checked here: `NoiseStreamError` if refused.

    `steps_ahead` / `bytes_ahead` bound the per-step sampler noise drawn ahead of a stochastic
    scheduler's steps (`step_noise.py`): at most that many draws and bytes wait unserved;
    `steps_ahead=0` draws them in the loop as the plain call does. The values are the plain
    call's either way. `bytes_ahead` takes a count or a size text ("256MiB", "1GB");
    `ValueError` for a negative limit or an unreadable size.

    Whether the class's plan may be used here is decided now, once per class, from the source
    digests of the diffusers code it relies on (`digests.py`), whatever `diffusers.__version__`
    says; a changed function is warned once, naming it, and the class's calls run plain.

    A diffusers `ModularPipeline` (e.g. `MiniMaxH3Blocks().init_pipeline(...)`) is accepted with
    the same contract (`integrations.diffusers.modular`): its initial draws are prepared ahead
    and `stream` covers every `randn_tensor` draw of its calls. Per-step sampler noise is not
    drawn ahead for modular pipelines: their loops draw it plainly, and limits other than the
    defaults are refused there with a warning saying so.
    """
    check_pipeline(pipe, "enable")
    _check_code_once(pipe)
    from prenoise.integrations.diffusers.step_noise import LIMITS_ATTR, LookaheadLimits
    from prenoise.integrations.diffusers.streams import STREAM_ATTR
    from prenoise.noise import streams as noise_streams

    limits = LookaheadLimits(steps=steps_ahead, bytes=byte_count(bytes_ahead, "bytes_ahead"))
    noise_streams.check_stream_name(stream)
    if stream == noise_streams.NATIVE:
        if STREAM_ATTR in vars(pipe):
            delattr(pipe, STREAM_ATTR)
    else:
        noise_streams._require(stream, torch_float32())
        setattr(pipe, STREAM_ATTR, stream)
    if limits == LookaheadLimits():
        if LIMITS_ATTR in vars(pipe):
            delattr(pipe, LIMITS_ATTR)
    else:
        setattr(pipe, LIMITS_ATTR, limits)
    if is_modular(pipe) and limits != LookaheadLimits():
        logger.warning(
            "prenoise: %s: steps_ahead/bytes_ahead have no effect on a modular pipeline: its "
            "per-step sampler noise is drawn plainly in the loop (the values are the same)",
            type(pipe).__name__,
        )
    if not is_enabled(pipe):
        pipe.__class__ = _overlapped_subclass(type(pipe))
    return pipe


def _check_code_once(pipe: Any) -> None:
    """Whether the diffusers code the class's plan relies on is the reviewed code, computed here
    once per class (`digests.py`); a changed function is warned now, once, with the same key
    the call's plain fall-through uses (so it is not warned again)."""
    from prenoise.integrations.diffusers.digests import class_code_problem, modular_code_problem
    from prenoise.integrations.diffusers.report import log_once

    cls = original_class(pipe)
    if is_modular(pipe):
        from prenoise.integrations.diffusers.modular.registry import modular_plan_for

        changed = modular_code_problem(cls) if modular_plan_for(cls) is not None else None
    else:
        from prenoise.integrations.diffusers.registry import planner_for

        changed = class_code_problem(cls) if planner_for(cls) is not None else None
    if changed is not None:
        log_once(cls.__name__, "changed-code", changed)


def torch_float32() -> Any:
    import torch

    return torch.float32


def disable(pipe: Any) -> Any:
    """Undo `enable(pipe)`: plain calls run the pipeline's own `__call__` again (and any noise
    stream and look-ahead limits are forgotten). Returns `pipe`.

    `pipe` must be a diffusers pipeline instance (`TypeError` otherwise)."""
    check_pipeline(pipe, "disable")
    from prenoise.integrations.diffusers.step_noise import LIMITS_ATTR
    from prenoise.integrations.diffusers.streams import STREAM_ATTR

    for attr in (STREAM_ATTR, LIMITS_ATTR):
        if attr in vars(pipe):
            delattr(pipe, attr)
    if is_enabled(pipe):
        pipe.__class__ = original_class(pipe)
    return pipe
