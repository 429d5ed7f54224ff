"""Wan variants: `WanVideoToVideoPipeline`, `WanVACEPipeline` and `WanAnimatePipeline`.

Every draw is float32 latent noise `(B, C, F', H//s, W//s)` (`B` the prompt batch times
`num_videos_per_prompt`, `s` / `t` the VAE's spatial / temporal factors), made after prompt
encoding; every VAE encode on the way (input video, VACE video / mask / reference images, Animate
reference image, pose and previous-segment videos) is `retrieve_latents(..., sample_mode="argmax")`,
which draws nothing, and `scheduler.step` is called without the generator (a stochastic scheduler
would draw from the global RNG, never from the caller's generator).

- Video-to-video: `C` = the transformer's `in_channels`, `F' = (F-1)//t + 1` with `F` the input
  video's frame count; the noise comes after the video encode and is mixed in by `scale_noise`.
  `__call__` forces `num_videos_per_prompt` to 1, so `B` is the prompt batch.
- VACE: `C` = `in_channels` of `transformer` (or `transformer_2`), `F` = `num_frames` rounded to
  `k·t + 1` plus `t` per reference image. The pipeline raises for prompt lists, several videos
  per prompt and generator lists before it draws; the plan leaves generator lists to it.
- Animate: `C` = the VAE's `z_dim`, one draw per inference segment of `segment_frame_length`
  (rounded to `k·t + 1`) frames, with one latent frame more than the segment (`F' + 1`). The
  segments' count follows from `len(pose_video)` as `__call__` computes it; between two segments
  nothing but argmax encodes and the decode touch the pipeline, so every segment's noise is
  planned — only the first when a `callback_on_step_end` could use the generator in between.

Checked on diffusers 0.40.0–0.42.1 (the draw code is the same in all four releases; Animate's
`prepare_prev_segment_cond_latents` changed in 0.41.0 in a way that touches no draw).
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

__all__ = ["plan_wan_animate", "plan_wan_v2v", "plan_wan_vace", "round_frames", "video_frames"]


def round_frames(num_frames: int, t: int) -> int:
    """`num_frames` rounded down to `k·t + 1` (at least 1), as the Wan `__call__`s round it."""
    if num_frames % t != 1:
        num_frames = num_frames // t * t + 1
    return max(num_frames, 1)


def video_frames(video: object) -> int:
    """How many frames `VideoProcessor.preprocess_video(video)` gives each video."""
    import numpy as np
    import PIL.Image

    if isinstance(video, torch.Tensor | np.ndarray) and video.ndim in (4, 5):
        return int(video.shape[0] if video.ndim == 4 else video.shape[1])
    if isinstance(video, list) and video:
        if all(isinstance(f, PIL.Image.Image) for f in video):
            return len(video)
        if all(isinstance(v, list) and v for v in video):
            lengths = {len(v) for v in video}
            if len(lengths) == 1 and all(isinstance(f, PIL.Image.Image) for f in video[0]):
                return lengths.pop()
    raise Unpredictable(
        f"cannot tell the frame count of a {type(video).__name__} video", "video-frames"
    )


def _grid(pipe: Any) -> tuple[int, int]:
    return int(pipe.vae_scale_factor_spatial), int(pipe.vae_scale_factor_temporal)


def _batch(
    args: BoundCall, gens: tuple[torch.Generator, ...]
) -> tuple[int, tuple[torch.Generator, ...]]:
    batch = prompt_batch_size(args) * per_prompt(args, "num_videos_per_prompt")
    return batch, draw_generators(gens, batch)


def plan_wan_v2v(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`WanVideoToVideoPipeline`: the noise mixed into the encoded input video."""
    transformer = require_attr(pipe, "transformer")
    s, t = _grid(pipe)
    frames = (video_frames(args.get("video")) - 1) // t + 1
    batch = prompt_batch_size(args)  # `num_videos_per_prompt` is forced to 1 by the pipeline
    draw_gens = draw_generators(gens, batch)
    channels = int(transformer.config.in_channels)
    shape = (batch, channels, frames, int(args["height"]) // s, int(args["width"]) // s)
    return [PlannedDraw("noise", shape, torch.float32, draw_gens)]


def _reference_count(references: object) -> int:
    """Reference images per video, as `WanVACEPipeline.preprocess_conditions` keeps them."""
    import PIL.Image

    if references is None:
        return 0
    if isinstance(references, PIL.Image.Image):
        return 1
    if isinstance(references, list | tuple) and references:
        first = references[0]
        if isinstance(first, PIL.Image.Image):
            return sum(r is not None for r in references)
        if isinstance(first, list) and first and isinstance(first[0], PIL.Image.Image):
            return sum(r is not None for r in first)
    raise Unpredictable(
        f"cannot tell how many reference images {type(references).__name__} holds", "references"
    )


def plan_wan_vace(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`WanVACEPipeline`: the noise, with `t` more frames per reference image."""
    if isinstance(args.get("generator"), list):
        raise Unpredictable(
            "WanVACEPipeline rejects generator lists (it raises before drawing)", "generator-list"
        )
    transformer = getattr(pipe, "transformer", None) or require_attr(pipe, "transformer_2")
    s, t = _grid(pipe)
    num_frames = round_frames(int(args["num_frames"]), t)
    num_frames += _reference_count(args.get("reference_images")) * t
    batch, draw_gens = _batch(args, gens)
    shape = (
        batch,
        int(transformer.config.in_channels),
        (num_frames - 1) // t + 1,
        int(args["height"]) // s,
        int(args["width"]) // s,
    )
    return [PlannedDraw("noise", shape, torch.float32, draw_gens)]


def _segment_count(args: BoundCall, segment: int) -> int:
    pose_video = args.get("pose_video")
    if not isinstance(pose_video, list) or not pose_video:
        raise Unpredictable("pose_video is not a non-empty list", "pose-video")
    cond_frames = len(pose_video)
    prev = int(args["prev_segment_conditioning_frames"])
    effective = segment - prev
    last = (cond_frames - prev) % effective
    padding = 0 if last == 0 else effective - last
    return (cond_frames + padding) // effective


def plan_wan_animate(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`WanAnimatePipeline`: one noise draw per inference segment."""
    vae = require_attr(pipe, "vae")
    s, t = _grid(pipe)
    segment = round_frames(int(args["segment_frame_length"]), t)
    segments = _segment_count(args, segment)
    if segments < 1:
        raise Unpredictable(f"{segments} inference segments", "segments")
    if args.get("callback_on_step_end") is not None:
        segments = 1  # a callback could use the generator before the next segment's draw
    batch, draw_gens = _batch(args, gens)
    shape = (
        batch,
        int(vae.config.z_dim),
        (segment - 1) // t + 2,  # the segment's latent frames and the reference frame
        int(args["height"]) // s,
        int(args["width"]) // s,
    )
    labels = ["noise", *(f"segment_noise_{i}" for i in range(1, segments))]
    return [PlannedDraw(label, shape, torch.float32, draw_gens) for label in labels]
