"""`AllegroPipeline`: one noise draw `(B, C, F', H//s, W//s)` in the prompt dtype.

`B` is the prompt batch: `__call__` forces `num_videos_per_prompt` to 1, as CogVideoX's does.
`F'` is `ceil(F / t)` for an even frame count `F`, else `ceil((F - 1) / t) + 1` (`t` the VAE's
temporal compression); `C` the transformer's `in_channels`; the dtype is `prompt_embeds.dtype`,
which `encode_prompt` casts to `text_encoder.dtype` (or `transformer.dtype` without one). The
pipeline hands the generator to `scheduler.step` (`prepare_extra_step_kwargs`: Allegro's
Euler-ancestral scheduler draws at every step; `step_noise.py`).

Checked on diffusers 0.40.0–0.42.1 (the draw code is the same in all four releases).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from prenoise.integrations.diffusers.plan import (
    BoundCall,
    PlannedDraw,
    draw_generators,
    prompt_batch_size,
    require_attr,
)

__all__ = ["plan_allegro"]


def plan_allegro(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """The latent noise of an `AllegroPipeline` call."""
    transformer = require_attr(pipe, "transformer")
    encoder = getattr(pipe, "text_encoder", None)
    dtype: torch.dtype = (encoder if encoder is not None else transformer).dtype
    s, t = int(pipe.vae_scale_factor_spatial), int(pipe.vae_scale_factor_temporal)
    config = transformer.config
    frames = int(args["num_frames"] or config.sample_frames * t)
    height = int(args["height"] or config.sample_height * s)
    width = int(args["width"] or config.sample_width * s)
    latent_frames = math.ceil(frames / t) if frames % 2 == 0 else math.ceil((frames - 1) / t) + 1
    batch = prompt_batch_size(args)  # `num_videos_per_prompt` is forced to 1 by the pipeline
    shape = (batch, int(config.in_channels), latent_frames, height // s, width // s)
    return [PlannedDraw("noise", shape, dtype, draw_generators(gens, batch))]
