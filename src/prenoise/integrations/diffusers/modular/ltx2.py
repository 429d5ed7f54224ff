"""LTX-2 modular (`LTX2ModularPipeline`; text- and image-to-video): the video and audio noise.

Two float32 `randn_tensor` calls in `ltx2/before_denoise.py`, after every encoder, on the
request's generator: `LTX2PrepareLatentsStep` draws the video noise
`(B·N, transformer in_channels, (F-1)//t+1, H//s, W//s)` and `LTX2PrepareAudioLatentsStep` the
audio noise `(B·N, audio latent channels, L, mel_bins // mel compression)` with
`L = round(F / frame_rate · sampling_rate / hop_length / audio temporal compression)`. `B` is
the prompt count, `N` = `num_videos_per_prompt`, `H`, `W`, `frame_rate` the state's values or the
drawing block's declared defaults. Planned when `LTX2TextEncoderStep` starts (after the optional
prompt enhancer). The decode noise drawn later by the timestep-conditioned VAE decoder is left
to the pipeline (drawn plainly, after the prepared draws, from the generator they advanced).

Plain (`Unpredictable`): `num_frames=None` (a duration head predicts it after encoding),
`conditions` / `reference_conditions` (their tokens join the noise shape), caller `latents` or
`audio_latents` (they are noised in their own dtype and layout).
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

__all__ = ["LTX2", "PIPELINE_CLASS", "plan_ltx2"]

PACKAGE = "diffusers.modular_pipelines.ltx2"
DRAW_MODULE = f"{PACKAGE}.before_denoise"
PREPARE_LATENTS = f"{DRAW_MODULE}.LTX2PrepareLatentsStep"
PREPARE_AUDIO = f"{DRAW_MODULE}.LTX2PrepareAudioLatentsStep"
PIPELINE_CLASS = f"{PACKAGE}.modular_pipeline.LTX2ModularPipeline"
TEXT_ENCODER = f"{PACKAGE}.encoders.LTX2TextEncoderStep"


def _value(pipe: Any, values: Mapping[str, Any], block: str, name: str) -> Any:
    value = values.get(name)
    return declared_default(pipe, block, name) if value is None else value


def plan_ltx2(
    pipe: Any, values: Mapping[str, Any], gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """The video noise, then the audio noise."""
    for name in ("conditions", "reference_conditions", "latents", "audio_latents"):
        if values.get(name) is not None:
            raise Unpredictable(f"caller-supplied {name}", f"{name}-given")
    num_frames = values.get("num_frames")
    if num_frames is None:
        raise Unpredictable("num_frames=None: the length is predicted after encoding", "duration")
    transformer = getattr(pipe, "transformer", None)
    audio_vae = getattr(pipe, "audio_vae", None)
    if transformer is None or audio_vae is None:
        raise Unpredictable("pipeline has no transformer or audio VAE", "missing-component")
    batch = prompt_count(values) * per_prompt(values, "num_videos_per_prompt")
    generators = draw_generators(gens, batch)
    height = int(_value(pipe, values, PREPARE_LATENTS, "height"))
    width = int(_value(pipe, values, PREPARE_LATENTS, "width"))
    s, t = int(pipe.vae_spatial_compression_ratio), int(pipe.vae_temporal_compression_ratio)
    video = (
        batch,
        int(transformer.config.in_channels),
        (int(num_frames) - 1) // t + 1,
        height // s,
        width // s,
    )
    frame_rate = _value(pipe, values, PREPARE_AUDIO, "frame_rate")
    per_second = (
        pipe.audio_sampling_rate
        / pipe.audio_hop_length
        / float(pipe.audio_vae_temporal_compression_ratio)
    )
    audio_frames = round(int(num_frames) / frame_rate * per_second)
    mel = int(audio_vae.config.mel_bins) // int(pipe.audio_vae_mel_compression_ratio)
    audio = (batch, int(audio_vae.config.latent_channels), audio_frames, mel)
    return [
        PlannedDraw("video", video, torch.float32, generators, module=DRAW_MODULE),
        PlannedDraw("audio", audio, torch.float32, generators, module=DRAW_MODULE),
    ]


LTX2 = ModularPlan(family="LTX-2", triggers=frozenset({TEXT_ENCODER}), planner=plan_ltx2)
