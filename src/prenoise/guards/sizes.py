"""Integer sizes from callers: integers only, never silently coerced; byte counts also as text.

`int(1.5)` is 1, `int("16")` is 16 and `True` is an `int`: a shape built from a float, a string
or a flag would draw a different amount of noise than the caller meant, and the generator would
end somewhere the serial code never leaves it. So sizes go through `operator.index` (Python and
numpy integers, integer 0-dim tensors) and bools are refused.

A byte count (a memory budget, a look-ahead limit) is no shape: :func:`byte_count` also takes
the text the docs write, `"256MiB"`, `"8GiB"`, `"500MB"`, `"1048576"` (pydantic's `ByteSize`
rules: KiB/MiB/GiB are powers of 1024, KB/MB/GB of 1000), and refuses anything else by name.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable

import torch

__all__ = ["byte_count", "exact_int", "exact_ints"]


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


def byte_count(value: object, what: str) -> int:
    """A byte count ≥ 0 from an integer (`exact_int`) or a size text such as `"256MiB"`.

    `TypeError` for other types (a float, a bool), `ValueError` for a text that is no size or a
    negative count; both name `what` and show an example.
    """
    if isinstance(value, str):
        from pydantic import ByteSize, TypeAdapter, ValidationError

        try:
            count = int(TypeAdapter(ByteSize).validate_python(value.strip()))
        except ValidationError:
            raise ValueError(
                f"{what} must be a byte count such as 268435456 or '256MiB', got {value!r}"
            ) from None
    else:
        try:
            count = exact_int(value, what)
        except TypeError:
            raise TypeError(
                f"{what} must be a byte count such as 268435456 or '256MiB', got {value!r} "
                f"({type(value).__name__})"
            ) from None
    if count < 0:
        raise ValueError(f"{what} must be >= 0 bytes, got {value!r}")
    return count
