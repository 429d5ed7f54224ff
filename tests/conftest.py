"""Shared test helpers: bitwise tensor equality and generator-state equality."""

from __future__ import annotations

import os

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit pattern as a same-shaped integer tensor."""
    return t.contiguous().view(_INT_VIEW[t.element_size()])


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def same_state(a: torch.Generator, b: torch.Generator) -> bool:
    return torch.equal(a.get_state(), b.get_state())
