"""MiniMax-H3's visual-condition mix with noise prenoise prepared: upstream's values exactly.

Three recipes, each upstream's own operations on upstream's device:

- the dependent recipe (every release): `tau·clean + (1 − tau)·noise` per condition with CPU
  float32 coefficients (`tau` a 0-dim float32 tensor, `1 − tau` rounded in float32 on the CPU),
  two rounded products and one rounded sum. 0.30/0.31 evaluate it on the CPU and move the rows
  to the clean rows' device; 0.32.0rc1 evaluates it on the output device when that is an NPU
  (the coefficients still rounded on the CPU). `mix_condition_rows` evaluates it on the clean
  rows' device with those coefficients (`prenoise.mix_conditions`), the same rounded values
  wherever eager elementwise kernels round to nearest (CPU here; `scripts/gpu_check.sh` checks a
  GPU). Where upstream's function takes `precomputed_noise_rows` (0.32.0rc1), prenoise hands it
  the prepared rows and upstream mixes them itself (`serve_condition_rows`);
- the guided recipe (0.32.0rc1, timeline-guided requests): `noise_aug * clean + (1.0 -
  noise_aug) * noise` with Python-float coefficients, on the NPU when that is the output device
  and on the CPU otherwise, into a preallocated float32 buffer (`mix_guided_rows`, upstream's
  statement as it is written).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from prenoise.preparation.mixing import mix_conditions
from prenoise.ref2va.noise import LatentShape

__all__ = ["mix_condition_rows", "mix_guided_rows", "serve_condition_rows"]


def _rows(condition_shapes: Sequence[LatentShape]) -> list[int]:
    return [t * (h // 2) * (w // 2) for t, h, w in condition_shapes]


def mix_condition_rows(
    clean_rows: torch.Tensor,
    noise_rows: torch.Tensor,
    condition_shapes: Sequence[LatentShape],
    noise_aug: float,
) -> torch.Tensor:
    """Upstream's anchor rows: per condition `tau·clean + (1 − tau)·noise`, concatenated.

    Runs on `clean_rows`' device with CPU float32 coefficients (`prenoise.mix_conditions`);
    the result is contiguous float32 on that device, as upstream's `.to(device).contiguous()`.
    """
    blocks = list(torch.split(clean_rows, _rows(condition_shapes)))
    return mix_conditions(blocks, noise_rows, [noise_aug] * len(blocks))


def mix_guided_rows(
    clean_rows: torch.Tensor,
    noise_rows: torch.Tensor,
    condition_shapes: Sequence[LatentShape],
    noise_aug: float,
) -> torch.Tensor:
    """The guided recipe's anchor rows, as upstream 0.32.0rc1 computes them from its draws."""
    output_device = clean_rows.device
    mix_device = output_device if output_device.type == "npu" else torch.device("cpu")
    clean = clean_rows.detach().to(device=mix_device, dtype=torch.float32)
    total = sum(_rows(condition_shapes))
    out = torch.empty((total, 96), dtype=torch.float32, device=mix_device)
    offset = 0
    for count in _rows(condition_shapes):
        noise = noise_rows[offset : offset + count].to(device=mix_device)
        clean_part = clean[offset : offset + count]
        out[offset : offset + count] = noise_aug * clean_part + (1.0 - noise_aug) * noise
        offset += count
    return out.to(device=output_device, dtype=torch.float32).contiguous()


def serve_condition_rows(
    upstream_fn: Callable[..., torch.Tensor],
    clean_rows: torch.Tensor,
    noise: torch.Tensor,
    key: Any,
    kwargs: Mapping[str, Any],
) -> torch.Tensor:
    """The anchor rows upstream's condition function returns for `kwargs`, from the prepared
    `noise` (its draw at `key`): upstream's own mix where it takes precomputed rows, else the
    recipe's exact mix."""
    noise_aug = float(kwargs["noise_aug"])
    if key.guided:
        return mix_guided_rows(clean_rows, noise, key.condition_shapes, noise_aug)
    if "precomputed_noise_rows" in kwargs:
        return upstream_fn(clean_rows, **{**kwargs, "precomputed_noise_rows": noise})
    return mix_condition_rows(clean_rows, noise, key.condition_shapes, noise_aug)
