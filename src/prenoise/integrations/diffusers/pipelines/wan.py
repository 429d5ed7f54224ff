"""Wan 2.1 / 2.2 (A14B and TI2V-5B): `WanPipeline` and `WanImageToVideoPipeline`.

Both draw one float32 noise tensor `(B, C, (F-1)//t+1, H//s, W//s)` after prompt (and image)
encoding and nothing else from the generator: the image-to-video VAE encode uses argmax mode.
`F`, `H`, `W` are first rounded the way `__call__` rounds them.

Checked on diffusers 0.40.0–0.42.1 (the draw code is the same in all four releases).
"""

from __future__ import annotations

from typing import Any

import torch

from prenoise.integrations.diffusers.plan import (
    BoundCall,
    PlannedDraw,
    draw_generators,
    per_prompt,
    prompt_batch_size,
    require_attr,
)

__all__ = ["plan_wan", "plan_wan_i2v"]


def _transformer(pipe: Any) -> Any:
    transformer = getattr(pipe, "transformer", None)
    if transformer is None:
        transformer = getattr(pipe, "transformer_2", None)
    if transformer is None:
        require_attr(pipe, "transformer")
    return transformer


def _noise_draw(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...], channels: int
) -> list[PlannedDraw]:
    transformer = _transformer(pipe)
    t = int(pipe.vae_scale_factor_temporal)
    s = int(pipe.vae_scale_factor_spatial)
    num_frames = int(args["num_frames"])
    if num_frames % t != 1:
        num_frames = num_frames // t * t + 1
    num_frames = max(num_frames, 1)
    patch = transformer.config.patch_size
    h_multiple, w_multiple = s * patch[1], s * patch[2]
    height = args["height"] // h_multiple * h_multiple
    width = args["width"] // w_multiple * w_multiple
    batch = prompt_batch_size(args) * per_prompt(args, "num_videos_per_prompt")
    shape = (batch, channels, (num_frames - 1) // t + 1, int(height) // s, int(width) // s)
    return [PlannedDraw("noise", shape, torch.float32, draw_generators(gens, batch))]


def plan_wan(pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]) -> list[PlannedDraw]:
    """`WanPipeline`: the latent noise, channels = the transformer's `in_channels`."""
    return _noise_draw(pipe, args, gens, int(_transformer(pipe).config.in_channels))


def plan_wan_i2v(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`WanImageToVideoPipeline`: the latent noise, channels = the VAE's `z_dim`."""
    vae = require_attr(pipe, "vae")
    return _noise_draw(pipe, args, gens, int(vae.config.z_dim))
