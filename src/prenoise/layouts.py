"""Layout transforms applied to a drawn tensor (e.g. patchify into transformer rows).

A layout is a pure, deterministic rearrangement: it never changes a value, only where it lives.
Every transform returns a new contiguous tensor; it never aliases its input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from prenoise import kernel

__all__ = ["Layout", "Patchify"]


class Layout(Protocol):
    """A value-preserving rearrangement of a drawn tensor."""

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Shape of the result for an input of `shape` (raises ValueError if it does not fit)."""
        ...

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """Rearrange `x` into a contiguous tensor; values are never changed."""
        ...


@dataclass(frozen=True)
class Patchify:
    """`[n, c, t, h, w]` → rows `[n·t'·h'·w', c·pt·ph·pw]`.

    Rows are in (n, t', h', w') order and features in (c, pt, ph, pw) order: the tensor is viewed
    as `n c t' pt h' ph w' pw`, permuted to `n t' h' w' c pt ph pw` and made contiguous. With
    `patch=(1, 2, 2)` this is the Ref2VA row layout of the contract note.
    """

    patch: tuple[int, int, int] = (1, 2, 2)

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(shape) != 5:
            raise ValueError(f"Patchify expects a 5-d [n, c, t, h, w] shape, got {tuple(shape)}")
        n, c, t, h, w = shape
        pt, ph, pw = self.patch
        if t % pt or h % ph or w % pw:
            raise ValueError(
                f"shape {tuple(shape)} is not divisible by patch {self.patch} on (t, h, w)"
            )
        return (n * (t // pt) * (h // ph) * (w // pw), c * pt * ph * pw)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        rows, features = self.output_shape(tuple(x.shape))
        n, c, t, h, w = x.shape
        pt, ph, pw = self.patch
        grid = x.reshape(n, c, t // pt, pt, h // ph, ph, w // pw, pw)
        out = kernel.empty((rows, features), dtype=x.dtype)  # large rows get 2 MiB pages
        out.view(n, t // pt, h // ph, w // pw, c, pt, ph, pw).copy_(
            grid.permute(0, 2, 4, 6, 1, 3, 5, 7)
        )
        return out
