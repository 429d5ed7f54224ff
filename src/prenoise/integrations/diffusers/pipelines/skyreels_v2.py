"""SkyReels-V2: `SkyReelsV2Pipeline`, `SkyReelsV2ImageToVideoPipeline` and the diffusion-forcing
pipelines (`SkyReelsV2DiffusionForcingPipeline`, `...ImageToVideoPipeline`,
`...VideoToVideoPipeline`).

Every draw is float32 latent noise `(B, C, L, H//s, W//s)` after prompt (and image) encoding:
`B` is the prompt batch times `num_videos_per_prompt`, `C` the transformer's `in_channels`
(image-to-video: the VAE's `z_dim`), `s` / `t` the VAE's spatial / temporal factors, and
`num_frames` is first rounded down to `k·t + 1`. Each VAE encode (the image or video condition)
uses `sample_mode="argmax"` and draws nothing; `scheduler.step` (UniPC in the released
checkpoints, deterministic) is called without the generator.

- Text- and image-to-video: one draw, `L = (F-1)//t + 1` (image-to-video draws it before the
  image encode).
- Diffusion forcing: one draw per long-video iteration, `L` from `base_num_frames` and
  `overlap_history` as `prepare_latents` computes it; a short video (always the case without
  `overlap_history`) is one iteration of `(F-1)//t + 1` frames. Video-to-video always takes the
  long-video path and forces `num_videos_per_prompt` to 1. Their `addnoise_condition` noise is
  `torch.randn_like` without a generator: it draws from the global RNG on the request thread,
  never from the caller's generator, so it does not stop the plan. Between two iterations only
  argmax encodes and deterministic scheduler steps run; with a `callback_on_step_end` (which
  could use the generator) only the first iteration's draw is planned.

Checked on diffusers 0.40.0–0.42.1 (the draw code is the same in all four releases; 0.41.0 changes
only device moves and dtype casts of the diffusion-forcing image- and video-to-video pipelines).
"""

from __future__ import annotations

from typing import Any

import torch

from prenoise.integrations.diffusers.pipelines.wan_variants import round_frames
from prenoise.integrations.diffusers.plan import (
    BoundCall,
    PlannedDraw,
    Unpredictable,
    draw_generators,
    per_prompt,
    prompt_batch_size,
    require_attr,
)

__all__ = [
    "plan_skyreels_v2",
    "plan_skyreels_v2_df",
    "plan_skyreels_v2_df_i2v",
    "plan_skyreels_v2_df_v2v",
    "plan_skyreels_v2_i2v",
]


def _draws(
    pipe: Any,
    args: BoundCall,
    gens: tuple[torch.Generator, ...],
    channels: int,
    latent_frames: list[int],
    per_prompt_forced: bool = False,
) -> list[PlannedDraw]:
    s = int(pipe.vae_scale_factor_spatial)
    batch = prompt_batch_size(args)
    if not per_prompt_forced:  # else `__call__` sets `num_videos_per_prompt = 1`
        batch *= per_prompt(args, "num_videos_per_prompt")
    draw_gens = draw_generators(gens, batch)
    h, w = int(args["height"]) // s, int(args["width"]) // s
    if args.get("callback_on_step_end") is not None:
        latent_frames = latent_frames[:1]  # a callback could use the generator in between
    return [
        PlannedDraw(
            "noise" if i == 0 else f"chunk_noise_{i}",
            (batch, channels, f, h, w),
            torch.float32,
            draw_gens,
        )
        for i, f in enumerate(latent_frames)
    ]


def _frames(pipe: Any, args: BoundCall) -> tuple[int, int]:
    t = int(pipe.vae_scale_factor_temporal)
    return round_frames(int(args["num_frames"]), t), t


def plan_skyreels_v2(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`SkyReelsV2Pipeline`: the latent noise."""
    frames, t = _frames(pipe, args)
    channels = int(require_attr(pipe, "transformer").config.in_channels)
    return _draws(pipe, args, gens, channels, [(frames - 1) // t + 1])


def plan_skyreels_v2_i2v(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`SkyReelsV2ImageToVideoPipeline`: the latent noise, drawn before the image encode."""
    frames, t = _frames(pipe, args)
    channels = int(require_attr(pipe, "vae").config.z_dim)
    return _draws(pipe, args, gens, channels, [(frames - 1) // t + 1])


def _iterations(latent: int, base: int, overlap: int) -> list[int]:
    """The latent frames of each long-video iteration (`prepare_latents`' arithmetic)."""
    if base <= overlap:
        raise Unpredictable(f"base {base} <= overlap {overlap} latent frames", "df-overlap")
    n_iter = 1 + (latent - base - 1) // (base - overlap) + 1
    frames = []
    for i in range(n_iter):
        finished = i * (base - overlap) + overlap
        frames.append(min(latent - finished + overlap, base))
    if any(f < 1 for f in frames):
        raise Unpredictable(f"long-video iterations of {frames} latent frames", "df-frames")
    return frames


def _df_frames(pipe: Any, args: BoundCall) -> list[int]:
    """Text- and image-to-video diffusion forcing: short video, or the long-video iterations."""
    frames, t = _frames(pipe, args)
    overlap, base = args.get("overlap_history"), args.get("base_num_frames")
    latent = (frames - 1) // t + 1
    if overlap is None or base is None or frames <= base:
        return [latent]
    # the first iteration has `base` latent frames (`min(latent, base)`, as `latent > base`)
    return _iterations(latent, (int(base) - 1) // t + 1, (int(overlap) - 1) // t + 1)


def plan_skyreels_v2_df(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`SkyReelsV2DiffusionForcingPipeline`: the noise of each iteration."""
    channels = int(require_attr(pipe, "transformer").config.in_channels)
    return _draws(pipe, args, gens, channels, _df_frames(pipe, args))


def plan_skyreels_v2_df_i2v(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`SkyReelsV2DiffusionForcingImageToVideoPipeline`: the noise of each iteration."""
    channels = int(require_attr(pipe, "vae").config.z_dim)
    return _draws(pipe, args, gens, channels, _df_frames(pipe, args))


def plan_skyreels_v2_df_v2v(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`SkyReelsV2DiffusionForcingVideoToVideoPipeline`: the noise of each iteration (it always
    runs the long-video path, the input video's last `overlap_history` frames as the prefix)."""
    frames, t = _frames(pipe, args)
    overlap = args.get("overlap_history")
    if overlap is None:
        raise Unpredictable("overlap_history is None (the pipeline needs it)", "df-overlap")
    latent = (frames - 1) // t + 1
    base_frames = args.get("base_num_frames")
    base = (int(base_frames) - 1) // t + 1 if base_frames is not None else latent
    channels = int(require_attr(pipe, "transformer").config.in_channels)
    frames_per_iteration = _iterations(latent, base, (int(overlap) - 1) // t + 1)
    return _draws(pipe, args, gens, channels, frames_per_iteration, per_prompt_forced=True)
