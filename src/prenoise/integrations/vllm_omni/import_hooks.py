"""Run a callback on a module right after it is imported, before anyone imports names from it.

`AfterImport(names, callback)` is a `sys.meta_path` finder that finds nothing itself: for a module
in `names` it asks the finders after it for the real spec and wraps that spec's loader, so the
module executes as it always does and `callback(module)` runs right after (the module already in
`sys.modules`, its spec's loader put back). `callback` must not raise; an exception from it is
logged and swallowed (a plugin must never be why an import fails).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

__all__ = ["AfterImport"]

logger = logging.getLogger("prenoise.vllm_omni")


class AfterImport(importlib.abc.MetaPathFinder):
    """A finder that calls `callback(module)` after each module of `wanted()` executes."""

    def __init__(self, wanted: Callable[[str], bool], callback: Callable[[ModuleType], None]):
        self._wanted = wanted
        self._callback = callback
        self._busy = threading.local()

    def install(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if getattr(self._busy, "on", False) or not self._wanted(fullname):
            return None
        self._busy.on = True  # the finders asked below may import: never wrap recursively
        try:
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._busy.on = False
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            logger.warning(
                "prenoise: cannot hook %s as it is imported (loader %r)", fullname, spec.loader
            )
            return spec
        spec.loader = _Loader(spec.loader, self._callback)
        return spec


class _Loader(importlib.abc.Loader):
    """The real loader, then `callback(module)`; the module's spec gets the real loader back."""

    def __init__(self, loader: Any, callback: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._callback = callback

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        created: ModuleType | None = self._loader.create_module(spec)
        return created

    def exec_module(self, module: ModuleType) -> None:
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        try:
            self._callback(module)
        except Exception:  # never fail upstream's import
            logger.exception("prenoise: hooking %s after its import failed", module.__name__)
