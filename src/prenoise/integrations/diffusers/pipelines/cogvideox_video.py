"""CogVideoX with a video input: `CogVideoXVideoToVideoPipeline`, `CogVideoXFunControlPipeline`.

`CogVideoXVideoToVideoPipeline` draws, after prompt encoding, in `prepare_latents`:

1. one VAE posterior sample per input video (`retrieve_latents(vae.encode(video[i]), g)`, in
   `diffusers.models.autoencoders.vae`), `(1, C_vae, F', H//s, W//s)` in the VAE's dtype: with a
   generator list, video `i` for batch row `i` from `generator[i]`, one per batch row; with one
   generator, every video of the preprocessed batch from it;
2. the frames-first noise `(B, F', C, H//s, W//s)` in the prompt dtype (`C`: the transformer's
   `in_channels`), added to the scaled posterior by the scheduler's `add_noise`.

`F' = (F - 1)//t + 1`, `F` the input video's frame count after `preprocess_video` (a list of PIL
frames, a list of such lists, or a 4-D `(F, C, H, W)` / 5-D `(B, F, C, H, W)` tensor; any other
input runs the plain call). `H`, `W` default to the transformer's sample size.
`num_videos_per_prompt` is forced to 1. The posterior's frame count is the VAE's, which equals
`F'` whenever the call works (the scheduler adds the two).

`CogVideoXFunControlPipeline` draws only the noise `(B, F', C_in // 2, H//s, W//s)` in the prompt
dtype, `F` being `len(control_video[0])` (a list of PIL frames counts as one video) or
`control_video_latents.size(2)`, as `__call__` computes it; the control video is encoded in
`mode()` (no draw).

Both hand the generator to `scheduler.step` (`prepare_extra_step_kwargs`): the DPM scheduler's
per-step draws come after the prepared ones (`step_noise.py`).

Checked on diffusers 0.40.0–0.42.1 (the draw code is the same in all four releases).
"""

from __future__ import annotations

from typing import Any

import torch

from prenoise.integrations.diffusers.pipelines.ltx import VAE_MODULE
from prenoise.integrations.diffusers.plan import (
    BoundCall,
    PlannedDraw,
    Unpredictable,
    draw_generators,
    prompt_batch_size,
    require_attr,
)

__all__ = ["plan_cogvideox_fun_control", "plan_cogvideox_v2v", "video_batch"]


def _prompt_dtype(pipe: Any, args: BoundCall) -> torch.dtype:
    """dtype of `prompt_embeds` after encoding (negatives concatenated under guidance)."""

    def encoded(name: str) -> torch.dtype:
        embeds = args.get(name)
        if isinstance(embeds, torch.Tensor):
            return embeds.dtype
        dtype: torch.dtype = require_attr(pipe, "text_encoder").dtype
        return dtype

    dtype = encoded("prompt_embeds")
    if float(args["guidance_scale"]) > 1.0:
        dtype = torch.promote_types(encoded("negative_prompt_embeds"), dtype)
    return dtype


def video_batch(video: object) -> tuple[int, int]:
    """`(videos, frames)` of a `VideoProcessor.preprocess_video` input, for the forms it takes
    that say both without decoding anything; `Unpredictable` for any other."""
    import PIL.Image

    def frames_of(clip: object) -> int | None:
        if isinstance(clip, list) and clip and all(isinstance(f, PIL.Image.Image) for f in clip):
            return len(clip)
        return None

    single = frames_of(video)
    if single is not None:
        return 1, single
    if isinstance(video, list) and video:
        counts = {frames_of(clip) for clip in video}
        if len(counts) == 1 and None not in counts:
            return len(video), int(counts.pop() or 0)
    if isinstance(video, torch.Tensor) and video.ndim == 4:
        return 1, int(video.shape[0])
    if isinstance(video, torch.Tensor) and video.ndim == 5:
        return int(video.shape[0]), int(video.shape[1])
    raise Unpredictable(
        f"cannot tell the frames of a video of type {type(video).__name__}", "video-frames"
    )


def _grid(pipe: Any, args: BoundCall) -> tuple[int, int, int, int]:
    """`(s, t, H//s, W//s)` with the pipeline's default height and width."""
    transformer = require_attr(pipe, "transformer")
    s, t = int(pipe.vae_scale_factor_spatial), int(pipe.vae_scale_factor_temporal)
    height = int(args["height"] or transformer.config.sample_height * s)
    width = int(args["width"] or transformer.config.sample_width * s)
    return s, t, height // s, width // s


def _check_patch_t(pipe: Any, num_frames: int, t: int) -> None:
    patch_t = pipe.transformer.config.patch_size_t
    if patch_t is not None and ((num_frames - 1) // t + 1) % patch_t != 0:
        raise Unpredictable(
            f"latent frames not divisible by patch_size_t={patch_t}: the call raises", "patch-t"
        )


def plan_cogvideox_v2v(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`CogVideoXVideoToVideoPipeline`: a posterior sample per video, then the noise."""
    _, t, h, w = _grid(pipe, args)
    video = args.get("video")
    videos, frames = video_batch(video)
    _check_patch_t(pipe, len(video), t)  # type: ignore[arg-type]  # `__call__`'s own count
    latent_frames = (frames - 1) // t + 1
    batch = prompt_batch_size(args)  # `num_videos_per_prompt` is forced to 1 by the pipeline
    vae = require_attr(pipe, "vae")
    if isinstance(args.get("generator"), list):
        if len(gens) != batch:
            raise Unpredictable(f"{len(gens)} generators for batch {batch}", "generator-count")
        if videos < batch:
            raise Unpredictable(f"{videos} videos for batch {batch}: the call raises", "videos")
        per_video: list[tuple[torch.Generator, ...]] = [(g,) for g in gens]
    else:
        per_video = [gens] * videos
    sample_shape = (1, int(vae.config.latent_channels), latent_frames, h, w)
    samples = [
        PlannedDraw(f"video_sample_{i}", sample_shape, vae.dtype, g, module=VAE_MODULE)
        for i, g in enumerate(per_video)
    ]
    shape = (batch, latent_frames, int(pipe.transformer.config.in_channels), h, w)
    noise = PlannedDraw("noise", shape, _prompt_dtype(pipe, args), draw_generators(gens, batch))
    return [*samples, noise]


def plan_cogvideox_fun_control(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`CogVideoXFunControlPipeline`: the noise (the control video is encoded in mode)."""
    import PIL.Image

    _, t, h, w = _grid(pipe, args)
    control = args.get("control_video")
    given = args.get("control_video_latents")
    if control is not None:
        if isinstance(control, list) and control and isinstance(control[0], PIL.Image.Image):
            control = [control]
        try:
            num_frames = len(control[0])
        except (TypeError, IndexError):
            raise Unpredictable("cannot tell the control video's frames", "video-frames") from None
    elif isinstance(given, torch.Tensor) and given.ndim == 5:
        num_frames = int(given.size(2))
    else:
        raise Unpredictable("no control_video and no 5-D control_video_latents", "video-frames")
    _check_patch_t(pipe, num_frames, t)
    batch = prompt_batch_size(args)  # `num_videos_per_prompt` is forced to 1 by the pipeline
    channels = int(pipe.transformer.config.in_channels) // 2
    shape = (batch, (num_frames - 1) // t + 1, channels, h, w)
    return [PlannedDraw("noise", shape, _prompt_dtype(pipe, args), draw_generators(gens, batch))]
