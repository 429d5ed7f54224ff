"""AnimateDiff: `AnimateDiffPipeline`, `AnimateDiffControlNetPipeline`,
`AnimateDiffSparseControlNetPipeline`, `AnimateDiffSDXLPipeline`, `AnimateDiffVideoToVideoPipeline`
and `AnimateDiffVideoToVideoControlNetPipeline`.

`AnimateDiffPipeline` (and `AnimateDiffControlNetPipeline`, whose latent and prompt code is the
same; its conditioning frames are only resized) draws one noise tensor `(B, C, F, H//s, W//s)`
after prompt (and IP-adapter image) encoding: `B` is the prompt batch (`__call__` forces
`num_videos_per_prompt` to 1), `C` the UNet's `in_channels`, `F` is `num_frames` (no temporal
compression); the dtype is `prompt_embeds.dtype`, which `encode_prompt` casts to
`text_encoder.dtype` (`unet.dtype` without a text encoder), the caller's `prompt_embeds`
included. With FreeNoise enabled
(`enable_free_noise`) the latents come from `_prepare_latents_free_noise` instead — a draw of
another frame count, then `torch.randperm(generator=...)` on the caller's generator for the
`shuffle_context` noise type — so such a call falls through.

`AnimateDiffSparseControlNetPipeline` (SparseCtrl) draws the same noise, in the same dtype (its
`prepare_latents` and `encode_prompt` are the text-to-video ones; it has no FreeNoise). Before
it, `prepare_image` encodes the conditioning frames; with the controlnet's
`use_simplified_condition_embedding` (the released checkpoints' setting) that samples the VAE
posterior with `generator=None`, i.e. from the global RNG on the request thread, never from the
caller's generator, which nothing touches before the noise (prenoise's worker draws only the
caller's generators, so the global stream stays the plain call's). A caller whose generator is
the global one (`torch.manual_seed(...)`) is refused anyway (`call_generators`).

`AnimateDiffSDXLPipeline` draws the same noise (no FreeNoise there), its height and width
defaulting to `default_sample_size` times `s`; its prompt dtype is `text_encoder_2.dtype`
(`unet.dtype` without a second text encoder).

`AnimateDiffVideoToVideoPipeline` prepares its latents *before* encoding the prompt: for each
video (row `i` from `generator[i]` when a list is given) and each chunk of `decode_chunk_size`
frames, the VAE posterior is sampled (`DiagonalGaussianDistribution.sample`, a `randn_tensor` in
`diffusers.models.autoencoders.vae`, shape `(chunk, latent_channels, H//s, W//s)`, in float32
when the VAE's `force_upcast` is set, else in the VAE's dtype); then the noise is drawn frames
first, `(B, F, latent_channels, H//s, W//s)`, in the pipeline's `dtype`. Its FreeNoise only
changes prompt encoding and the UNet, not the draws. Only an `AutoencoderKL` VAE is planned (one
posterior sample per `encode`). `AnimateDiffVideoToVideoControlNetPipeline` has the same
`prepare_latents` and `encode_video` (identical code) and the same code before them; its
conditioning frames are only resized, after the latents.

All hand the generator to `scheduler.step` (`prepare_extra_step_kwargs`): a stochastic
scheduler's per-step draws (DDIM with `eta > 0`, Euler ancestral, ...) come after the planned
draws (`step_noise.py`), and so do FreeInit's re-noising draws (`_apply_free_init`, after each
whole denoising loop).

Checked on diffusers 0.40.0–0.42.1 (the draw code is the same in all four releases; only the
SDXL `encode_prompt` changes in 0.41.0, where its token ids move to the text encoder's execution
device).
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

__all__ = ["plan_animatediff", "plan_animatediff_sdxl", "plan_animatediff_v2v", "video_layout"]

_AUTOENCODER_KL = "diffusers.models.autoencoders.autoencoder_kl.AutoencoderKL"


def _height_width(pipe: Any, args: BoundCall) -> tuple[int, int]:
    """`height` and `width` as `__call__` defaults them (the UNet's `sample_size` times `s`)."""
    unet = require_attr(pipe, "unet")
    scale = int(pipe.vae_scale_factor)
    height = args["height"] or unet.config.sample_size * scale
    width = args["width"] or unet.config.sample_size * scale
    return int(height), int(width)


def _prompt_dtype(pipe: Any, args: BoundCall) -> torch.dtype:
    """`prompt_embeds.dtype` after `encode_prompt`: the text encoder's, else the UNet's."""
    for name in ("text_encoder", "unet"):
        module = getattr(pipe, name, None)
        if module is not None:
            dtype: torch.dtype = module.dtype
            return dtype
    embeds = args.get("prompt_embeds")
    if isinstance(embeds, torch.Tensor):
        return embeds.dtype
    raise Unpredictable("cannot tell the prompt dtype", "prompt-dtype")


def plan_animatediff(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`AnimateDiffPipeline`, `AnimateDiffControlNetPipeline` and
    `AnimateDiffSparseControlNetPipeline`: the latent noise (FreeNoise falls through)."""
    if getattr(pipe, "free_noise_enabled", False):
        raise Unpredictable(
            "FreeNoise is enabled: its latents may be shuffled with torch.randperm on the "
            "generator",
            "free-noise",
        )
    height, width = _height_width(pipe, args)
    scale = int(pipe.vae_scale_factor)
    batch = prompt_batch_size(args)  # `num_videos_per_prompt` is forced to 1 by the pipeline
    channels = int(pipe.unet.config.in_channels)
    shape = (batch, channels, int(args["num_frames"]), height // scale, width // scale)
    return [PlannedDraw("noise", shape, _prompt_dtype(pipe, args), draw_generators(gens, batch))]


def plan_animatediff_sdxl(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`AnimateDiffSDXLPipeline`: the latent noise, in the second text encoder's dtype."""
    unet = require_attr(pipe, "unet")
    scale = int(pipe.vae_scale_factor)
    height = int(args["height"] or pipe.default_sample_size * scale)
    width = int(args["width"] or pipe.default_sample_size * scale)
    batch = prompt_batch_size(args)  # `num_videos_per_prompt` is forced to 1 by the pipeline
    encoder = getattr(pipe, "text_encoder_2", None)
    dtype: torch.dtype = (encoder if encoder is not None else unet).dtype
    frames = int(args["num_frames"])
    shape = (batch, int(unet.config.in_channels), frames, height // scale, width // scale)
    return [PlannedDraw("noise", shape, dtype, draw_generators(gens, batch))]


def _frames_of(item: object) -> int | None:
    """Frames of one video: a list of PIL images, or a 4D tensor / array (frames first)."""
    import numpy as np
    import PIL.Image

    if isinstance(item, list) and item and all(isinstance(f, PIL.Image.Image) for f in item):
        return len(item)
    if isinstance(item, torch.Tensor | np.ndarray) and item.ndim == 4:
        return int(item.shape[0])
    return None


def video_layout(video: object) -> tuple[int, int]:
    """`(videos, frames)` of a video-to-video `video` argument, as `preprocess_video` reads it:
    one video (a list of PIL frames, a 4D tensor or array) or several (a list of those, a 5D
    tensor or array); every video must have the same frame count."""
    import numpy as np

    single = _frames_of(video)
    if single is not None:
        return 1, single
    if isinstance(video, torch.Tensor | np.ndarray) and video.ndim == 5:
        return int(video.shape[0]), int(video.shape[1])
    if isinstance(video, list) and video:
        frames = [_frames_of(v) for v in video]
        if None not in frames and len(set(frames)) == 1:
            return len(video), int(frames[0])  # type: ignore[arg-type]
    raise Unpredictable(f"cannot tell the videos of a {type(video).__name__}", "video-layout")


def plan_animatediff_v2v(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`AnimateDiffVideoToVideoPipeline` and `AnimateDiffVideoToVideoControlNetPipeline`: a VAE
    posterior sample per video chunk, then the frames-first noise."""
    vae = require_attr(pipe, "vae")
    if f"{type(vae).__module__}.{type(vae).__qualname__}" != _AUTOENCODER_KL:
        raise Unpredictable(f"VAE {type(vae).__name__} is not an AutoencoderKL", "vae-class")
    height, width = _height_width(pipe, args)
    scale = int(pipe.vae_scale_factor)
    batch = prompt_batch_size(args)  # `num_videos_per_prompt` is forced to 1 by the pipeline
    videos, frames = video_layout(args.get("video"))
    chunk = args["decode_chunk_size"]
    if not isinstance(chunk, int) or chunk < 1:
        raise Unpredictable(f"decode_chunk_size={chunk!r}", "decode-chunk-size")
    if videos < batch:
        raise Unpredictable(f"{videos} video(s) for {batch} prompt(s)", "video-count")
    if isinstance(args.get("generator"), list):
        if len(gens) != batch:  # the pipeline raises before drawing
            raise Unpredictable(f"{len(gens)} generators for batch {batch}", "generator-count")
        per_video: list[tuple[torch.Generator, ...]] = [(g,) for g in gens]
    else:
        per_video = [gens] * videos
    latent = (int(vae.config.latent_channels), height // scale, width // scale)
    sample_dtype: torch.dtype = torch.float32 if vae.config.force_upcast else vae.dtype
    draws = [
        PlannedDraw(
            f"video_sample_{v}_{c}",
            (min(chunk, frames - start), *latent),
            sample_dtype,
            g,
            module=VAE_MODULE,
        )
        for v, g in enumerate(per_video)
        for c, start in enumerate(range(0, frames, chunk))
    ]
    rows = len(per_video)
    noise = PlannedDraw("noise", (rows, frames, *latent), pipe.dtype, draw_generators(gens, rows))
    return [*draws, noise]
