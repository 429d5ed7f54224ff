"""Tiny Sana-Video pipelines: `SanaVideoPipeline` and `SanaImageToVideoPipeline`.

A tiny Gemma2 text encoder, a tiny Wan VAE (/8 spatial, /4 temporal, 16 latent channels) and a
tiny `SanaVideoTransformer3DModel`, as diffusers' own fast tests build them (with the shared
word-level tokenizer instead of a hub one). `sample_size=30` is the 480p transformer's, so the
default `use_resolution_binning=True` is accepted; the call arguments turn binning off (its bins
are 448-896 px) except where a test asks for it.
"""

from __future__ import annotations

from typing import Any

import diffusers_tiny
from diffusers_tiny import WORDS, _seeded, tokenizer


def gemma2_encoder(hidden_size: int = 8) -> Any:
    from transformers import Gemma2Config, Gemma2Model

    config = Gemma2Config(
        head_dim=16,
        hidden_size=hidden_size,
        intermediate_size=32,
        max_position_embeddings=512,
        num_attention_heads=2,
        num_hidden_layers=1,
        num_key_value_heads=2,
        vocab_size=len(WORDS) + 3,
        attn_implementation="eager",
    )
    return Gemma2Model(config).eval()


def sana_video(image_to_video: bool = False, scheduler: str = "dpm", sample_size: int = 30) -> Any:
    """Sana-Video. `scheduler`: "dpm" (DPM-Solver++ multistep, the text-to-video pipeline's
    default class; deterministic), "sde" (DPM-Solver++ in SDE mode: draws at every step from
    the generator the pipeline hands to `scheduler.step`), "flow" (flow-match Euler, the
    image-to-video default) or "flow_sde" (flow-match Euler with `stochastic_sampling`)."""
    from diffusers import (
        AutoencoderKLWan,
        DPMSolverMultistepScheduler,
        FlowMatchEulerDiscreteScheduler,
        SanaImageToVideoPipeline,
        SanaVideoPipeline,
        SanaVideoTransformer3DModel,
    )

    with _seeded():
        vae = AutoencoderKLWan(
            base_dim=3,
            z_dim=16,
            dim_mult=[1, 1, 1, 1],
            num_res_blocks=1,
            temperal_downsample=[False, True, True],
            latents_mean=[0.0] * 16,
            latents_std=[1.0] * 16,
        ).eval()
        encoder = gemma2_encoder()
        transformer = SanaVideoTransformer3DModel(
            in_channels=16,
            out_channels=16,
            num_attention_heads=2,
            attention_head_dim=12,
            num_layers=2,
            num_cross_attention_heads=2,
            cross_attention_head_dim=12,
            cross_attention_dim=24,
            caption_channels=8,
            mlp_ratio=2.5,
            dropout=0.0,
            attention_bias=False,
            sample_size=sample_size,
            patch_size=(1, 2, 2),
            norm_elementwise_affine=False,
            norm_eps=1e-6,
            qk_norm="rms_norm_across_heads",
            rope_max_seq_len=64,
        ).eval()
    schedulers: dict[str, Any] = {
        "dpm": lambda: DPMSolverMultistepScheduler(),
        "sde": lambda: DPMSolverMultistepScheduler(algorithm_type="sde-dpmsolver++"),
        "flow": lambda: FlowMatchEulerDiscreteScheduler(shift=3.0),
        "flow_sde": lambda: FlowMatchEulerDiscreteScheduler(shift=3.0, stochastic_sampling=True),
    }
    cls = SanaImageToVideoPipeline if image_to_video else SanaVideoPipeline
    return cls(
        tokenizer=tokenizer(),
        text_encoder=encoder,
        vae=vae,
        transformer=transformer,
        scheduler=schedulers[scheduler](),
    )


diffusers_tiny.BUILDERS.update(
    sana_video=sana_video,
    sana_video_sde=lambda: sana_video(scheduler="sde"),
    sana_video_i2v=lambda: sana_video(image_to_video=True, scheduler="flow"),
    sana_video_i2v_sde=lambda: sana_video(image_to_video=True, scheduler="flow_sde"),
)


def _sana_kwargs(prompts: int) -> dict[str, Any]:
    del prompts
    return {
        "negative_prompt": "bad",
        "num_inference_steps": 2,
        "guidance_scale": 6.0,
        "height": 32,
        "width": 32,
        "frames": 9,
        "max_sequence_length": 16,
        "output_type": "pt",
        "complex_human_instruction": [],
        "use_resolution_binning": False,
    }


def _sana_i2v_kwargs(prompts: int) -> dict[str, Any]:
    return {**_sana_kwargs(prompts), "image": diffusers_tiny.image(0, 32)}


diffusers_tiny.CALL_KWARGS.update(
    sana_video=_sana_kwargs,
    sana_video_sde=_sana_kwargs,
    sana_video_i2v=_sana_i2v_kwargs,
    sana_video_i2v_sde=_sana_i2v_kwargs,
)
