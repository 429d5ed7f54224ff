"""`StableAudioPipeline`: the noise, then a VAE posterior sample of the initial audio.

The noise is `(B·n, C, sample_size)` with `n = num_waveforms_per_prompt`, `C` the transformer's
`in_channels`, in the dtype of the text + duration conditioning (the projection model's output,
concatenated with the prompt embeddings: their promoted dtype). With `initial_audio_waveforms`
the pipeline then samples the Oobleck VAE posterior of the `B` padded waveforms
(`diffusers.models.autoencoders.autoencoder_oobleck`, in the VAE's dtype) with the same
generator(s): as a whole-batch `randn_tensor` call, so with a generator list it uses the first `B`
of the `B·n` generators. That draw is planned when the list has exactly one generator per row of
it (`n = 1`) or a single generator is given; otherwise it is left to the pipeline.

The scheduler draws later, on the caller's generator objects, already advanced by the prepared
draws, exactly as in the plain call: the EDM DPM-Solver in SDE mode draws `randn_tensor` on every
step, and the released checkpoints' `CosineDPMSolverMultistepScheduler` seeds its Brownian tree
from `generator.initial_seed()`, which no draw changes. Neither is planned.

Checked on diffusers 0.40.0–0.42.1 (the draw code is the same in all four releases).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from prenoise.integrations.diffusers.plan import (
    BoundCall,
    PlannedDraw,
    draw_generators,
    per_prompt,
    prompt_batch_size,
    require_attr,
)

__all__ = ["OOBLECK_MODULE", "plan_stable_audio"]

OOBLECK_MODULE = "diffusers.models.autoencoders.autoencoder_oobleck"


def _module_dtype(module: Any) -> torch.dtype:
    dtype: torch.dtype = module.dtype
    return dtype


def _conditioning_dtype(pipe: Any, args: BoundCall) -> torch.dtype:
    """dtype of `text_audio_duration_embeds` (the `torch.cat` of prompt and duration embeds)."""
    projection = require_attr(pipe, "projection_model")
    projected = _module_dtype(projection)
    if not isinstance(projection.text_projection, torch.nn.Identity):
        return projected  # the text embeddings pass a Linear of the projection model
    text = _module_dtype(require_attr(pipe, "text_encoder"))
    embeds = args.get("prompt_embeds")
    dtype = embeds.dtype if isinstance(embeds, torch.Tensor) else text
    if float(args["guidance_scale"]) > 1.0:
        negative = args.get("negative_prompt_embeds")
        if isinstance(negative, torch.Tensor):
            dtype = torch.promote_types(dtype, negative.dtype)
        elif args.get("negative_prompt") is not None:
            dtype = torch.promote_types(dtype, text)
    return torch.promote_types(dtype, projected)


def _oobleck_length(vae: Any, samples: int) -> int:
    """Latent length of `samples` audio samples after the Oobleck encoder's strided convolutions."""
    length = samples
    for stride in vae.config.downsampling_ratios:
        stride = int(stride)
        padding = math.ceil(stride / 2)
        length = (length + 2 * padding - 2 * stride) // stride + 1
    return length


def plan_stable_audio(
    pipe: Any, args: BoundCall, gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """`StableAudioPipeline`: the noise, then the initial audio's VAE sample where exact."""
    transformer = require_attr(pipe, "transformer")
    prompts = prompt_batch_size(args)
    per = per_prompt(args, "num_waveforms_per_prompt")
    batch = prompts * per
    sample_size = int(transformer.config.sample_size)
    shape = (batch, int(transformer.config.in_channels), sample_size)
    noise = PlannedDraw(
        "noise", shape, _conditioning_dtype(pipe, args), draw_generators(gens, batch)
    )
    if args.get("initial_audio_waveforms") is None:
        return [noise]
    if len(gens) > 1 and len(gens) != prompts:
        return [noise]  # the sample uses the first `prompts` generators of a longer list
    vae = require_attr(pipe, "vae")
    latent = _oobleck_length(vae, sample_size * int(vae.hop_length))
    sample_shape = (prompts, int(vae.config.encoder_hidden_size) // 2, latent)
    sample = PlannedDraw(
        "audio_sample", sample_shape, _module_dtype(vae), gens, module=OOBLECK_MODULE
    )
    return [noise, sample]
