"""Proof that the global RNG was not touched.

prenoise draws only from explicit generators. `global_rng_guard()` snapshots the global CPU RNG
state (and every CUDA device's, when CUDA is already initialised) and checks it on exit; use it in
tests and, via `PRENOISE_DEBUG_RNG=1`, around every preparation executor in production.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

__all__ = ["GlobalRNGChangedError", "RNGSnapshot", "global_rng_guard", "snapshot_global_rng"]


class GlobalRNGChangedError(RuntimeError):
    """The global RNG state differs from the snapshot taken before."""


@dataclass(frozen=True)
class RNGSnapshot:
    """Bytes of the global CPU RNG state and of each initialised CUDA device's state."""

    cpu: bytes
    cuda: tuple[bytes, ...]

    def differences(self, other: RNGSnapshot) -> list[str]:
        """Names of the RNG states that differ between two snapshots (empty when identical)."""
        changed = ["cpu"] if self.cpu != other.cpu else []
        if len(self.cuda) != len(other.cuda):
            changed.append("cuda (device count)")
        else:
            changed += [
                f"cuda:{i}"
                for i, (a, b) in enumerate(zip(self.cuda, other.cuda, strict=True))
                if a != b
            ]
        return changed


def snapshot_global_rng() -> RNGSnapshot:
    """Snapshot the global RNG. CUDA states are read only if CUDA is already initialised."""
    cuda: tuple[bytes, ...] = ()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        cuda = tuple(bytes(s.numpy()) for s in torch.cuda.get_rng_state_all())
    return RNGSnapshot(cpu=bytes(torch.get_rng_state().numpy()), cuda=cuda)


@contextmanager
def global_rng_guard(what: str = "this block") -> Iterator[RNGSnapshot]:
    """Raise `GlobalRNGChangedError` if the global RNG state changes inside the block.

    The check runs only when the block exits normally, so it never masks the block's own error.
    """
    before = snapshot_global_rng()
    yield before
    changed = before.differences(snapshot_global_rng())
    if changed:
        raise GlobalRNGChangedError(f"{what} changed the global RNG state: {', '.join(changed)}")
