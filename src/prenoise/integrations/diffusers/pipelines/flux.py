"""`FluxPipeline`: one noise draw `(B, C/4, 2·(H//2s), 2·(W//2s))` in the prompt dtype.

The dtype is `prompt_embeds.dtype` after encoding: the caller's `prompt_embeds` dtype when given,
else `text_encoder_2.dtype`. The noise is packed after the draw; nothing else draws.

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

__all__ = ["plan_flux"]


def plan_flux(pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]) -> list[PlannedDraw]:
    """The latent noise of a `FluxPipeline` call."""
    transformer = require_attr(pipe, "transformer")
    scale = int(pipe.vae_scale_factor)
    height = args["height"] or pipe.default_sample_size * scale
    width = args["width"] or pipe.default_sample_size * scale
    embeds = args.get("prompt_embeds")
    if isinstance(embeds, torch.Tensor):
        dtype = embeds.dtype
    else:
        dtype = require_attr(pipe, "text_encoder_2").dtype
    batch = prompt_batch_size(args) * per_prompt(args, "num_images_per_prompt")
    shape = (
        batch,
        int(transformer.config.in_channels) // 4,
        2 * (int(height) // (scale * 2)),
        2 * (int(width) // (scale * 2)),
    )
    return [PlannedDraw("noise", shape, dtype, draw_generators(gens, batch))]
