"""See each block of a modular pipeline call start, in the call's own context only.

Every leaf block of a diffusers modular pipeline begins by reading its inputs with
`ModularPipelineBlocks.get_block_state(state)`. While at least one overlapped modular call runs,
that one method of that one base class is replaced by a dispatcher: inside an overlapped call's
context (a `contextvars.ContextVar`) it first tells the call's watcher which block is starting
and hands it the live `PipelineState`, then reads the inputs exactly as diffusers does;
everywhere else (other threads, other requests, calls not enabled) it is diffusers' own method.
The watcher only reads the state; it never changes what the block reads.

Installs are reference-counted under a lock; the last `release` restores diffusers' method
(only where the attribute still holds our dispatcher, so a later patch by someone else is kept).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

__all__ = ["BlockWatcher", "block_watch", "is_installed"]


class BlockWatcher(Protocol):
    """What the dispatcher tells about each leaf block of the call that starts."""

    def block_starts(self, block: Any, state: Any) -> None:
        """`block` is about to read its inputs from `state` (a diffusers `PipelineState`)."""
        ...


_active: contextvars.ContextVar[BlockWatcher | None] = contextvars.ContextVar(
    "prenoise_modular_blocks", default=None
)
_lock = threading.Lock()
_users = 0
_original: Callable[..., Any] | None = None


def _blocks_class() -> Any:
    from diffusers.modular_pipelines.modular_pipeline import ModularPipelineBlocks

    return ModularPipelineBlocks


def _dispatch(self: Any, state: Any) -> Any:
    original = _original
    assert original is not None  # installed before any call can reach here
    watcher = _active.get()
    if watcher is not None:
        watcher.block_starts(self, state)
    return original(self, state)


_dispatch.__name__ = "get_block_state"
_dispatch.__qualname__ = "ModularPipelineBlocks.get_block_state"
_dispatch.__doc__ = "prenoise dispatcher: tells an overlapped modular call which block starts."


def _acquire() -> None:
    global _users, _original
    cls = _blocks_class()
    with _lock:
        _users += 1
        current = cls.__dict__["get_block_state"]
        if current is not _dispatch:
            _original = current
            cls.get_block_state = _dispatch


def _release() -> None:
    global _users
    cls = _blocks_class()
    with _lock:
        _users -= 1
        if _users > 0:
            return
        if cls.__dict__.get("get_block_state") is _dispatch and _original is not None:
            cls.get_block_state = _original


def is_installed() -> bool:
    """True while the dispatcher replaces `ModularPipelineBlocks.get_block_state`."""
    return _blocks_class().__dict__.get("get_block_state") is _dispatch


@contextmanager
def block_watch(watcher: BlockWatcher) -> Iterator[None]:
    """Tell `watcher` of each leaf block that starts in this context; restore on exit (also
    when the block raises)."""
    _acquire()
    token = _active.set(watcher)
    try:
        yield
    finally:
        _active.reset(token)
        _release()
