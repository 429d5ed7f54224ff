"""Whether the SGLang code that runs is the code `support` found reviewed: the live check.

`support` decides each path by the installed *files* (source digests, once per process). What
runs is the live function objects: a relied-on function patched at run time (an "offset noise"
wrapper), a swapped `__code__`, another plugin's hook around a target, or `torch.randn`
replaced all run other code than the files say. `problem(path)` checks, at every call that
would prepare or serve noise on `path`, that each function of `reviewed.PATHS[path]`, found at
its place now, carries the code its installed source compiles to, and that `torch.randn` /
`Tensor.normal_` are torch's (`prenoise.guards.live_code`: verified once per code object, then
dict and identity checks).

The plugin's own hooks wrap some of those functions: SGLang's `HookRegistry` puts an AROUND
wrapper (`hook_registry._wrap_fn`'s, its code that of the installed sglang source) around each
target. `unwrap` looks through exactly those wrappers whose `hook` cell is one of prenoise's
hooks, to the `original_fn` cell (what the wrapper calls, whatever `__wrapped__` says); the
wrappers prenoise's own tools install to observe a call are `live_code.observing`'s. A wrapper of
another plugin, around or inside prenoise's, is not the reviewed code.
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterable

from prenoise.guards.live_code import is_source_code, observing, reviewed_code_problem
from prenoise.integrations.sglang.reviewed import LIVE_UNCHECKED, PATHS
from prenoise.integrations.sglang.support import installed_digest

__all__ = ["HOOK_REGISTRY_MODULE", "observing", "own_hooks", "problem", "unwrap"]

HOOK_REGISTRY_MODULE = "sglang.srt.plugins.hook_registry"
"""Where SGLang's `HookRegistry` builds its wrappers (`_wrap_fn`)."""

_lock = threading.Lock()
_around_code: list[types.CodeType | None] = []  # [the AROUND wrapper's code], once found
_hooks: set[object] = set()  # the plugin's AROUND hook functions (`own_hooks`)


def own_hooks(hooks: Iterable[object]) -> None:
    """Record `hooks` as the plugin's own AROUND hooks (`plugin` does, for every hook table)."""
    with _lock:
        _hooks.update(hooks)


def _around() -> types.CodeType | None:
    """The code of `HookRegistry`'s AROUND wrapper when it is the installed sglang source's
    (None: `hook_registry` is not loaded or not its source)."""
    with _lock:
        if _around_code:
            return _around_code[0]
    registry = sys.modules.get(HOOK_REGISTRY_MODULE)
    if registry is None:
        return None
    try:
        around = registry._wrap_fn(len, len, registry.HookType.AROUND).__code__
    except Exception:  # another sglang's registry: nothing is recognised as prenoise's
        around = None
    if around is not None and not is_source_code(around, HOOK_REGISTRY_MODULE):
        around = None
    with _lock:
        _around_code[:] = [around]
    return around


def unwrap(layer: object) -> object | None:
    """The function `layer` calls when it is prenoise's own wrapper (a `HookRegistry` AROUND
    wrapper of one of the plugin's hooks); else None."""
    code = getattr(layer, "__code__", None)
    if not isinstance(code, types.CodeType) or code is not _around():
        return None
    closure = getattr(layer, "__closure__", None) or ()
    cells = dict(zip(code.co_freevars, closure, strict=False))
    try:
        hook, original = cells["hook"].cell_contents, cells["original_fn"].cell_contents
    except (KeyError, ValueError):
        return None
    return original if hook in _hooks else None


def problem(path: str) -> str | None:
    """Why the code that runs for `path` now is not the reviewed code `support` checked (None:
    it is): the first relied-on function found changed at run time, or `torch.randn` /
    `Tensor.normal_` replaced. Checked at every call (cached per code object). A function the
    installed source does not define (reviewed as `ABSENT`) is not looked for, nor a key of
    `reviewed.LIVE_UNCHECKED` (its source digest only)."""
    keys = tuple(k for k in PATHS[path] if k not in LIVE_UNCHECKED)
    return reviewed_code_problem(keys, unwrap, installed_digest)
