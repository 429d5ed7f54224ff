"""Integer sizes from callers: integers only, never silently coerced.

`int(1.5)` is 1, `int("16")` is 16 and `True` is an `int`: a shape built from a float, a string
or a flag would draw a different amount of noise than the caller meant, and the generator would
end somewhere the serial code never leaves it. So sizes go through `operator.index` (Python and
numpy integers, integer 0-dim tensors) and bools are refused.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable

import torch

__all__ = ["exact_int", "exact_ints"]


def exact_int(value: object, what: str) -> int:
    """`operator.index(value)`, refusing bools; `TypeError` naming `what` and the value."""
    is_bool = isinstance(value, bool) or (
        isinstance(value, torch.Tensor) and value.dtype == torch.bool
    )
    if not is_bool:
        try:
            return operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            pass
    raise TypeError(f"{what} must be an int, got {value!r} ({type(value).__name__})")


def exact_ints(values: object, what: str) -> tuple[int, ...]:
    """A tuple of `exact_int`s from a sequence (not a str, bytes or a bare number).

    `TypeError` naming `what` (and the offending index) and the value otherwise.
    """
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise TypeError(
            f"{what} must be a sequence of ints, got {values!r} ({type(values).__name__})"
        )
    return tuple(exact_int(v, f"{what}[{i}]") for i, v in enumerate(values))
