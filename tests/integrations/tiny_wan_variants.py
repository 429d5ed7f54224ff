"""Tiny Wan variants: video-to-video, VACE and Animate (registered in `diffusers_tiny`).

Each builder reuses the tiny Wan 2.1 parts of `diffusers_tiny.wan()` (16 latent channels, /8
spatial, /4 temporal) where the pipeline takes them, with seeded random weights, offline.
"""

from __future__ import annotations

from typing import Any

import diffusers_tiny
import numpy as np
import PIL.Image
from diffusers_tiny import VIDEO, _seeded, image, t5_encoder, tokenizer


def _wan_vae() -> Any:
    from diffusers import AutoencoderKLWan

    return AutoencoderKLWan(
        base_dim=3,
        z_dim=16,
        dim_mult=[1, 1, 1, 1],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
        latents_mean=[0.0] * 16,
        latents_std=[1.0] * 16,
    ).eval()


def wan_v2v() -> Any:
    """`WanVideoToVideoPipeline` on the tiny Wan 2.1 components."""
    from diffusers import WanVideoToVideoPipeline

    base = diffusers_tiny.wan()
    return WanVideoToVideoPipeline(
        tokenizer=base.tokenizer,
        text_encoder=base.text_encoder,
        transformer=base.transformer,
        vae=base.vae,
        scheduler=base.scheduler,
    )


def wan_vace() -> Any:
    """`WanVACEPipeline` (Wan 2.1 layout) with two VACE layers."""
    from diffusers import FlowMatchEulerDiscreteScheduler, WanVACEPipeline
    from diffusers.models import WanVACETransformer3DModel

    with _seeded():
        vae = _wan_vae()
        transformer = WanVACETransformer3DModel(
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=12,
            in_channels=16,
            out_channels=16,
            text_dim=32,
            freq_dim=256,
            ffn_dim=32,
            num_layers=3,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            rope_max_seq_len=32,
            vace_layers=[0, 2],
            vace_in_channels=96,  # 2 x 16 latent channels + the 8 x 8 mask channels
        ).eval()
        encoder = t5_encoder()
    return WanVACEPipeline(
        tokenizer=tokenizer(),
        text_encoder=encoder,
        vae=vae,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0),
        transformer=transformer,
    )


def clip_vision() -> tuple[Any, Any]:
    """A tiny CLIP image encoder (hidden size 4) and its processor (4 x 4 crops)."""
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModelWithProjection

    config = CLIPVisionConfig(
        hidden_size=4,
        projection_dim=4,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=4,
        intermediate_size=16,
        patch_size=1,
    )
    return CLIPVisionModelWithProjection(config).eval(), CLIPImageProcessor(crop_size=4, size=4)


def wan_animate() -> Any:
    """`WanAnimatePipeline` with a tiny motion / face encoder and CLIP image encoder."""
    from diffusers import FlowMatchEulerDiscreteScheduler, WanAnimatePipeline
    from diffusers.models import WanAnimateTransformer3DModel

    with _seeded():
        vae = _wan_vae()
        transformer = WanAnimateTransformer3DModel(
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=12,
            in_channels=36,
            latent_channels=16,
            out_channels=16,
            text_dim=32,
            freq_dim=256,
            ffn_dim=32,
            num_layers=2,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            image_dim=4,
            rope_max_seq_len=32,
            motion_encoder_channel_sizes={"4": 16, "8": 16, "16": 16},
            motion_encoder_size=16,
            motion_style_dim=8,
            motion_dim=4,
            motion_encoder_dim=16,
            face_encoder_hidden_dim=16,
            face_encoder_num_heads=2,
            inject_face_latents_blocks=2,
        ).eval()
        encoder = t5_encoder()
        image_encoder, image_processor = clip_vision()
    return WanAnimatePipeline(
        tokenizer=tokenizer(),
        text_encoder=encoder,
        vae=vae,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0),
        image_encoder=image_encoder,
        image_processor=image_processor,
        transformer=transformer,
    )


def frames(seed: int, count: int, size: int = 32) -> list[Any]:
    """`count` random RGB frames."""
    return [image(seed * 100 + i, size) for i in range(count)]


def masks(seed: int, count: int, size: int = 32) -> list[Any]:
    """`count` random black-and-white `L` masks."""
    rng = np.random.RandomState(seed)
    return [
        PIL.Image.fromarray(((rng.rand(size, size) > 0.5) * 255).astype("uint8"), mode="L")
        for _ in range(count)
    ]


def _v2v_kwargs(prompts: int) -> dict[str, Any]:
    video: Any = frames(0, 9) if prompts == 1 else [frames(i, 9) for i in range(prompts)]
    return {
        "video": video,
        "height": 32,
        "width": 32,
        "num_inference_steps": 3,
        "strength": 0.7,
        "negative_prompt": "bad",
        "guidance_scale": 5.0,
        "max_sequence_length": 16,
        "output_type": "pt",
    }


def _vace_kwargs(prompts: int) -> dict[str, Any]:
    del prompts  # WanVACEPipeline takes one prompt (and one generator) per call
    return {
        **VIDEO,
        "video": frames(1, 9),
        "mask": masks(1, 9),
        "height": 32,
        "width": 32,
        "negative_prompt": "bad",
        "guidance_scale": 5.0,
    }


def _animate_kwargs(prompts: int) -> dict[str, Any]:
    del prompts
    return {
        "image": image(2, 16),
        "pose_video": frames(3, 5, 16),
        "face_video": frames(4, 5, 16),
        "height": 16,
        "width": 16,
        "segment_frame_length": 5,
        "num_inference_steps": 2,
        "guidance_scale": 1.0,
        "max_sequence_length": 16,
        "output_type": "pt",
    }


diffusers_tiny.BUILDERS.update(wan_v2v=wan_v2v, wan_vace=wan_vace, wan_animate=wan_animate)
diffusers_tiny.CALL_KWARGS.update(
    wan_v2v=_v2v_kwargs, wan_vace=_vace_kwargs, wan_animate=_animate_kwargs
)
