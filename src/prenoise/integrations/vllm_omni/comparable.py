"""All of `_build_denoise_inputs`' result as values `prenoise.verify.compare` checks faithfully.

`ComparableCopy` walks the whole returned structure when it returns — dicts, lists/tuples,
dataclasses (slots ones too), named tuples, `SimpleNamespace` and any other object's attributes,
tensors (copied with their strides and storage offset: the denoise loop may change them in place
later), numbers, dtypes, devices, None, strings — into plain nested values, one field per value
under its dotted path. What it cannot compare faithfully (functions, classes, C objects, cycles,
odd keys) is listed in `uncompared`, never skipped silently.
"""

from __future__ import annotations

import dataclasses
import enum
import pathlib
import types
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from prenoise.verify.leaves import is_leaf

__all__ = ["TYPE_KEY", "ComparableCopy"]

TYPE_KEY = "__type__"
"""The key under which a walked object's type is recorded (one field per object)."""

_BUILTIN_LEAVES = (int, float, complex, str, bytes)
_NOT_DATA = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.GeneratorType,
    types.CoroutineType,
)


class ComparableCopy:
    """A copy of a nested value made only of what `compare` checks faithfully, taken at once.

    Tensors are copied storage and all (same shape, strides, storage offset, dtype, device,
    requires_grad), so what the pipeline does to them later cannot change what is compared.
    Mappings with plain keys, lists and tuples keep their types; objects (dataclasses, named
    tuples, `SimpleNamespace`, any instance with a `__dict__` or `__slots__`) become a dict of
    their attributes plus `__type__`, their type's qualified name; numpy values become tensors
    (under `__type__`); subclasses of int, float, str keep their type under `__type__`. What is
    none of these (functions, classes, modules, C objects without attributes, reference
    cycles, unsupported mapping keys) is listed in `uncompared` (`path: why`), which fails the
    verdict: a value is never skipped silently.
    """

    def __init__(self) -> None:
        self.uncompared: list[str] = []
        self._active: set[int] = set()  # ids of the containers on the current path

    def fields(self, value: Mapping[str, Any], prefix: str) -> dict[str, Any]:
        """`{prefix.key: copy}` for each top-level key of `value` (named keys only)."""
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not _is_name(key):
                self._skip(f"{prefix}[{key!r}]", "a top-level key that is not a name")
                continue
            out[f"{prefix}.{key}"] = self.copy(item, f"{prefix}.{key}")
        return out

    def copy(self, value: Any, path: str) -> Any:
        """`value` as a comparable copy (see the class docstring); `path` names it in reports."""
        kind = type(value)
        if isinstance(value, torch.Tensor):
            copied = _tensor_copy(value)
            return copied if kind is torch.Tensor else {TYPE_KEY: _type_name(value), "data": copied}
        # what `compare` compares exactly as it is (its own leaf rule); paths it judges itself
        if is_leaf(value) or isinstance(value, pathlib.PurePath):
            return value
        if isinstance(value, np.ndarray | np.generic):
            return self._numpy(value, path)
        if isinstance(value, _BUILTIN_LEAVES):  # e.g. numpy's float64 is a float subclass
            base: Any = next(b for b in _BUILTIN_LEAVES if isinstance(value, b))
            return {TYPE_KEY: _type_name(value), "value": base(value)}
        if isinstance(value, _NOT_DATA):
            return self._skip(path, f"{_type_name(value)} is code, not data")
        if id(value) in self._active:
            return self._skip(path, "reference cycle (a value contains itself)")
        self._active.add(id(value))
        try:
            return self._container(value, path)
        finally:
            self._active.discard(id(value))

    def _container(self, value: Any, path: str) -> Any:
        kind = type(value)
        if isinstance(value, Mapping):
            out = {} if kind is dict else {TYPE_KEY: _type_name(value)}
            return self._items(out, value.items(), path)
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
            named = zip(value._fields, value, strict=True)
            return self._items({TYPE_KEY: _type_name(value)}, named, path)
        if kind is list or kind is tuple:
            return kind(self.copy(item, f"{path}.{i}") for i, item in enumerate(value))
        if isinstance(value, list | tuple):  # e.g. torch.Size
            items = [self.copy(item, f"{path}.{i}") for i, item in enumerate(value)]
            return {TYPE_KEY: _type_name(value), "items": items}
        attributes = _attributes(value)
        if attributes is None:
            return self._skip(path, f"cannot read the attributes of a {_type_name(value)}")
        return self._items({TYPE_KEY: _type_name(value)}, attributes.items(), path)

    def _items(self, out: dict[Any, Any], items: Any, path: str) -> dict[Any, Any]:
        for key, item in items:
            if not _is_plain_key(key):
                self._skip(f"{path}[{key!r}]"[:200], f"a key of type {_type_name(key)}")
            elif key == TYPE_KEY and TYPE_KEY in out:
                self._skip(f"{path}.{key}", f"collides with the {TYPE_KEY} record")
            else:
                out[key] = self.copy(item, _join(path, key))
        return out

    def _numpy(self, value: np.ndarray | np.generic, path: str) -> Any:
        try:
            data = torch.from_numpy(np.array(value, copy=True))
        except (TypeError, ValueError) as error:
            return self._skip(path, f"numpy {value.dtype} has no torch dtype ({error})")
        return {TYPE_KEY: _type_name(value), "data": data}

    def _skip(self, path: str, why: str) -> str:
        self.uncompared.append(f"{path}: {why}")
        return f"<not compared: {why}>"


def _tensor_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A copy with the same storage layout: shape, strides, storage offset (and overlap)."""
    source = tensor.detach()
    if (
        source.layout != torch.strided
        or source.is_quantized
        or source.is_conj()
        or source.is_neg()
        or source.is_nested
    ):
        copied = source.clone()
    else:
        copied = torch.empty(0, dtype=source.dtype, device=source.device)
        copied.set_(
            source.untyped_storage().clone(),
            source.storage_offset(),
            source.size(),
            source.stride(),
        )
    return copied.requires_grad_(tensor.requires_grad) if tensor.requires_grad else copied


def _attributes(value: Any) -> dict[str, Any] | None:
    """An object's instance attributes (`__dict__`, then any `__slots__`); None if it has none
    Python can read (a C object)."""
    found: dict[str, Any] = {}
    has_any = hasattr(value, "__dict__")
    if has_any:
        found.update(vars(value))
    for cls in type(value).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            has_any = True
            if slot not in ("__dict__", "__weakref__") and hasattr(value, slot):
                found.setdefault(slot, getattr(value, slot))
    if dataclasses.is_dataclass(value):
        has_any = True
    return found if has_any else None


def _is_name(key: Any) -> bool:
    """A key that can be one segment of a dotted field name."""
    return type(key) is str and key.isidentifier()


def _is_plain_key(key: Any) -> bool:
    """Keys `compare` matches by type and value: plain values and tuples of them."""
    if type(key) is tuple:
        return all(_is_plain_key(k) for k in key)
    return type(key) in (type(None), bool, int, float, str, bytes) or isinstance(key, enum.Enum)


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if _is_name(key) else f"{path}[{key!r}]"


def _type_name(value: Any) -> str:
    kind = type(value)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"
