"""Sana-Video: `SanaVideoPipeline` and `SanaImageToVideoPipeline`.

Both draw one float32 noise tensor `(B·N, C, (F-1)//t+1, H//s, W//s)` in `prepare_latents`,
after prompt encoding (and, for image-to-video, after the image is preprocessed), and nothing
else before the denoising loop. `B·N` is the prompt batch times `num_videos_per_prompt`; `C` the
transformer's `in_channels`; `F` is the `frames` argument (not rounded); `t` and `s` the VAE's
temporal and spatial factors as `__init__` reads them. With `use_resolution_binning` (the
default) `H`, `W` are first mapped to the nearest bin of the transformer's sample size (30: the
480p bins, 22: the 720p ones; another size makes the pipeline raise, so the call runs plain).

Image-to-video encodes its image with the VAE's argmax mode (no draw), after the noise, once per
generator when a list is given. Both pipelines hand the generator to `scheduler.step`
(`prepare_extra_step_kwargs`): a stochastic scheduler's per-step draws (DPM-Solver++ in SDE
mode, flow-match Euler with `stochastic_sampling`) come after the noise (`step_noise.py`);
image-to-video steps the frames after the first, so those draws have `F'-1` latent frames.

Checked on diffusers 0.40.0–0.42.1 (the draw code is the same in all four releases; 0.41.0 only
simplifies the decode's out-of-memory handling).
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

__all__ = ["plan_sana_video", "plan_sana_video_i2v"]


def _size(pipe: Any, transformer: Any, args: BoundCall) -> tuple[int, int]:
    """`(height, width)` as `__call__` uses them for the latents."""
    height, width = args["height"], args["width"]
    if not args.get("use_resolution_binning"):
        return int(height), int(width)
    from diffusers.pipelines.sana_video.pipeline_sana_video import (
        ASPECT_RATIO_480_BIN,
        ASPECT_RATIO_720_BIN,
    )

    bins = {30: ASPECT_RATIO_480_BIN, 22: ASPECT_RATIO_720_BIN}.get(transformer.config.sample_size)
    if bins is None:
        raise Unpredictable(
            f"resolution binning with sample_size {transformer.config.sample_size}",
            "sana-video-bins",
        )
    binned = pipe.video_processor.classify_height_width_bin(height, width, ratios=bins)
    return int(binned[0]), int(binned[1])


def plan_sana_video(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """The latent noise of a `SanaVideoPipeline` or `SanaImageToVideoPipeline` call."""
    transformer = require_attr(pipe, "transformer")
    t = int(pipe.vae_scale_factor_temporal)
    s = int(pipe.vae_scale_factor_spatial)
    height, width = _size(pipe, transformer, args)
    batch = prompt_batch_size(args) * per_prompt(args, "num_videos_per_prompt")
    shape = (
        batch,
        int(transformer.config.in_channels),
        (int(args["frames"]) - 1) // t + 1,
        height // s,
        width // s,
    )
    return [PlannedDraw("noise", shape, torch.float32, draw_generators(gens, batch))]


plan_sana_video_i2v = plan_sana_video
"""`SanaImageToVideoPipeline`: the same single draw (its image is encoded in argmax mode)."""
