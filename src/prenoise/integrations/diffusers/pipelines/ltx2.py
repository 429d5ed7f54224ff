"""LTX-2 (video + audio): `LTX2Pipeline` (diffusers 0.40.0–0.42.1).

After prompt encoding and the text connectors, a call draws, from the caller's generator(s):

1. the float32 video noise `(B, C, (F-1)//t+1, H//s, W//s)`, packed afterwards (`C`: the
   transformer's `in_channels`; `t`, `s`: the video VAE's compression);
2. the float32 audio noise `(B, C_a, L, M // r)`, packed afterwards: `C_a` and `M` are the audio
   VAE's `latent_channels` and `mel_bins`, `r` its mel compression, and
   `L = round(F / frame_rate · sample_rate / hop_length / t_a)`. With caller `audio_latents`
   `(B, C_a, L, M')` the pipeline still draws, through `_create_noised_state`: the noise of the
   packed latents `(B, L, C_a·M')` in their dtype;
3. when the output is decoded by a video VAE with `timestep_conditioning`, the decode noise, of
   the video noise's shape in the prompt-embeddings dtype, at the very end. Nothing touches the
   generator in between (both flow-matching schedulers are stepped without it) unless a
   `callback_on_step_end` could: then only the first two draws are planned.

Caller `latents` also draw through `_create_noised_state`; that case runs the plain call, as for
every pipeline. Two cases are not predicted and run the plain call:

- `num_frames=None` on a pipeline with a `duration_head`: the length (so every shape) is
  predicted from the connector outputs, which exist only after encoding;
- prompt enhancement (`enable_prompt_enhancement=True` with a `prompt`): it reseeds the global
  RNG (`torch.manual_seed`) and samples a new prompt with the enhancer before anything else.
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

__all__ = ["plan_ltx2"]

LEGACY_NUM_FRAMES = 121
"""`LTX2Pipeline`'s frame count when `num_frames=None` and there is no duration head."""


def _num_frames(pipe: Any, args: BoundCall) -> int:
    num_frames = args.get("num_frames")
    if num_frames is not None:
        return int(num_frames)
    if getattr(pipe, "duration_head", None) is not None:
        raise Unpredictable(
            "num_frames=None with a duration head: the length is predicted from the prompt "
            "embeddings, so no noise shape is known before encoding ends",
            "auto-duration",
        )
    return LEGACY_NUM_FRAMES


def _prompt_dtype(pipe: Any, args: BoundCall) -> torch.dtype:
    """dtype of `prompt_embeds` after encoding (negatives concatenated under guidance)."""

    def encoded(name: str) -> torch.dtype:
        embeds = args.get(name)
        if isinstance(embeds, torch.Tensor):
            return embeds.dtype
        dtype: torch.dtype = require_attr(pipe, "text_encoder").dtype
        return dtype

    dtype = encoded("prompt_embeds")
    guidance = float(args["guidance_scale"])
    audio_guidance = float(args.get("audio_guidance_scale") or guidance)
    if guidance > 1.0 or audio_guidance > 1.0:
        dtype = torch.promote_types(dtype, encoded("negative_prompt_embeds"))
    return dtype


def _audio_draw(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...], batch: int, num_frames: int
) -> PlannedDraw:
    audio_vae = require_attr(pipe, "audio_vae")
    given = args.get("audio_latents")
    if isinstance(given, torch.Tensor):
        if given.ndim != 4:
            raise Unpredictable(f"audio_latents with {given.ndim} dimensions", "audio-latents")
        b, c, length, mel = (int(n) for n in given.shape)
        shape: tuple[int, ...] = (b, length, c * mel)  # `_pack_audio_latents`
        return PlannedDraw("audio_noise", shape, given.dtype, draw_generators(gens, b))
    per_second = pipe.audio_sampling_rate / pipe.audio_hop_length
    per_second = per_second / float(pipe.audio_vae_temporal_compression_ratio)
    length = round(num_frames / float(args["frame_rate"]) * per_second)
    mel_bins = int(audio_vae.config.mel_bins) // int(pipe.audio_vae_mel_compression_ratio)
    shape = (batch, int(audio_vae.config.latent_channels), length, mel_bins)
    return PlannedDraw("audio_noise", shape, torch.float32, draw_generators(gens, batch))


def plan_ltx2(pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]) -> list[PlannedDraw]:
    """`LTX2Pipeline`: video noise, audio noise, then the decode noise when certain."""
    if args.get("enable_prompt_enhancement") and args.get("prompt") is not None:
        raise Unpredictable(
            "prompt enhancement reseeds the global RNG and samples a new prompt first",
            "prompt-enhancement",
        )
    num_frames = _num_frames(pipe, args)
    transformer = require_attr(pipe, "transformer")
    t = int(pipe.vae_temporal_compression_ratio)
    s = int(pipe.vae_spatial_compression_ratio)
    batch = prompt_batch_size(args) * per_prompt(args, "num_videos_per_prompt")
    shape = (
        batch,
        int(transformer.config.in_channels),
        (num_frames - 1) // t + 1,
        int(args["height"]) // s,
        int(args["width"]) // s,
    )
    video = PlannedDraw("noise", shape, torch.float32, draw_generators(gens, batch))
    draws = [video, _audio_draw(pipe, args, gens, batch, num_frames)]
    vae = require_attr(pipe, "vae")
    if (
        args.get("output_type") != "latent"
        and vae.config.timestep_conditioning
        and args.get("callback_on_step_end") is None
    ):
        draws.append(
            PlannedDraw("decode_noise", shape, _prompt_dtype(pipe, args), video.generators)
        )
    return draws
