"""Which containers `compare` walks, and every piece of state it reads from each.

A container is walked only where all of its state can be seen; anything else is refused
(:class:`UncomparableError`) naming what cannot be seen, never compared by its items alone:

- `dict` and its subclasses (`OrderedDict`, `defaultdict`, `Counter`, a `state_dict()`): the
  stored items (read with `dict.items`, whatever the subclass overrides), the instance's
  attributes (`__dict__` and `__slots__`: a state_dict's `_metadata`), a `defaultdict`'s
  `default_factory` (the same object on both sides) and, for an `OrderedDict`, the key order.
  A plain `dict`'s key order is not compared (as `==` does not: `{"a": 1, "b": 2}` equals
  `{"b": 2, "a": 1}`); an `OrderedDict`'s is (as its `==` does).
- `list`, `tuple` and their subclasses (named tuples, `torch.Size`): the stored items and the
  instance's attributes.
- dataclass instances: every field, and every other instance attribute (set in `__post_init__`
  or later).
- Any other `Mapping` (its state beyond what it yields is not visible) is refused.

Attributes are labelled `container@name` (a key `name` is `container.name`, so the two never
share a label). Nesting deeper than `MAX_DEPTH` levels, and mapping keys (tuples of tuples)
deeper than `leaves.MAX_KEY_DEPTH`, are refused: one line, never a `RecursionError`.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping
from typing import Any

from prenoise.verify.leaves import type_name
from prenoise.verify.reports import UncomparableError

__all__ = [
    "MAX_DEPTH",
    "ByIdentity",
    "attributes",
    "check_container",
    "expanded_size",
    "is_container",
    "items_of",
    "key_order_matters",
]

MAX_DEPTH = 10_000
"""Containers nested deeper than this are refused (exit 2 on the CLI)."""


class ByIdentity:
    """State that is equal only when both sides hold the very same object (a `defaultdict`'s
    factory), or that is absent (an unset slot: `UNSET`)."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __repr__(self) -> str:
        if self.obj is UNSET:
            return "<unset>"
        name = getattr(self.obj, "__qualname__", None)
        module = getattr(self.obj, "__module__", None)
        if isinstance(name, str) and isinstance(module, str):
            return name if module == "builtins" else f"{module}.{name}"
        return repr(self.obj)[:200]


UNSET = object()
"""The value of a slot that was never set."""


def is_container(x: Any) -> bool:
    """Whether `compare` walks `x` (its exact type decides; see the module docstring)."""
    t = type(x)
    if issubclass(t, dict | list | tuple):
        return True
    return dataclasses.is_dataclass(x) and not isinstance(x, type)


def check_container(x: Any, path: str) -> None:
    """Refuse a `Mapping` that is not a dict: its hidden state cannot be seen."""
    if isinstance(x, Mapping) and not issubclass(type(x), dict):
        raise UncomparableError(
            path,
            f"cannot compare a {type_name(x)}: a Mapping that is not a dict may hold state "
            "beyond the items it yields (convert it to dict)",
        )


def items_of(x: Any) -> list[tuple[Any, Any]]:
    """The stored `(key, value)` pairs of a dict, `(index, value)` of a list or tuple, read with
    the base type's own methods (a subclass's overrides cannot hide or invent items)."""
    if isinstance(x, dict):
        return list(dict.items(x))
    if isinstance(x, list):
        return list(enumerate(list.__iter__(x)))
    return list(enumerate(tuple.__iter__(x)))


def key_order_matters(x: Any) -> bool:
    """An `OrderedDict`'s key order is part of its value (its `==` says so); a dict's is not."""
    return isinstance(x, collections.OrderedDict)


def attributes(x: Any, path: str, known: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Every instance attribute of `x` not in `known`: its `__dict__` and every `__slots__`
    entry of its classes (an unset slot is `ByIdentity(UNSET)`); a `defaultdict`'s factory."""
    found: dict[str, Any] = {}
    try:
        own = object.__getattribute__(x, "__dict__")
    except AttributeError:
        own = {}
    if not isinstance(own, dict):
        raise UncomparableError(path, f"the attributes of a {type_name(x)} cannot be read")
    for name, value in own.items():
        if type(name) is not str:
            raise UncomparableError(path, f"an attribute name that is not a str: {name!r}"[:300])
        if name not in known:
            found[name] = value
    for cls in type(x).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot in ("__dict__", "__weakref__") or slot in known or slot in found:
                continue
            stored = f"_{cls.__name__.lstrip('_')}{slot}" if slot.startswith("__") else slot
            descriptor = cls.__dict__.get(stored)
            if descriptor is None or not hasattr(descriptor, "__get__"):
                continue
            try:
                found[slot] = descriptor.__get__(x, type(x))
            except AttributeError:
                found[slot] = ByIdentity(UNSET)
    if isinstance(x, collections.defaultdict):
        found["default_factory"] = ByIdentity(x.default_factory)
    return found


def _counted_children(x: Any) -> list[Any]:
    """The values `compare` walks under container `x`, read leniently for counting (items,
    and a dataclass's `__dict__`; other attributes are left out: the count is a lower bound)."""
    t = type(x)
    if issubclass(t, dict):
        return list(dict.values(x))
    if issubclass(t, list):
        return list(list.__iter__(x))
    if issubclass(t, tuple):
        return list(tuple.__iter__(x))
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        try:
            own = object.__getattribute__(x, "__dict__")
        except AttributeError:
            return []
        return list(own.values()) if isinstance(own, dict) else []
    return []


def expanded_size(x: Any, limit: int) -> int:
    """How many labels walking `x` gives (every container and value, a shared one once per
    place it appears), counted up to `limit + 1`: in time linear in the distinct objects, since
    each shared object's count is computed once (`x = [x, x]` n times: n objects, 2^n labels).

    A lower bound (attributes other than a dataclass's `__dict__` are not counted, a cycle ends
    the count where it closes: the walk refuses it), so a refusal on it is never wrong."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    pending: list[tuple[Any, bool]] = [(x, False)]
    while pending:
        obj, finished = pending.pop()
        key = id(obj)
        if finished:
            on_path.discard(key)
            total = 1 + sum(sizes.get(id(child), 0) for child in _counted_children(obj))
            sizes[key] = min(total, limit + 1)
            if key == id(x) or total > limit:
                return sizes[key]
            continue
        if key in sizes or key in on_path or not is_container(obj):
            if key not in sizes and key not in on_path:
                sizes[key] = 1
            continue
        on_path.add(key)
        pending.append((obj, True))
        pending.extend((child, False) for child in _counted_children(obj))
    return sizes.get(id(x), 1)
