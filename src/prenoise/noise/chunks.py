"""The flat-chunk rule under which a chunked fill is bit-identical to a one-shot draw.

torch's CPU normal kernel works on blocks of 16 values (below 16 it takes a stateful scalar
path). Filling contiguous flat chunks of one buffer with `normal_` therefore reproduces a
one-shot draw exactly when every chunk but the last is a multiple of 16 elements and the last
has at least 16 (`docs/background/torch-cpu-normal.md` says why and how it was checked).
"""

from __future__ import annotations

from collections.abc import Iterator

from prenoise.guards.sizes import exact_int

__all__ = ["CANCEL_CHUNK_ELEMS", "VECTOR_BLOCK", "chunk_bounds"]

VECTOR_BLOCK = 16
"""torch's CPU normal kernel works on blocks of 16; below this it takes the stateful scalar path."""

CANCEL_CHUNK_ELEMS = 1 << 22
"""Elements per chunk (16 MiB of float32, a few ms) of a fill that polls a cancel event."""


def chunk_bounds(numel: int, chunk_elems: int) -> Iterator[tuple[int, int]]:
    """Flat `[start, stop)` chunks that keep a chunked fill bit-identical to a one-shot fill.

    Every chunk but the last has `chunk_elems` elements (a positive multiple of 16); a last chunk
    shorter than 16 is merged into the one before it. Both arguments must be ints (`TypeError`).
    """
    numel, chunk_elems = exact_int(numel, "numel"), exact_int(chunk_elems, "chunk_elems")
    if chunk_elems <= 0 or chunk_elems % VECTOR_BLOCK:
        raise ValueError(f"chunk_elems must be a positive multiple of 16, got {chunk_elems}")
    starts = list(range(0, numel, chunk_elems))
    if len(starts) > 1 and numel - starts[-1] < VECTOR_BLOCK:
        starts.pop()
    for i, start in enumerate(starts):
        yield start, starts[i + 1] if i + 1 < len(starts) else numel
