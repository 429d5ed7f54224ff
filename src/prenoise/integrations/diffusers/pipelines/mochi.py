"""`MochiPipeline`: one noise draw `(B·N, C, (F-1)//6 + 1, H//8, W//8)`, always float32.

`B·N` is the prompt batch times `num_videos_per_prompt`; `C` the transformer's `in_channels`;
the VAE scale factors are the pipeline's constants (temporal 6, spatial 8). `prepare_latents`
draws in float32 whatever the prompt dtype and casts afterwards, so the planned draw is float32.
`scheduler.step` is called without the generator: a stochastic scheduler draws from the global
RNG (left alone).

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

__all__ = ["plan_mochi"]


def plan_mochi(pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]) -> list[PlannedDraw]:
    """The latent noise of a `MochiPipeline` call."""
    transformer = require_attr(pipe, "transformer")
    spatial, temporal = int(pipe.vae_spatial_scale_factor), int(pipe.vae_temporal_scale_factor)
    height = args["height"] or pipe.default_height
    width = args["width"] or pipe.default_width
    batch = prompt_batch_size(args) * per_prompt(args, "num_videos_per_prompt")
    shape = (
        batch,
        int(transformer.config.in_channels),
        (int(args["num_frames"]) - 1) // temporal + 1,
        int(height) // spatial,
        int(width) // spatial,
    )
    return [PlannedDraw("noise", shape, torch.float32, draw_generators(gens, batch))]
