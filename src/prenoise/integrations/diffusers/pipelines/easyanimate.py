"""EasyAnimate: `EasyAnimatePipeline` and `EasyAnimateInpaintPipeline` (diffusers 0.40.0–0.42.1).

Both draw one noise tensor `(B·N, C, (F-1)//t+1, H'//s, W'//s)` after prompt encoding, where
`H'`, `W'` are `height`, `width` rounded down to a multiple of 16 (as `__call__` does), `N` is
`num_images_per_prompt` and `s`, `t` the VAE's spatial and temporal compression. Its dtype is
the one `__call__` picks before encoding — `text_encoder.dtype`, or `transformer.dtype`
without a text encoder — whatever the caller's `prompt_embeds` are.

- `EasyAnimatePipeline`: `B` is the prompt batch, `C` the transformer's `in_channels`.
- `EasyAnimateInpaintPipeline`: `C` is the VAE's `latent_channels`; with a `video`, `B` and `F`
  are its batch and frame count (`__call__` reads them from `video.shape`), else the prompt
  batch and `num_frames`. Before the noise the VAE posterior of the video is sampled when the
  transformer takes no mask channels or `strength < 1` — from the global RNG
  (`.sample()` without a generator), never from the caller's generator. After the noise,
  `add_noise_to_reference_video` draws the masked-video noise itself with
  `torch.randn(generator=generator)` (a mask that keeps some pixels, a transformer with mask
  channels and `add_noise_in_inpaint_model`): the noise was served by then, so that raw draw
  runs on the request thread on the generator where the plain call has it (and raises for a
  generator list, in the plain call too). `noise_aug_strength=None` draws its sigma with
  `torch.normal` from the global RNG.

Both hand the generator to `scheduler.step` (`prepare_extra_step_kwargs`): a stochastic
scheduler's per-step draws (flow-match Euler with `stochastic_sampling=True`, ...) come after
the noise (`step_noise.py`).

`EasyAnimateControlPipeline` has no plan: its `__call__` passes `text_encoder_index=0` to its
own `encode_prompt`, which takes no such argument, so every call raises `TypeError` before any
draw (diffusers 0.40.0–0.42.1).

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

__all__ = ["plan_easyanimate", "plan_easyanimate_inpaint"]


def _dtype(pipe: Any) -> torch.dtype:
    """`text_encoder.dtype`, or `transformer.dtype` without a text encoder (`__call__`)."""
    encoder = getattr(pipe, "text_encoder", None)
    dtype: torch.dtype = (
        encoder if encoder is not None else require_attr(pipe, "transformer")
    ).dtype
    return dtype


def _noise(
    pipe: Any,
    args: BoundCall,
    gens: tuple[torch.Generator, ...],
    batch: int,
    channels: int,
    frames: int,
) -> list[PlannedDraw]:
    height, width = args["height"], args["width"]
    if not isinstance(height, int | float) or not isinstance(width, int | float):
        raise Unpredictable(f"height={height!r}, width={width!r}", "size-value")
    s = int(pipe.vae_spatial_compression_ratio)
    t = int(pipe.vae_temporal_compression_ratio)
    h, w = int(height // 16 * 16), int(width // 16 * 16)
    batch *= per_prompt(args, "num_images_per_prompt")
    shape = (batch, channels, (int(frames) - 1) // t + 1, h // s, w // s)
    return [PlannedDraw("noise", shape, _dtype(pipe), draw_generators(gens, batch))]


def plan_easyanimate(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`EasyAnimatePipeline`: the latent noise, channels = the transformer's `in_channels`."""
    channels = int(require_attr(pipe, "transformer").config.in_channels)
    return _noise(pipe, args, gens, prompt_batch_size(args), channels, args["num_frames"])


def plan_easyanimate_inpaint(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`EasyAnimateInpaintPipeline`: the latent noise, channels = the VAE's `latent_channels`."""
    channels = int(require_attr(pipe, "vae").config.latent_channels)
    video = args.get("video")
    if video is None:
        return _noise(pipe, args, gens, prompt_batch_size(args), channels, args["num_frames"])
    if not isinstance(video, torch.Tensor) or video.ndim != 5:
        raise Unpredictable("video is not a (B, C, F, H, W) tensor", "video-shape")
    return _noise(pipe, args, gens, int(video.shape[0]), channels, int(video.shape[2]))
