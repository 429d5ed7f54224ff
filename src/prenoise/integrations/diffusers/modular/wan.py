"""Wan modular (`WanModularPipeline`, `Wan22ModularPipeline` and their image-to-video classes).

One float32 `randn_tensor` call in `WanPrepareLatentsStep` (`wan/before_denoise.py`), after
every encoder, on the request's generator (a list: one per row): the noise
`(B·N, C, (F-1)//t+1, H//s, W//s)` with `B` the prompt count, `N` = `num_videos_per_prompt`,
`C` = `pipe.num_channels_latents`, `H`, `W`, `F` the state's values or the pipeline's defaults
(`default_height`, `default_width`, `default_num_frames`), as that block resolves them. Caller
`latents` skip the draw (the call runs plain).

Text-to-video plans when `WanTextEncoderStep` starts. Image-to-video resizes the canvas in
`WanImageResizeStep` (Wan 2.1 twice, 2.2 once) after the text encoder, so with an `image` the
plan waits for the VAE encoder (`WanVaeEncoderStep`, `WanFirstLastFrameVaeEncoderStep`), when the
state holds diffusers' own resized height and width. No encoder draws from the generator (the
VAE encoders take the posterior's argmax) and `scheduler.step` is called without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from prenoise.integrations.diffusers.modular.plan import ModularPlan, PlanLater, prompt_count
from prenoise.integrations.diffusers.plan import (
    PlannedDraw,
    Unpredictable,
    draw_generators,
    per_prompt,
)

__all__ = ["PIPELINE_CLASSES", "WAN", "plan_wan"]

PACKAGE = "diffusers.modular_pipelines.wan"
DRAW_MODULE = f"{PACKAGE}.before_denoise"
TEXT_ENCODER = f"{PACKAGE}.encoders.WanTextEncoderStep"
VAE_ENCODERS = frozenset(
    f"{PACKAGE}.encoders.{name}"
    for name in ("WanVaeEncoderStep", "WanFirstLastFrameVaeEncoderStep")
)
PIPELINE_CLASSES = tuple(
    f"{PACKAGE}.modular_pipeline.{name}"
    for name in (
        "WanModularPipeline",
        "WanImage2VideoModularPipeline",
        "Wan22ModularPipeline",
        "Wan22Image2VideoModularPipeline",
    )
)


def plan_wan(
    pipe: Any, values: Mapping[str, Any], gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """The noise; waits for the VAE encoder when an image will resize the canvas."""
    if values.get("latents") is not None:
        raise Unpredictable("caller-supplied latents", "latents-given")
    if values.get("image") is not None and "resized_image" not in values:
        raise PlanLater
    batch = prompt_count(values) * per_prompt(values, "num_videos_per_prompt")
    height = values.get("height") or pipe.default_height
    width = values.get("width") or pipe.default_width
    num_frames = values.get("num_frames") or pipe.default_num_frames
    t, s = int(pipe.vae_scale_factor_temporal), int(pipe.vae_scale_factor_spatial)
    shape = (
        batch,
        int(pipe.num_channels_latents),
        (int(num_frames) - 1) // t + 1,
        int(height) // s,
        int(width) // s,
    )
    generators = draw_generators(gens, batch)
    return [PlannedDraw("noise", shape, torch.float32, generators, module=DRAW_MODULE)]


WAN = ModularPlan(family="Wan", triggers=frozenset({TEXT_ENCODER, *VAE_ENCODERS}), planner=plan_wan)
