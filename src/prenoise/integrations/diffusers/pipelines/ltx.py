"""LTX-Video 0.9.x: `LTXPipeline` and `LTXImageToVideoPipeline` (diffusers 0.40.0–0.42.1).

`LTXPipeline` draws the float32 noise `(B, C, (F-1)//t+1, H//s, W//s)` after prompt encoding,
and — when the output is decoded by a VAE with `timestep_conditioning` — the decode noise of the
same shape in the prompt dtype at the very end. Between the two nothing else touches the
generator (the scheduler is stepped without it), unless a `callback_on_step_end` could: then
only the first draw is planned.

`LTXImageToVideoPipeline` first samples the VAE posterior of every conditioning image (one
`randn_tensor` per image, in `diffusers.models.autoencoders.vae`; per batch row from
`generator[i]` when a list is given), then draws the noise. Its decode noise is a raw
`torch.randn` after every planned draw, so it stays on the request thread.
"""

from __future__ import annotations

from typing import Any

import torch

from prenoise.integrations.diffusers.plan import (
    BoundCall,
    PlannedDraw,
    Unpredictable,
    draw_generators,
    per_prompt,
    prompt_batch_size,
    require_attr,
)

__all__ = ["VAE_MODULE", "image_count", "plan_ltx", "plan_ltx_i2v"]

VAE_MODULE = "diffusers.models.autoencoders.vae"


def _latent_grid(pipe: Any, args: BoundCall) -> tuple[int, int, int]:
    t = int(pipe.vae_temporal_compression_ratio)
    s = int(pipe.vae_spatial_compression_ratio)
    return (int(args["num_frames"]) - 1) // t + 1, int(args["height"]) // s, int(args["width"]) // s


def _noise(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> tuple[PlannedDraw, int]:
    transformer = require_attr(pipe, "transformer")
    batch = prompt_batch_size(args) * per_prompt(args, "num_videos_per_prompt")
    shape = (batch, int(transformer.config.in_channels), *_latent_grid(pipe, args))
    return PlannedDraw("noise", shape, torch.float32, draw_generators(gens, batch)), batch


def _prompt_dtype(pipe: Any, args: BoundCall) -> torch.dtype:
    embeds = args.get("prompt_embeds")
    if isinstance(embeds, torch.Tensor):
        return embeds.dtype
    dtype: torch.dtype = require_attr(pipe, "text_encoder").dtype
    return dtype


def plan_ltx(pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]) -> list[PlannedDraw]:
    """`LTXPipeline`: the noise, then the decode noise when it is certain to be drawn."""
    noise, _ = _noise(pipe, args, gens)
    draws = [noise]
    vae = require_attr(pipe, "vae")
    if (
        args.get("output_type") != "latent"
        and vae.config.timestep_conditioning
        and args.get("callback_on_step_end") is None
    ):
        draws.append(
            PlannedDraw("decode_noise", noise.shape, _prompt_dtype(pipe, args), noise.generators)
        )
    return draws


def image_count(image: object) -> int:
    import PIL.Image

    if isinstance(image, PIL.Image.Image):
        return 1
    if isinstance(image, torch.Tensor) and image.ndim in (3, 4):
        return 1 if image.ndim == 3 else int(image.shape[0])
    if isinstance(image, list) and image and all(isinstance(i, PIL.Image.Image) for i in image):
        return len(image)
    raise Unpredictable(f"cannot tell how many images {type(image).__name__} holds", "image-count")


def plan_ltx_i2v(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`LTXImageToVideoPipeline`: a VAE posterior sample per image, then the noise."""
    noise, batch = _noise(pipe, args, gens)
    vae = require_attr(pipe, "vae")
    _, h, w = _latent_grid(pipe, args)
    sample_shape = (1, int(vae.config.latent_channels), 1, h, w)
    raw = args.get("generator")
    if isinstance(raw, list):
        if len(gens) != batch:
            raise Unpredictable(f"{len(gens)} generators for batch {batch}", "generator-count")
        per_image: list[tuple[torch.Generator, ...]] = [(gens[i],) for i in range(batch)]
    else:
        per_image = [gens] * image_count(args.get("image"))
    samples = [
        PlannedDraw(f"image_sample_{i}", sample_shape, vae.dtype, g, module=VAE_MODULE)
        for i, g in enumerate(per_image)
    ]
    return [*samples, noise]
