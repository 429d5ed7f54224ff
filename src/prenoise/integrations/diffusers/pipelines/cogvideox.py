"""CogVideoX: `CogVideoXPipeline` and `CogVideoXImageToVideoPipeline` (diffusers 0.40.0–0.42.1).

The noise is frames-first, `(B, F', C, H//s, W//s)`, in the prompt dtype, with `F'` counted after
`__call__` pads the frames to the transformer's `patch_size_t` (image-to-video adds
`F' % patch_size_t` more). `num_videos_per_prompt` is forced to 1 by both pipelines.
Image-to-video first samples the VAE posterior of each image (`diffusers.models.autoencoders.vae`).
The DPM scheduler's per-step draws come later, on the caller's generator already advanced by
the prepared draws: they are left to the pipeline.
"""

from __future__ import annotations

from typing import Any

import torch

from prenoise.integrations.diffusers.pipelines.ltx import VAE_MODULE, image_count
from prenoise.integrations.diffusers.plan import (
    BoundCall,
    PlannedDraw,
    Unpredictable,
    draw_generators,
    prompt_batch_size,
    require_attr,
)

__all__ = ["plan_cogvideox", "plan_cogvideox_i2v"]


def _prompt_dtype(pipe: Any, args: BoundCall) -> torch.dtype:
    embeds = args.get("prompt_embeds")
    if isinstance(embeds, torch.Tensor):
        return embeds.dtype
    dtype: torch.dtype = require_attr(pipe, "text_encoder").dtype
    return dtype


def _geometry(pipe: Any, args: BoundCall) -> tuple[int, int, int]:
    transformer = require_attr(pipe, "transformer")
    s, t = int(pipe.vae_scale_factor_spatial), int(pipe.vae_scale_factor_temporal)
    height = args["height"] or transformer.config.sample_height * s
    width = args["width"] or transformer.config.sample_width * s
    num_frames = args["num_frames"] or transformer.config.sample_frames
    latent_frames = (num_frames - 1) // t + 1
    patch_t = transformer.config.patch_size_t
    if patch_t is not None and latent_frames % patch_t != 0:
        num_frames += (patch_t - latent_frames % patch_t) * t
    return (num_frames - 1) // t + 1, int(height) // s, int(width) // s


def plan_cogvideox(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`CogVideoXPipeline`: the frames-first noise."""
    frames, h, w = _geometry(pipe, args)
    batch = prompt_batch_size(args)
    channels = int(pipe.transformer.config.in_channels)
    shape = (batch, frames, channels, h, w)
    return [PlannedDraw("noise", shape, _prompt_dtype(pipe, args), draw_generators(gens, batch))]


def plan_cogvideox_i2v(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`CogVideoXImageToVideoPipeline`: a VAE posterior sample per image, then the noise."""
    frames, h, w = _geometry(pipe, args)
    batch = prompt_batch_size(args)
    channels = int(pipe.transformer.config.in_channels) // 2
    patch_t = pipe.transformer.config.patch_size_t
    if patch_t is not None:
        frames += frames % patch_t
    vae = require_attr(pipe, "vae")
    dtype = _prompt_dtype(pipe, args)
    sample_shape = (1, int(vae.config.latent_channels), 1, h, w)
    if isinstance(args.get("generator"), list):
        if len(gens) != batch:
            raise Unpredictable(f"{len(gens)} generators for batch {batch}", "generator-count")
        per_image: list[tuple[torch.Generator, ...]] = [(g,) for g in gens]
    else:
        per_image = [gens] * image_count(args.get("image"))
    samples = [
        PlannedDraw(f"image_sample_{i}", sample_shape, vae.dtype, g, module=VAE_MODULE)
        for i, g in enumerate(per_image)
    ]
    noise = PlannedDraw(
        "noise", (batch, frames, channels, h, w), dtype, draw_generators(gens, batch)
    )
    return [*samples, noise]
