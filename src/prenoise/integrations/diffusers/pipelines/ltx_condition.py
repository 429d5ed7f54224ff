"""LTX and LTX-2 conditioning: `LTXConditionPipeline`, `LTX2ImageToVideoPipeline`,
`LTX2ConditionPipeline` (diffusers 0.40.0–0.42.1).

`LTX2ImageToVideoPipeline` draws what `LTX2Pipeline` draws (`ltx2.plan_ltx2`): the float32
video noise `(B, C, (F-1)//t+1, H//s, W//s)`, the audio noise, and at the end the decode noise
when it is certain. The image is encoded in `argmax` mode (no draw); with a generator list the
pipeline encodes `image[i]` for each batch row, so fewer images than rows runs the plain call.

`LTX2ConditionPipeline` draws the same three, the video noise in *packed* form:
`(B, N + K, C·pt·p²)` with `N = F'·(H//s)·(W//s) / (pt·p²)` tokens of the video and `K` those of
the keyframe conditions (index ≠ 0 after `index % F'`, skipped when ≥ `F'`), each
`((f - 1)//t + 1)·(H//s)·(W//s) / (pt·p²)` for its frame count `f` trimmed as
`trim_conditioning_sequence` does; the audio noise is drawn packed, `(B, L, C_a·M')`. Conditions
are encoded in `argmax` mode (no draw). Caller `audio_latents` run the plain call.

`LTXConditionPipeline` draws, after prompt encoding, in `prepare_latents`:

1. the float32 noise `(B, C, (F-1)//t+1, H//s, W//s)`;
2. per condition, in order: the VAE posterior sample of its pixels
   (`diffusers.models.autoencoders.vae`), `(n, C_vae, (f-1)//t+1, H//s, W//s)` in the VAE dtype
   (`n` images of an image condition, one frame, or a video trimmed to `f` frames); then, for a
   condition at `frame_index ≠ 0`, the float32 noise of its latents (for a video, their first
   `num_prefix_latent_frames = 2` latent frames).

Then, with `image_cond_noise_scale > 0`, every denoising step draws the packed conditioning
noise, and the decoder draws the decode noise (`timestep_conditioning`) at the end: those are
left to the pipeline (the per-step look-ahead may prepare the per-step ones). Without
conditions or with `image_cond_noise_scale = 0`, the decode noise is planned as for `LTXPipeline`
(unless a `callback_on_step_end` could touch the generator). A generator list of more than one
plans only the noise: the pipeline samples each posterior with the whole list, drawing from its
first generator only.

The schedulers of all three are stepped without the generator (a stochastic flow-matching
scheduler would draw from the global RNG).

Checked on diffusers 0.40.0–0.42.1 (the draw code is the same in all four releases; 0.42.0 adds
LTX-2's `motion_speed`, which only changes positional embeddings).
"""

from __future__ import annotations

from typing import Any

import torch

from prenoise.integrations.diffusers.pipelines.cogvideox_video import video_batch
from prenoise.integrations.diffusers.pipelines.ltx import VAE_MODULE, image_count, plan_ltx
from prenoise.integrations.diffusers.pipelines.ltx2 import LEGACY_NUM_FRAMES, plan_ltx2
from prenoise.integrations.diffusers.plan import (
    BoundCall,
    PlannedDraw,
    Unpredictable,
    require_attr,
)

__all__ = ["plan_ltx2_condition", "plan_ltx2_i2v", "plan_ltx_condition"]

PREFIX_LATENT_FRAMES = 2
"""`LTXConditionPipeline.prepare_latents`' `num_prefix_latent_frames` (`__call__` keeps it)."""


def _trim(t: int, start_frame: int, frames: int, target: int) -> int:
    """`trim_conditioning_sequence`: at most `target - start_frame` frames, `k·t + 1` of them."""
    n = min(frames, target - start_frame)
    return (n - 1) // t * t + 1


