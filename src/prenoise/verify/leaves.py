"""Plain values `compare` checks exactly: exact types only, compared on canonical bytes."""

from __future__ import annotations

import enum
import pathlib
import struct
from typing import Any

import torch

from prenoise.verify.reports import UncomparableError

__all__ = [
    "LEAF_BASES",
    "MAX_KEY_DEPTH",
    "float_bits",
    "identity",
    "is_leaf",
    "leaf_equal",
    "type_name",
]

# Exact types whose `==` is a faithful identity: int/str/bytes/None/bool by value, floats and
# complex numbers on their IEEE-754 bits, torch's enumerations by value. Paths compare on their
# exact class and `str()`, case-sensitively (PureWindowsPath's own `==` ignores case).
_EXACT_LEAVES: frozenset[type] = frozenset(
    {
        type(None),
        bool,
        int,
        float,
        complex,
        str,
        bytes,
        torch.dtype,
        torch.device,
        torch.layout,
        torch.memory_format,
        pathlib.PurePosixPath,
        pathlib.PureWindowsPath,
        pathlib.PosixPath,
        pathlib.WindowsPath,
    }
)
LEAF_BASES: tuple[type, ...] = (int, float, complex, str, bytes, pathlib.PurePath)
"""Bases whose subclasses are refused: their `==`, `hash` and attributes are their own."""


def is_leaf(x: Any) -> bool:
    """An exact leaf type or an enum member (`type(x)`: an object can claim any `__class__`)."""
    return type(x) in _EXACT_LEAVES or issubclass(type(x), enum.Enum)


def type_name(x: Any) -> str:
    t = type(x)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def subclass_refusal(x: Any, path: str) -> UncomparableError:
    base = next(b for b in LEAF_BASES if isinstance(x, b))
    return UncomparableError(
        path,
        f"cannot compare values of type {type_name(x)}, a subclass of {base.__qualname__} "
        f"(its == and state are its own; convert it to {base.__qualname__})",
    )


def float_bits(x: float | complex) -> bytes:
    """IEEE-754 bits (real then imaginary part for a complex)."""
    if isinstance(x, complex):
        return struct.pack("<dd", x.real, x.imag)
    return struct.pack("<d", x)


def _canonical(x: Any) -> Any:
    """A value of a builtin type that equals another leaf's exactly when the leaves are equal
    (the caller has matched their exact types)."""
    if type(x) in (float, complex):
        return float_bits(x)
    if issubclass(type(x), enum.Enum):
        return x.name  # members are singletons of their exact class
    if isinstance(x, pathlib.PurePath):
        return str(x)
    return x


MAX_KEY_DEPTH = 100
"""Mapping keys (tuples of tuples) nested deeper than this are refused, not recursed into."""


def identity(x: Any, path: str, depth: int = 0) -> Any:
    """A hashable value equal for two keys exactly when they are the same type and value."""
    if type(x) is tuple:
        if depth >= MAX_KEY_DEPTH:
            raise UncomparableError(
                path, f"a mapping key nested deeper than {MAX_KEY_DEPTH} tuples"
            )
        return (tuple, tuple(identity(v, path, depth + 1) for v in x))
    if not is_leaf(x):
        if isinstance(x, LEAF_BASES):
            raise subclass_refusal(x, path)
        raise UncomparableError(path, f"unsupported mapping key type {type_name(x)}: {x!r}"[:300])
    return (type(x), _canonical(x))


def leaf_equal(a: Any, b: Any) -> bool:
    """Same value of one exact type (checked by the caller): floats on their bits, enums by
    identity, paths on their string."""
    if issubclass(type(a), enum.Enum):
        return a is b
    return bool(_canonical(a) == _canonical(b))
