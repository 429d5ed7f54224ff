"""`HunyuanVideoPipeline`: one float32 noise draw `(B, C, (F-1)//t+1, H//s, W//s)`.

`B` is the prompt count times `num_videos_per_prompt`, `C` the transformer's `in_channels`, `t` and
`s` the VAE's temporal and spatial compression; `F`, `H`, `W` are used as given (the pipeline does
not round them). The draw comes after both prompt encoders. The flow-matching scheduler is stepped
without the generator and the VAE decodes without sampling, so nothing else draws.

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

__all__ = ["plan_hunyuan_video"]


def plan_hunyuan_video(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """The latent noise of a `HunyuanVideoPipeline` call."""
    transformer = require_attr(pipe, "transformer")
    t = int(pipe.vae_scale_factor_temporal)
    s = int(pipe.vae_scale_factor_spatial)
    batch = prompt_batch_size(args) * per_prompt(args, "num_videos_per_prompt")
    shape = (
        batch,
        int(transformer.config.in_channels),
        (int(args["num_frames"]) - 1) // t + 1,
        int(args["height"]) // s,
        int(args["width"]) // s,
    )
    return [PlannedDraw("noise", shape, torch.float32, draw_generators(gens, batch))]
