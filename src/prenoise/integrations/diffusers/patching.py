"""Context-local replacement of diffusers' module-level `randn_tensor` names.

diffusers modules bind `randn_tensor` at import (`from ...utils.torch_utils import randn_tensor`).
While at least one overlapped call runs, every loaded `diffusers.*` module whose `randn_tensor`
is the original function gets one shared dispatcher instead. The dispatcher looks up a
`contextvars.ContextVar`: inside an overlapped call's context it hands the call to that call's
replay queue; everywhere else — other threads, other requests, worker threads — it calls the
original function with the same arguments, so their behaviour is unchanged.

Installs are reference-counted under a lock; the last `release` restores every patched name
(only where the name still holds our dispatcher, so a later patch by someone else is kept).
"""

from __future__ import annotations

import contextvars
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Protocol

__all__ = [
    "PATCHED_NAME",
    "ReplayTarget",
    "active_replay",
    "is_dispatcher",
    "original_randn_tensor",
    "patched_modules",
    "replay_context",
]

PATCHED_NAME = "randn_tensor"
_TORCH_UTILS = "diffusers.utils.torch_utils"

RandnTensor = Callable[..., Any]


class ReplayTarget(Protocol):
    """What the dispatcher hands a call to inside an overlapped call's context."""

    def serve(self, original: RandnTensor, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Return the tensor for this `randn_tensor(*args, **kwargs)` call."""
        ...


_active: contextvars.ContextVar[ReplayTarget | None] = contextvars.ContextVar(
    "prenoise_diffusers_replay", default=None
)
_lock = threading.Lock()
_users = 0
_patched: dict[str, tuple[ModuleType, RandnTensor]] = {}


def original_randn_tensor() -> RandnTensor:
    """diffusers' own `randn_tensor` (never the dispatcher)."""
    import diffusers.utils.torch_utils

    original: RandnTensor = diffusers.utils.torch_utils.randn_tensor
    return original


def _dispatch(*args: Any, **kwargs: Any) -> Any:
    original = original_randn_tensor()
    target = _active.get()
    if target is None:
        return original(*args, **kwargs)
    return target.serve(original, args, kwargs)


_dispatch.__name__ = PATCHED_NAME
_dispatch.__qualname__ = PATCHED_NAME
_dispatch.__doc__ = "prenoise dispatcher: replays prepared draws in an overlapped call's context."


def active_replay() -> ReplayTarget | None:
    """The replay target of the current context (None outside an overlapped call)."""
    return _active.get()


def patched_modules() -> dict[str, ModuleType]:
    """Modules whose `randn_tensor` currently is the dispatcher (installed by us)."""
    with _lock:
        return {name: module for name, (module, _) in _patched.items()}


_candidates: list[tuple[str, ModuleType]] = []
_candidates_seen = -1  # len(sys.modules) at the last scan: rescan only after imports


def _diffusers_modules_with_name() -> list[tuple[str, ModuleType]]:
    global _candidates, _candidates_seen
    if len(sys.modules) != _candidates_seen:
        _candidates_seen = len(sys.modules)
        _candidates = [
            (name, module)
            for name, module in list(sys.modules.items())
            if name.startswith("diffusers.")
            and name != _TORCH_UTILS
            and module is not None
            and hasattr(module, PATCHED_NAME)
        ]
    return _candidates


def _patch_loaded_modules(original: RandnTensor) -> None:
    for name, module in _diffusers_modules_with_name():
        current = getattr(module, PATCHED_NAME, None)
        if current is original and name not in _patched:
            setattr(module, PATCHED_NAME, _dispatch)
            _patched[name] = (module, original)


def _acquire() -> None:
    global _users
    original = original_randn_tensor()
    with _lock:
        _users += 1
        _patch_loaded_modules(original)  # every call: also covers modules imported since


def _release() -> None:
    global _users
    with _lock:
        _users -= 1
        if _users > 0:
            return
        for module, original in _patched.values():
            if getattr(module, PATCHED_NAME, None) is _dispatch:
                setattr(module, PATCHED_NAME, original)
        _patched.clear()


def is_dispatcher(value: object) -> bool:
    """True if `value` is the prenoise dispatcher."""
    return value is _dispatch


@contextmanager
def replay_context(target: ReplayTarget) -> Iterator[None]:
    """Route this context's `randn_tensor` calls to `target`; restore everything on exit.

    The patch stays installed while any other context still uses it; the context variable is
    reset and the reference released even when the block raises.
    """
    _acquire()
    token = _active.set(target)
    try:
        yield
    finally:
        _active.reset(token)
        _release()
