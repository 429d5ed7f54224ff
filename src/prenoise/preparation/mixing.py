"""Exact condition mixing: `anchor = tau·clean + (1 − tau)·noise`, bit-stable on any device.

The reference computation is CPU float32: `tau` is a 0-dim float32 CPU tensor, `1 − tau` is
computed from it in float32 on the CPU, and the anchor is two rounded products and one rounded
sum. Fused forms (`addcmul`, `lerp`, `add(alpha=)`, a float64 detour) round differently, so they
are never used. Clean rows stay on their device; only the noise and the two coefficients move
there. Equality with the CPU reference on an accelerator holds for eager elementwise kernels (to
be proven per device by the verification harness), not for fused/compiled kernels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from prenoise.noise import kernel

__all__ = ["NoiseSource", "mix_coefficients", "mix_condition", "mix_conditions"]

NoiseSource = torch.Tensor | Callable[[], torch.Tensor]
"""Noise rows, or a callable that produces them (called only when tau != 1)."""


def mix_coefficients(tau: float | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(tau, 1 − tau)` as 0-dim float32 CPU tensors, `1 − tau` computed in float32 on the CPU."""
    tau_t = torch.as_tensor(tau, dtype=torch.float32, device="cpu").detach().clone()
    if tau_t.dim() != 0:
        raise ValueError(f"tau must be a scalar, got shape {tuple(tau_t.shape)}")
    if not 0.0 <= float(tau_t) <= 1.0:
        raise ValueError(f"tau must be in [0, 1], got {float(tau_t)}")
    return tau_t, torch.sub(1.0, tau_t)


def mix_condition(
    clean: torch.Tensor,
    noise: NoiseSource,
    tau: float | torch.Tensor,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """`tau·clean + (1 − tau)·noise` on `clean`'s device, bitwise equal to the CPU reference.

    With `tau == 1` the clean rows are returned (as a copy) and `noise` is never produced. The
    result is a new contiguous tensor — or `out`, a contiguous tensor of `clean`'s shape, dtype
    and device, when given (same values: the same two rounded products and one rounded sum,
    written there); inputs are never mutated. `clean` and `noise` must have the same shape and
    a floating dtype; the result has `clean`'s dtype.
    """
    if out is not None:
        _check_out(out, clean)
        if _same_storage(out, clean):
            raise ValueError("out must not share memory with clean (inputs are never mutated)")
    tau_t, one_minus_tau = mix_coefficients(tau)
    if float(tau_t) == 1.0:
        if out is not None:
            return out.copy_(clean)
        return clean.clone(memory_format=torch.contiguous_format)
    noise_t = noise() if callable(noise) else noise
    if noise_t.shape != clean.shape:
        raise ValueError(
            f"noise shape {tuple(noise_t.shape)} does not match clean shape {tuple(clean.shape)}"
        )
    if noise_t.dtype != clean.dtype:
        raise ValueError(f"noise dtype {noise_t.dtype} does not match clean dtype {clean.dtype}")
    if out is not None and _same_storage(out, noise_t):
        raise ValueError("out must not share memory with noise (inputs are never mutated)")
    device = clean.device
    if out is None:
        scaled_clean = torch.mul(clean, tau_t.to(device))
        scaled_noise = torch.mul(noise_t.to(device), one_minus_tau.to(device))
        return torch.add(scaled_clean, scaled_noise).contiguous()
    # Same operations and rounding; the products go to `out` and one scratch buffer, so a fresh
    # CPU result costs one allocation of page faults instead of three.
    torch.mul(clean, tau_t.to(device), out=out)
    scaled_noise = _empty_like_rows(clean)
    torch.mul(noise_t.to(device), one_minus_tau.to(device), out=scaled_noise)
    return out.add_(scaled_noise)


def mix_conditions(
    cleans: Sequence[torch.Tensor],
    noise: NoiseSource,
    taus: Sequence[float | torch.Tensor],
) -> torch.Tensor:
    """Mix several conditions and concatenate their rows (dim 0), in order.

    `noise` holds every condition's noise rows concatenated in the same order (or produces
    them; it is produced once, only if some tau != 1). Each block is `mix_condition` of its own
    rows with its own tau, so the result is bitwise what per-condition mixing then `cat` gives.
    Clean blocks may be non-contiguous and on any device; when they share a device, dtype and
    row shape, each block is mixed straight into its rows of the result (no `cat` copy).
    """
    if len(cleans) != len(taus):
        raise ValueError(f"{len(cleans)} conditions but {len(taus)} taus")
    if not cleans:
        raise ValueError("mix_conditions needs at least one condition")
    needs_noise = any(float(mix_coefficients(t)[0]) != 1.0 for t in taus)
    rows = [c.shape[0] for c in cleans]
    blocks: Sequence[torch.Tensor | None] = [None] * len(cleans)
    if needs_noise:
        noise_t = noise() if callable(noise) else noise
        if noise_t.shape[0] != sum(rows):
            raise ValueError(f"noise has {noise_t.shape[0]} rows, conditions have {sum(rows)}")
        blocks = list(torch.split(noise_t, rows))
    first = cleans[0]
    if any(
        c.device != first.device
        or c.dtype != first.dtype
        or c.shape[1:] != first.shape[1:]
        or c.requires_grad  # out= does not record autograd
        for c in cleans
    ):  # per-block results, then torch.cat's own promotion rules
        mixed = [
            mix_condition(clean, block if block is not None else _no_noise, tau)
            for clean, block, tau in zip(cleans, blocks, taus, strict=True)
        ]
        return torch.cat(mixed)
    result = _empty_like_rows(first, sum(rows))
    for clean, block, tau, out in zip(cleans, blocks, taus, torch.split(result, rows), strict=True):
        mix_condition(clean, block if block is not None else _no_noise, tau, out=out)
    return result


def _empty_like_rows(like: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """A contiguous buffer with `like`'s row shape, dtype and device (big CPU ones: 2 MiB pages)."""
    shape = (like.shape[0] if rows is None else rows, *like.shape[1:])
    if like.device.type == "cpu":
        return kernel.empty(shape, dtype=like.dtype)
    return torch.empty(shape, dtype=like.dtype, device=like.device)


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.device == b.device and (
        a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    )


def _check_out(out: torch.Tensor, clean: torch.Tensor) -> None:
    if (
        out.shape != clean.shape
        or out.dtype != clean.dtype
        or out.device != clean.device
        or not out.is_contiguous()
    ):
        raise ValueError(
            f"out must be a contiguous {tuple(clean.shape)} {clean.dtype} tensor on "
            f"{clean.device}, got {tuple(out.shape)} {out.dtype} on {out.device}"
        )


def _no_noise() -> torch.Tensor:
    raise AssertionError("noise requested for a condition with tau == 1")
