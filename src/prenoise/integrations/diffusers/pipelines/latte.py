"""`LattePipeline`: one noise draw `(B·N, C, F, H//s, W//s)` in the prompt dtype.

`B·N` is the prompt batch times `num_images_per_prompt`; `C` the transformer's `in_channels`;
`F` is `video_length` (no temporal compression); the dtype is `prompt_embeds.dtype` after
encoding, which `encode_prompt` casts to `text_encoder.dtype` (or `transformer.dtype` without a
text encoder), the caller's `prompt_embeds` included. The pipeline hands the generator to
`scheduler.step` (`prepare_extra_step_kwargs`): a stochastic scheduler's per-step draws come
after the noise (`step_noise.py`).

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

__all__ = ["plan_latte"]


def plan_latte(pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]) -> list[PlannedDraw]:
    """The latent noise of a `LattePipeline` call."""
    transformer = require_attr(pipe, "transformer")
    encoder = getattr(pipe, "text_encoder", None)
    dtype: torch.dtype = (encoder if encoder is not None else transformer).dtype
    scale = int(pipe.vae_scale_factor)
    height = args["height"] or transformer.config.sample_size * scale
    width = args["width"] or transformer.config.sample_size * scale
    batch = prompt_batch_size(args) * per_prompt(args, "num_images_per_prompt")
    shape = (
        batch,
        int(transformer.config.in_channels),
        int(args["video_length"]),
        int(height) // scale,
        int(width) // scale,
    )
    return [PlannedDraw("noise", shape, dtype, draw_generators(gens, batch))]
