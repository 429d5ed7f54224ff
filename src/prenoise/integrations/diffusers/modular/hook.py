"""See each block of a modular pipeline call start, in the call's own context only.

Every leaf block of a diffusers modular pipeline begins by reading its inputs with
`ModularPipelineBlocks.get_block_state(state)`. While at least one overlapped modular call runs,
that one method of that one base class is replaced by a dispatcher: inside an overlapped call's
context (a `contextvars.ContextVar`) it first tells the call's watcher which block is starting
and hands it the live `PipelineState`, then reads the inputs exactly as diffusers does;
everywhere else (other threads, other requests, calls not enabled) it is diffusers' own method.
The watcher only reads the state; it never changes what the block reads.

Installs are reference-counted under a lock; the last `release` restores what was there before
(only where the attribute still holds our dispatcher, so a later patch by someone else is kept).

Other libraries' wrappers compose with it in any order. The dispatcher calls what held the
attribute when it was installed (a tracing tool's wrapper keeps seeing every call), and it
never takes its own dispatcher — or a wrapper around it — for what it wraps: diffusers' own
method is captured once (`diffusers_method`), and a call that re-enters the dispatcher on the
same thread (a wrapper installed around the dispatcher, then wrapped again) goes to diffusers'
method directly. So no install order can make a dispatcher call itself.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from prenoise.guards.live_code import is_source_code

__all__ = [
    "BlockWatcher",
    "block_watch",
    "diffusers_method",
    "diffusers_method_problem",
    "is_installed",
]


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
_outer: Callable[..., Any] | None = None  # what held the attribute when the dispatcher went in
_diffusers: Callable[..., Any] | None = None  # diffusers' own method, captured once
_inside = threading.local()  # this thread is in the dispatcher (re-entry: a wrapped dispatcher)


def _blocks_class() -> Any:
    from diffusers.modular_pipelines.modular_pipeline import ModularPipelineBlocks

    return ModularPipelineBlocks


def _dispatch(self: Any, state: Any) -> Any:
    method = _diffusers
    assert method is not None  # captured before the dispatcher was installed
    if getattr(_inside, "depth", 0):  # re-entered through a wrapper around the dispatcher
        return method(self, state)
    outer = _outer if _outer is not None else method
    watcher = _active.get()
    if watcher is not None:
        watcher.block_starts(self, state)
    _inside.depth = 1
    try:
        return outer(self, state)
    finally:
        _inside.depth = 0


_dispatch.__name__ = "get_block_state"
_dispatch.__qualname__ = "ModularPipelineBlocks.get_block_state"
_dispatch.__doc__ = "prenoise dispatcher: tells an overlapped modular call which block starts."


def _chain(func: Any) -> list[Any]:
    """`func` and what it wraps, through `__wrapped__` (functools.wraps), outermost first."""
    chain = [func]
    while len(chain) < 16 and getattr(chain[-1], "__wrapped__", None) is not None:
        chain.append(chain[-1].__wrapped__)
    return chain


def _method_of(cls: Any) -> Callable[..., Any]:
    """diffusers' own `get_block_state`: in the class's namespace, or under the wrappers there
    (a tracing tool's), the function whose code is what diffusers' installed source compiles
    to."""
    for func in _chain(cls.__dict__["get_block_state"]):
        code = getattr(func, "__code__", None)
        if func is not _dispatch and code is not None and is_source_code(code, cls.__module__):
            return func  # type: ignore[no-any-return,unused-ignore]
    raise LookupError(
        "ModularPipelineBlocks.get_block_state: diffusers' own method is not found under what "
        "holds the attribute"
    )


def diffusers_method_problem() -> str | None:
    """Why the dispatcher could not be installed now (None: it can): diffusers' own
    `get_block_state` is not found under what holds the attribute."""
    if _diffusers is not None:
        return None
    try:
        _method_of(_blocks_class())
    except LookupError as error:
        return str(error)
    return None


def diffusers_method() -> Callable[..., Any] | None:
    """diffusers' own `get_block_state` as the dispatcher captured it (None: never installed)."""
    return _diffusers


def _acquire() -> None:
    global _users, _outer, _diffusers
    cls = _blocks_class()
    with _lock:
        if _diffusers is None:
            _diffusers = _method_of(cls)
        _users += 1
        current = cls.__dict__["get_block_state"]
        if any(func is _dispatch for func in _chain(current)):
            return  # installed, or wrapped by someone after it went in: calls reach it already
        _outer = current  # diffusers' method, or a wrapper someone put around it
        cls.get_block_state = _dispatch


def _release() -> None:
    global _users
    cls = _blocks_class()
    with _lock:
        _users -= 1
        if _users > 0:
            return
        if cls.__dict__.get("get_block_state") is _dispatch and _outer is not None:
            cls.get_block_state = _outer


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
