"""Tiny EasyAnimate pipelines (text-to-video, control, inpaint), registered in `diffusers_tiny`.

A Qwen2-VL text encoder (hidden size 16, two layers) with the tiny word-level tokenizer given a
chat template, a Magvit VAE (/8 spatial, /4 temporal, 4 latent channels) and a one-layer
transformer, with seeded random weights, offline.
"""

from __future__ import annotations

from typing import Any

import diffusers_tiny
import torch
from diffusers_tiny import WORDS, _seeded, tokenizer

CHAT_TEMPLATE = (
    "{% for m in messages %}{% for c in m['content'] %}{{ c['text'] }}{% endfor %}{% endfor %}"
)


def qwen2_vl_encoder() -> Any:
    """A tiny `Qwen2VLForConditionalGeneration` (text hidden size 16) with random weights."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    ids = {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 0}
    text = {
        "vocab_size": len(WORDS) + 3,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 64,
        "rope_scaling": {"type": "mrope", "mrope_section": [1, 1, 2]},
        **ids,
    }
    vision = {
        "depth": 1,
        "embed_dim": 16,
        "hidden_size": 16,
        "num_heads": 2,
        "mlp_ratio": 1,
        "patch_size": 2,
        "spatial_merge_size": 1,
        "temporal_patch_size": 1,
    }
    config = Qwen2VLConfig(text_config=text, vision_config=vision, **ids)
    return Qwen2VLForConditionalGeneration(config).eval()


def chat_tokenizer() -> Any:
    tok = tokenizer(16)
    tok.chat_template = CHAT_TEMPLATE
    return tok


def magvit() -> Any:
    from diffusers import AutoencoderKLMagvit

    return AutoencoderKLMagvit(
        in_channels=3,
        out_channels=3,
        down_block_types=("SpatialDownBlock3D",) + ("SpatialTemporalDownBlock3D",) * 3,
        up_block_types=("SpatialUpBlock3D",) + ("SpatialTemporalUpBlock3D",) * 3,
        block_out_channels=(8, 8, 8, 8),
        latent_channels=4,
        layers_per_block=1,
        norm_num_groups=2,
        spatial_group_norm=False,
    ).eval()


def easyanimate(kind: str = "t2v", scheduler: Any = None) -> Any:
    """`EasyAnimatePipeline` (`kind="t2v"`), `EasyAnimateControlPipeline` ("control") or
    `EasyAnimateInpaintPipeline` ("inpaint": the latents, the VAE-encoded mask and the masked
    video, 4 channels each; `resize_inpaint_mask_directly` off, since that path reads a
    `cache_mag_vae` the Magvit VAE config does not have)."""
    from diffusers import (
        EasyAnimateControlPipeline,
        EasyAnimateInpaintPipeline,
        EasyAnimatePipeline,
        EasyAnimateTransformer3DModel,
        FlowMatchEulerDiscreteScheduler,
    )

    in_channels = {"t2v": 4, "control": 12, "inpaint": 12}[kind]
    with _seeded():
        transformer = EasyAnimateTransformer3DModel(
            num_attention_heads=2,
            attention_head_dim=16,
            in_channels=in_channels,
            out_channels=4,
            time_embed_dim=2,
            text_embed_dim=16,
            num_layers=1,
            mmdit_layers=1,
            sample_width=32,
            sample_height=32,
            patch_size=2,
            resize_inpaint_mask_directly=False,
        ).eval()
        vae = magvit()
        encoder = qwen2_vl_encoder()
    cls = {
        "t2v": EasyAnimatePipeline,
        "control": EasyAnimateControlPipeline,
        "inpaint": EasyAnimateInpaintPipeline,
    }[kind]
    return cls(
        vae=vae,
        text_encoder=encoder,
        tokenizer=chat_tokenizer(),
        transformer=transformer,
        scheduler=scheduler or FlowMatchEulerDiscreteScheduler(),
    )


def stochastic_easyanimate() -> Any:
    """EasyAnimate with flow-match Euler in stochastic sampling: one draw per step."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    return easyanimate(scheduler=FlowMatchEulerDiscreteScheduler(stochastic_sampling=True))


def video(seed: int = 0, batch: int = 1, frames: int = 5, size: int = 32) -> torch.Tensor:
    """A `(B, 3, F, H, W)` video in [0, 1], as `get_image_to_video_latent` makes it."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand((batch, 3, frames, size, size), generator=g)


def mask_video(batch: int = 1, frames: int = 5, size: int = 32, keep_first: bool = True) -> Any:
    """A `(B, 1, F, H, W)` inpaint mask: 255 (generate) everywhere but on the first frame when
    `keep_first` (0: keep it)."""
    mask = torch.full((batch, 1, frames, size, size), 255.0)
    if keep_first:
        mask[:, :, 0] = 0.0
    return mask


diffusers_tiny.BUILDERS.update(
    easyanimate=easyanimate,
    easyanimate_stochastic=stochastic_easyanimate,
    easyanimate_control=lambda: easyanimate("control"),
    easyanimate_inpaint=lambda: easyanimate("inpaint"),
)

_BASE = {
    "num_frames": 5,
    "height": 32,
    "width": 32,
    "num_inference_steps": 2,
    "guidance_scale": 5.0,
    "negative_prompt": "bad",
    "output_type": "pt",
}


def _base(prompts: int) -> dict[str, Any]:
    # a str negative prompt is encoded once, whatever the batch: one per prompt
    return {**_BASE, "negative_prompt": "bad" if prompts == 1 else ["bad"] * prompts}


def _inpaint(prompts: int) -> dict[str, Any]:
    """One video per prompt (`__call__` takes the batch from `video.shape`). With several prompts
    the mask keeps nothing: the masked-video noise (`add_noise_to_reference_video`) calls
    `torch.randn(generator=<list>)`, which raises for the generator list those calls get."""
    mask = mask_video(prompts, keep_first=prompts == 1)
    kwargs = {**_base(prompts), "video": video(0, prompts), "mask_video": mask}
    del kwargs["num_frames"]  # the default (49) is overridden by the video's 5 frames
    return kwargs


diffusers_tiny.CALL_KWARGS.update(
    easyanimate=_base,
    easyanimate_stochastic=_base,
    easyanimate_control=lambda prompts: {**_base(prompts), "control_video": video()},
    easyanimate_inpaint=_inpaint,
)
