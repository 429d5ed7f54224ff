"""The entry for CPU standard-normal draws: one function per torch call, in a named stream.

Each function equals its torch call bit for bit in the ``"native"`` stream (the default: local
torch's values, served by :mod:`prenoise.noise.kernel`) and draws what torch draws on an x86
AVX2 host (``"x86"``) or a libm host such as aarch64 (``"libm"``) on any host
(:mod:`prenoise.noise.streams`, self-checked and refused when not exact). The generator is left
where the torch call leaves it, in every stream.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from prenoise.noise import kernel, streams

__all__ = ["fill_normal_", "randn", "randn_keep_prefix"]


def fill_normal_(
    out: torch.Tensor,
    generator: torch.Generator,
    *,
    threads: int | None = None,
    stream: str = streams.NATIVE,
) -> torch.Tensor:
    """Exactly ``out.normal_(generator=generator)`` in ``stream``: same values, same final
    generator state (:func:`prenoise.noise.kernel.fill_normal_`; ``threads`` never changes a
    value). Returns ``out``."""
    if stream != streams.NATIVE:
        return streams.fill_(out, generator, stream, threads=threads)
    return kernel.fill_normal_(out, generator, threads=threads)


def randn(
    shape: int | Sequence[int],
    *,
    generator: torch.Generator,
    dtype: torch.dtype = torch.float32,
    out: torch.Tensor | None = None,
    threads: int | None = None,
    stream: str = streams.NATIVE,
) -> torch.Tensor:
    """Exactly ``torch.randn(shape, generator=generator, dtype=dtype, out=out)`` on the CPU, in
    ``stream`` (:func:`prenoise.noise.kernel.randn` says which cases the kernel serves; every
    other case is torch's own call)."""
    if stream != streams.NATIVE:
        return streams.randn(
            shape, generator=generator, stream=stream, dtype=dtype, out=out, threads=threads
        )
    return kernel.randn(shape, generator=generator, dtype=dtype, out=out, threads=threads)


def randn_keep_prefix(
    shape: Sequence[int],
    keep: Sequence[int],
    *,
    generator: torch.Generator,
    threads: int | None = None,
    stream: str = streams.NATIVE,
) -> torch.Tensor:
    """Exactly ``torch.randn(shape, generator=generator)[:keep[0], ..., :keep[-1]].contiguous()``
    in ``stream``, float32; the generator ends where the full draw leaves it
    (:func:`prenoise.noise.kernel.randn_keep_prefix`)."""
    if stream != streams.NATIVE:
        return streams.randn_keep_prefix(shape, keep, generator=generator, stream=stream)
    return kernel.randn_keep_prefix(shape, keep, generator=generator, threads=threads)
