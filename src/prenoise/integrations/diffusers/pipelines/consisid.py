"""`ConsisIDPipeline` (CogVideoX-derived identity-preserving image-to-video).

After prompt encoding, `prepare_latents` draws, in this order:

1. one VAE posterior sample per reference image (`retrieve_latents(vae.encode(img), g)`, in
   `diffusers.models.autoencoders.vae`), `(1, C_vae, 1, H//s, W//s)` in the VAE's dtype: with a
   generator list, one per batch row `i` from `generator[i]`; else one per image of `image`
   (a PIL image, a list of them, a 3-D or 4-D tensor) from the one generator;
2. the frames-first noise `(B, (F-1)//t+1, C, H//s, W//s)`, `C` half the transformer's
   `in_channels`, in the dtype of the prompt embeddings after classifier-free guidance
   concatenates them: each side is the caller's `prompt_embeds` / `negative_prompt_embeds`
   dtype or `text_encoder.dtype`, and `torch.cat` promotes the two.

`B` is the prompt batch (`__call__` forces `num_videos_per_prompt` to 1); `H`, `W`, `F` default to
the transformer's sample size. No frame padding (unlike CogVideoX 1.5). A transformer with
`is_kps` given `kps_cond` also samples the keypoint image(s) after the reference images; that
path needs OpenCV (`draw_kps`) and is not planned. The CogVideoX DPM scheduler's per-step draws
come after the noise, on the caller's generator (`step_noise.py`).

Checked on diffusers 0.40.0–0.42.1 (the draw code is the same in all four releases).
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

__all__ = ["plan_consisid"]


def _embeds_dtype(pipe: Any, args: BoundCall, name: str) -> torch.dtype:
    given = args.get(name)
    if isinstance(given, torch.Tensor):
        return given.dtype
    dtype: torch.dtype = require_attr(pipe, "text_encoder").dtype
    return dtype


def _prompt_dtype(pipe: Any, args: BoundCall) -> torch.dtype:
    """`prompt_embeds.dtype` where `prepare_latents` reads it (after the CFG concatenation)."""
    dtype = _embeds_dtype(pipe, args, "prompt_embeds")
    if args["guidance_scale"] > 1.0:
        dtype = torch.promote_types(dtype, _embeds_dtype(pipe, args, "negative_prompt_embeds"))
    return dtype


def plan_consisid(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`ConsisIDPipeline`: a VAE posterior sample per reference image, then the noise."""
    transformer = require_attr(pipe, "transformer")
    vae = require_attr(pipe, "vae")
    config = transformer.config
    if getattr(config, "is_kps", False) and args.get("kps_cond") is not None:
        raise Unpredictable("keypoint conditioning (kps_cond) is not planned", "kps-cond")
    s, t = int(pipe.vae_scale_factor_spatial), int(pipe.vae_scale_factor_temporal)
    height = int(args["height"] or config.sample_height * s)
    width = int(args["width"] or config.sample_width * s)
    num_frames = int(args["num_frames"] or config.sample_frames)
    h, w = height // s, width // s
    batch = prompt_batch_size(args)  # `num_videos_per_prompt` is forced to 1 by the pipeline
    if isinstance(args.get("generator"), list):
        if len(gens) != batch:
            raise Unpredictable(f"{len(gens)} generators for batch {batch}", "generator-count")
        per_image: list[tuple[torch.Generator, ...]] = [(g,) for g in gens]
    else:
        per_image = [gens] * image_count(args.get("image"))
    sample_shape = (1, int(vae.config.latent_channels), 1, h, w)
    samples = [
        PlannedDraw(f"image_sample_{i}", sample_shape, vae.dtype, g, module=VAE_MODULE)
        for i, g in enumerate(per_image)
    ]
    shape = (batch, (num_frames - 1) // t + 1, int(config.in_channels) // 2, h, w)
    noise = PlannedDraw("noise", shape, _prompt_dtype(pipe, args), draw_generators(gens, batch))
    return [*samples, noise]