def plan_ltx2_i2v(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`LTX2ImageToVideoPipeline`: `LTX2Pipeline`'s draws (the image is encoded in argmax)."""
    draws = plan_ltx2(pipe, args, gens)
    if isinstance(args.get("generator"), list):
        batch = draws[0].shape[0]
        if image_count(args.get("image")) < batch:
            raise Unpredictable(
                f"fewer images than the {batch} rows of a generator list: the call raises",
                "image-count",
            )
    return draws


def _ltx2_keyframe_tokens(pipe: Any, args: BoundCall, latent_frames: int, hw: int) -> int:
    """Tokens `LTX2ConditionPipeline.prepare_latents` appends for non-first-frame conditions."""
    import numpy as np
    import PIL.Image

    conditions = args.get("conditions")
    if conditions is None:
        return 0
    if not isinstance(conditions, list):
        conditions = [conditions]
    t = int(pipe.vae_temporal_compression_ratio)
    pt = int(pipe.transformer_temporal_patch_size)
    num_frames = int(args.get("num_frames") or LEGACY_NUM_FRAMES)
    tokens = 0
    for condition in conditions:
        frames = condition.frames
        if isinstance(frames, PIL.Image.Image):
            count = 1
        elif (
            isinstance(frames, list)
            and frames
            and all(isinstance(f, PIL.Image.Image) for f in frames)
        ):
            count = len(frames)
        elif isinstance(frames, np.ndarray | torch.Tensor):
            count = int(frames.shape[0]) if frames.ndim == 4 else 1
        else:
            raise Unpredictable(f"condition frames of type {type(frames).__name__}", "condition")
        index = int(condition.index)
        if index < 0:
            index %= latent_frames
        if index == 0 or index >= latent_frames:  # first-frame (replaced in place) or skipped
            continue
        trimmed = _trim(t, max((index - 1) * t + 1, 0), count, num_frames)
        cond_frames = (trimmed - 1) // t + 1
        if cond_frames % pt != 0:
            raise Unpredictable("keyframe latent frames not divisible by patch_size_t", "patch-t")
        tokens += cond_frames // pt * hw
    return tokens


def plan_ltx2_condition(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`LTX2ConditionPipeline`: packed video noise, packed audio noise, then decode noise."""
    if args.get("audio_latents") is not None:
        raise Unpredictable("caller-supplied audio_latents", "audio-latents")
    video, audio, *rest = plan_ltx2(pipe, args, gens)
    b, c, f, h, w = video.shape
    pt = int(pipe.transformer_temporal_patch_size)
    p = int(pipe.transformer_spatial_patch_size)
    if f % pt or h % p or w % p:
        raise Unpredictable("latent grid not divisible by the transformer patch", "patch")
    hw = (h // p) * (w // p)
    tokens = f // pt * hw + _ltx2_keyframe_tokens(pipe, args, f, hw)
    packed = PlannedDraw("noise", (b, tokens, c * pt * p * p), video.dtype, video.generators)
    ab, ac, length, mel = audio.shape
    packed_audio = PlannedDraw("audio_noise", (ab, length, ac * mel), audio.dtype, audio.generators)
    return [packed, packed_audio, *rest]


def _ltx_conditions(args: BoundCall) -> list[tuple[Any, Any, int]]:
    """`(image, video, frame_index)` per condition, as `LTXConditionPipeline.__call__` pairs
    `conditions` or `image` / `video` / `frame_index` (its `zip` included)."""
    conditions = args.get("conditions")
    if conditions is not None:
        if not isinstance(conditions, list):
            conditions = [conditions]
        return [(c.image, c.video, int(c.frame_index)) for c in conditions]
    image, video = args.get("image"), args.get("video")
    if image is None and video is None:
        return []
    count = 1
    if not isinstance(image, list):
        image = [image]
    else:
        count = len(image)
    if not isinstance(video, list):
        video, count = [video], 1
    else:
        count = len(video)
    frame_index = args.get("frame_index")
    if not isinstance(frame_index, list):
        frame_index = [frame_index] * count
    return [(i, v, int(f)) for i, v, f in zip(image, video, frame_index, strict=False)]


def plan_ltx_condition(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`LTXConditionPipeline`: the noise, then per condition its posterior sample and (off the
    first frame) its noise; the decode noise too when no per-step draw comes before it."""
    plan = plan_ltx(pipe, args, gens)  # the noise, and the decode noise when certain
    noise, tail = plan[0], plan[1:]
    conditions = _ltx_conditions(args)
    if not conditions:
        if any(args.get(k) is not None for k in ("conditions", "image", "video")):
            raise Unpredictable("an empty condition list: the call raises", "condition")
        return plan
    if float(args["image_cond_noise_scale"]) > 0:
        tail = []  # the per-step conditioning noise comes before the decode noise: left plain
    if len(gens) > 1:
        return [noise]
    vae = require_attr(pipe, "vae")
    t = int(pipe.vae_temporal_compression_ratio)
    _, _, _, h, w = noise.shape
    latent_channels = int(vae.config.latent_channels)
    draws = [noise]
    for i, (image, video, frame_index) in enumerate(conditions):
        if image is not None:
            count, frames = image_count(image), 1
        elif video is not None:
            count, given = video_batch(video)
            frames = _trim(t, frame_index, given, int(args["num_frames"]))
        else:
            raise Unpredictable("a condition without image or video: the call raises", "condition")
        if frames < 1 or frames % t != 1:
            raise Unpredictable(f"a condition of {frames} frames: the call raises", "condition")
        latent_frames = (frames - 1) // t + 1
        shape = (count, latent_channels, latent_frames, h, w)
        draws.append(PlannedDraw(f"condition_sample_{i}", shape, vae.dtype, gens, VAE_MODULE))
        if frame_index != 0:
            if frames > 1:
                if latent_frames < PREFIX_LATENT_FRAMES:
                    raise Unpredictable("a video condition too short: the call raises", "condition")
                latent_frames = PREFIX_LATENT_FRAMES
            shape = (count, latent_channels, latent_frames, h, w)
            draws.append(PlannedDraw(f"condition_noise_{i}", shape, torch.float32, gens))
    return [*draws, *tail]
