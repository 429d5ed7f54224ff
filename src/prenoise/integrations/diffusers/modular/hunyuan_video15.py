"""HunyuanVideo-1.5 modular (`HunyuanVideo15ModularPipeline`; text- and image-to-video).

One `randn_tensor` call in `HunyuanVideo15PrepareLatentsStep` (`hunyuan_video1_5/before_denoise.py`)
in the transformer's dtype, after every encoder, on the request's generator (a list: one per
row): `(B·N, C, (F-1)//t+1, H//s, W//s)` with `B` the prompt count, `N` =
`num_videos_per_prompt`, `C` = `pipe.num_channels_latents`, `F` = `num_frames` (the block's
declared default when None). `H`, `W`: as given; text-to-video with neither given takes
`video_processor.calculate_default_height_width` of the default 16:9 aspect ratio (one alone:
diffusers raises, the call runs plain); image-to-video with either missing takes it of the
image's size (`HunyuanVideo15VaeEncoderStep`), diffusers' own function either way. Caller
`latents` skip the draw. Planned when `HunyuanVideo15TextEncoderStep` starts; the VAE encoder
takes the posterior's argmax and the scheduler is stepped without the generator.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from prenoise.integrations.diffusers.modular.plan import (
    ModularPlan,
    declared_default,
    prompt_count,
)
from prenoise.integrations.diffusers.plan import (
    PlannedDraw,
    Unpredictable,
    draw_generators,
    per_prompt,
)

__all__ = ["HUNYUAN_VIDEO15", "PIPELINE_CLASS", "plan_hunyuan_video15"]

PACKAGE = "diffusers.modular_pipelines.hunyuan_video1_5"
DRAW_MODULE = f"{PACKAGE}.before_denoise"
PREPARE_LATENTS = f"{DRAW_MODULE}.HunyuanVideo15PrepareLatentsStep"
PIPELINE_CLASS = f"{PACKAGE}.modular_pipeline.HunyuanVideo15ModularPipeline"
TEXT_ENCODER = f"{PACKAGE}.encoders.HunyuanVideo15TextEncoderStep"


def _size(pipe: Any, values: Mapping[str, Any]) -> tuple[int, int]:
    import PIL.Image

    height, width = values.get("height"), values.get("width")
    image = values.get("image")
    if image is not None:
        if not isinstance(image, PIL.Image.Image):
            raise Unpredictable(f"image of type {type(image).__name__}", "image-type")
        if height is None or width is None:
            height, width = pipe.video_processor.calculate_default_height_width(
                height=image.size[1], width=image.size[0], target_size=pipe.target_size
            )
    elif height is None and width is None:
        aspect = pipe.default_aspect_ratio
        height, width = pipe.video_processor.calculate_default_height_width(
            aspect[1], aspect[0], pipe.target_size
        )
    elif height is None or width is None:
        raise Unpredictable("only one of height and width given", "size-half-given")
    return int(height), int(width)


def plan_hunyuan_video15(
    pipe: Any, values: Mapping[str, Any], gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """The latent noise."""
    transformer = getattr(pipe, "transformer", None)
    if transformer is None:
        raise Unpredictable("pipeline has no transformer", "missing-transformer")
    if values.get("latents") is not None:
        raise Unpredictable("caller-supplied latents", "latents-given")
    batch = prompt_count(values) * per_prompt(values, "num_videos_per_prompt")
    num_frames = values.get("num_frames")
    if num_frames is None:
        num_frames = declared_default(pipe, PREPARE_LATENTS, "num_frames")
    height, width = _size(pipe, values)
    t, s = int(pipe.vae_scale_factor_temporal), int(pipe.vae_scale_factor_spatial)
    shape = (
        batch,
        int(pipe.num_channels_latents),
        (int(num_frames) - 1) // t + 1,
        height // s,
        width // s,
    )
    generators = draw_generators(gens, batch)
    return [PlannedDraw("noise", shape, transformer.dtype, generators, module=DRAW_MODULE)]


HUNYUAN_VIDEO15 = ModularPlan(
    family="HunyuanVideo-1.5", triggers=frozenset({TEXT_ENCODER}), planner=plan_hunyuan_video15
)
