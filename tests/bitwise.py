"""Test helpers: bitwise tensor equality and generator-state equality."""

from __future__ import annotations

import torch

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit pattern as a same-shaped integer tensor."""
    return t.contiguous().view(_INT_VIEW[t.element_size()])


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, same shape, same bits (NaN payloads and -0.0 count)."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def same_state(a: torch.Generator, b: torch.Generator) -> bool:
    """Byte-identical generator states."""
    return torch.equal(a.get_state(), b.get_state())
