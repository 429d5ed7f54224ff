"""Layout transforms applied to a drawn tensor (e.g. patchify into transformer rows).

A layout is a pure, deterministic rearrangement: it never changes a value, only where it lives.
Every transform returns a new contiguous tensor; it never aliases its input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from prenoise.noise import kernel

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
        if x.device.type == "cpu":
            out = kernel.empty((rows, features), dtype=x.dtype)  # big rows get 2 MiB pages
        else:
            out = torch.empty((rows, features), dtype=x.dtype, device=x.device)
        return self.apply_into(x, out)

    def apply_into(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Write `apply(x)` into `out` (contiguous, output shape, `x`'s dtype); return `out`."""
        shape = self.output_shape(tuple(x.shape))
        if tuple(out.shape) != shape or out.dtype != x.dtype or not out.is_contiguous():
            raise ValueError(
                f"Patchify output must be a contiguous {shape} {x.dtype} tensor, "
                f"got {tuple(out.shape)} {out.dtype}"
            )
        n, c, t, h, w = x.shape
        pt, ph, pw = self.patch
        src, dst, unit = x, out, 1
        wide = _WIDE_INTS.get(pw * x.element_size())
        if wide is not None and _can_view_runs(x, pw) and _can_view_runs(out, pw):
            # Move each run of `pw` adjacent values as one wider integer: the same bits in the
            # same places, with a `pw`-times shorter (and far faster) strided copy.
            src, dst, unit = x.view(wide), out.view(wide), pw
        grid = src.reshape(n, c, t // pt, pt, h // ph, ph, w // pw, pw // unit)
        dst.view(n, t // pt, h // ph, w // pw, c, pt, ph, pw // unit).copy_(
            grid.permute(0, 2, 4, 6, 1, 3, 5, 7)
        )
        return out


_WIDE_INTS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _can_view_runs(x: torch.Tensor, run: int) -> bool:
    """Whether `x.view(int type of run * itemsize bytes)` is valid: runs along a unit-stride w."""
    return (
        run > 1
        and x.stride(-1) == 1
        and all(stride % run == 0 for stride in x.stride()[:-1])
        and x.storage_offset() % run == 0
        and x.data_ptr() % (run * x.element_size()) == 0
    )
