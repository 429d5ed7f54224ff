"""`enable(pipe)` / `disable(pipe)`: route plain `pipe(...)` calls through `overlapped_call`.

Python looks `__call__` up on the type, so `enable` swaps the instance's class for a cached
subclass with the same name, module and signature whose `__call__` calls `overlapped_call`;
`disable` swaps the original class back. Other instances of the class are not affected.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

__all__ = ["disable", "enable", "is_enabled", "original_class"]

_ORIGINAL = "_prenoise_original_class"
_subclasses: dict[type, type] = {}
_lock = threading.Lock()


def original_class(pipe: Any) -> type:
    """The pipeline's own class (its class before `enable`)."""
    cls = type(pipe)
    original = cls.__dict__.get(_ORIGINAL)
    return original if isinstance(original, type) else cls


def is_enabled(pipe: Any) -> bool:
    """True if plain calls of `pipe` go through `overlapped_call`."""
    return original_class(pipe) is not type(pipe)


def _overlapped_subclass(cls: type) -> type:
    with _lock:
        sub = _subclasses.get(cls)
        if sub is None:

            @functools.wraps(cls.__call__)
            def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
                from prenoise.integrations.diffusers.call import overlapped_call

                return overlapped_call(self, *args, **kwargs)

            namespace = {
                "__call__": __call__,
                _ORIGINAL: cls,
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
                "__doc__": cls.__doc__,
            }
            sub = type(cls.__name__, (cls,), namespace)
            _subclasses[cls] = sub
        return sub


def enable(pipe: Any, stream: str = "native") -> Any:
    """Make plain `pipe(...)` calls of this instance run as `overlapped_call(pipe, ...)`.

    Idempotent; returns `pipe`. With `stream="native"` (default) outputs are unchanged bit for
    bit (see `overlapped_call`). `stream="x86"` or `"libm"` is an explicit opt-in to a named
    noise stream (`prenoise.noise_streams`): the pipeline's `randn_tensor` draws are then what
    torch draws on an x86 AVX2 / a libm (ARM) host, the same on every machine — different from
    local torch on one of them. The stream is self-checked here: `NoiseStreamError` if refused.
    """
    from prenoise import noise_streams
    from prenoise.integrations.diffusers.streams import STREAM_ATTR

    noise_streams.check_stream_name(stream)
    if stream == noise_streams.NATIVE:
        if STREAM_ATTR in vars(pipe):
            delattr(pipe, STREAM_ATTR)
    else:
        noise_streams._require(stream, torch_float32())
        setattr(pipe, STREAM_ATTR, stream)
    if not is_enabled(pipe):
        pipe.__class__ = _overlapped_subclass(type(pipe))
    return pipe


def torch_float32() -> Any:
    import torch

    return torch.float32


def disable(pipe: Any) -> Any:
    """Undo `enable(pipe)`: plain calls run the pipeline's own `__call__` again (and any noise
    stream is forgotten). Returns `pipe`."""
    from prenoise.integrations.diffusers.streams import STREAM_ATTR

    if STREAM_ATTR in vars(pipe):
        delattr(pipe, STREAM_ATTR)
    if is_enabled(pipe):
        pipe.__class__ = original_class(pipe)
    return pipe
