"""HunyuanVideo-1.5: `HunyuanVideo15Pipeline` and `HunyuanVideo15ImageToVideoPipeline`.

Both draw one noise tensor `(B·N, C, (F-1)//t+1, H//s, W//s)` in the transformer's dtype, in
`prepare_latents` after both prompt encoders (Qwen2.5-VL and ByT5) and, for image-to-video, the
image encoder. `B·N` is the prompt batch times `num_videos_per_prompt`; `C` the pipeline's
`num_channels_latents` (the VAE's `latent_channels`); `F` is `num_frames` as given; `t`, `s` the
VAE's temporal and spatial compression. Text-to-video takes `H`, `W` as given, or both from
`calculate_default_height_width(9, 16, target_size)` when both are None (one alone makes the
pipeline raise: the call runs plain). Image-to-video takes them from the image's size, bucketed
by `calculate_default_height_width(image height, image width, target_size)`, and encodes the
image with the VAE's argmax mode after the noise (no draw).

Nothing else draws from the generator: the flow-match scheduler is stepped without it (a
`stochastic_sampling` scheduler draws from the global RNG, which prenoise leaves to the
pipeline) and the VAE decodes without sampling.

Checked on diffusers 0.40.0–0.42.1 (the draw code is the same in all four releases).
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

__all__ = ["plan_hunyuan_video15", "plan_hunyuan_video15_i2v"]


def _noise(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...], height: int, width: int
) -> list[PlannedDraw]:
    transformer = require_attr(pipe, "transformer")
    t = int(pipe.vae_scale_factor_temporal)
    s = int(pipe.vae_scale_factor_spatial)
    batch = prompt_batch_size(args) * per_prompt(args, "num_videos_per_prompt")
    shape = (
        batch,
        int(pipe.num_channels_latents),
        (int(args["num_frames"]) - 1) // t + 1,
        int(height) // s,
        int(width) // s,
    )
    dtype: torch.dtype = transformer.dtype
    return [PlannedDraw("noise", shape, dtype, draw_generators(gens, batch))]


def plan_hunyuan_video15(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`HunyuanVideo15Pipeline`: the latent noise."""
    height, width = args["height"], args["width"]
    if height is None and width is None:
        aspect_w, aspect_h = pipe.default_aspect_ratio
        height, width = pipe.video_processor.calculate_default_height_width(
            aspect_h, aspect_w, pipe.target_size
        )
    elif height is None or width is None:
        raise Unpredictable("only one of height and width given", "size-half-given")
    return _noise(pipe, args, gens, height, width)


def plan_hunyuan_video15_i2v(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`HunyuanVideo15ImageToVideoPipeline`: the latent noise, sized from the image."""
    import PIL.Image

    image = args.get("image")
    if not isinstance(image, PIL.Image.Image):
        raise Unpredictable(f"image of type {type(image).__name__}", "image-type")
    height, width = pipe.video_processor.calculate_default_height_width(
        height=image.size[1], width=image.size[0], target_size=pipe.target_size
    )
    return _noise(pipe, args, gens, height, width)
