"""Whether the vLLM-Omni code that runs is the code `support` found reviewed: the live check.

`support` decides each path by the installed *files* (source digests, once per process). What
runs is the live function objects: a relied-on function patched at run time (an "offset noise"
wrapper), a swapped `__code__`, another plugin's wrapper put around one after prenoise
installed, or `torch.randn` replaced all run other code than the files say. `problem(path)`
checks, at every request that would prepare noise ahead on `path` and at every hand-over, that
each function of `reviewed.PATHS[path]`, found at its place now, carries the code its installed
source compiles to, and that `torch.randn` / `Tensor.normal_` are torch's
(`prenoise.guards.live_code`: verified once per code object, then dict and identity checks).

prenoise's own wrappers replace some of those names (`plugin._wrap`'s `installed`, the other
pipelines' hooks of `pipelines._make_hook`): `unwrap` looks through exactly those (their code
objects are prenoise's) to the upstream function their closure calls, whatever `__wrapped__`
says. Any other layer is not the reviewed code.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from prenoise.guards.live_code import reviewed_code_problem
from prenoise.integrations.vllm_omni.digests import installed_digest
from prenoise.integrations.vllm_omni.reviewed import PATHS

__all__ = ["own_wrappers", "problem", "unwrap"]

_own: dict[types.CodeType, str] = {}  # prenoise's wrapper code -> the cell holding upstream's


def own_wrappers(maker: Callable[..., Any], names: tuple[str, ...], cell: str) -> None:
    """Record the wrappers `maker` returns (its nested functions `names`, each calling the
    upstream function in its closure cell `cell`) as prenoise's own (`plugin._wrap`,
    `pipelines._make_hook` do, at import)."""
    for const in maker.__code__.co_consts:
        if isinstance(const, types.CodeType) and const.co_name in names:
            if cell not in const.co_freevars:
                raise ValueError(f"{const.co_name} has no closure cell {cell!r}")
            _own[const] = cell


def unwrap(layer: object) -> object | None:
    """The upstream function `layer` calls when `layer` is one of prenoise's wrappers (by its
    code object); else None."""
    code = getattr(layer, "__code__", None)
    if not isinstance(code, types.CodeType):
        return None
    cell = _own.get(code)
    if cell is None:
        return None
    cells = dict(zip(code.co_freevars, getattr(layer, "__closure__", None) or (), strict=False))
    try:
        found: object = cells[cell].cell_contents
    except (KeyError, ValueError):
        return None
    return found


def problem(path: str) -> str | None:
    """Why the code that runs for `path` now is not the reviewed code `support` checked (None:
    it is): the first relied-on function found changed at run time, or `torch.randn` /
    `Tensor.normal_` replaced. Checked at every call (cached per code object). A function the
    installed source does not define (reviewed as `ABSENT`) is not looked for."""
    return reviewed_code_problem(PATHS[path], unwrap, installed_digest)
