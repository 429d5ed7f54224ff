"""Test helpers: the ways the live-code tests change a relied-on function at run time.

The live-code tests of each integration (diffusers, vLLM-Omni, SGLang) patch a relied-on
function the way an "offset noise" plugin would — where it is defined and wherever it was
imported (`rebind`, `offset_everywhere`) — or keep the function object and swap its `__code__`
for the same source with an offset added (`offset_code`); each undoes its change afterwards.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

OFFSET = 0.125


@contextmanager
def rebind(package: str, name: str, value: object, original: object) -> Iterator[None]:
    """Set `name` to `value` in every loaded module of `package` (module names starting with it)
    that binds `original`, for the block; at least one must."""
    touched = [
        m
        for n, m in list(sys.modules.items())
        if n.startswith(package) and getattr(m, name, None) is original
    ]
    assert touched
    for module in touched:
        setattr(module, name, value)
    try:
        yield
    finally:
        for module in touched:
            setattr(module, name, original)


@contextmanager
def offset_everywhere(package: str, module: str, name: str) -> Iterator[None]:
    """`rebind` module `module`'s function `name` to one that adds `OFFSET` to its result."""
    real = getattr(sys.modules[module], name)

    def offset(*args: Any, **kwargs: Any) -> torch.Tensor:
        return real(*args, **kwargs) + OFFSET

    with rebind(package, name, offset, real):
        yield


@contextmanager
def offset_code(module: str, name: str, after: str) -> Iterator[None]:
    """The function object `name` of `module` stays; for the block its `__code__` is its own
    source with `+ OFFSET` added after each `after` (e.g. `.contiguous()`)."""
    loaded = sys.modules[module]
    function = getattr(loaded, name)
    source = inspect.getsource(function).replace(after, f"{after} + {OFFSET}")
    assert f"+ {OFFSET}" in source
    space = dict(vars(loaded))
    exec(compile(source, "<offset>", "exec"), space)
    real = function.__code__
    function.__code__ = space[name].__code__
    try:
        yield
    finally:
        function.__code__ = real
