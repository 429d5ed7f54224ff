"""Tiny ConsisID pipeline (registered in `diffusers_tiny`): the tiny CogVideoX parts of
`diffusers_tiny.cogvideox()` with a one-layer identity-preserving transformer (diffusers' own
fast-test sizes), seeded random weights, offline; the released `CogVideoXDPMScheduler`, whose
steps draw from the caller's generator.
"""

from __future__ import annotations

from typing import Any

import diffusers_tiny
import torch
from diffusers_tiny import _seeded, image, t5_encoder, tokenizer


def consisid(scheduler: Any = None) -> Any:
    from diffusers import AutoencoderKLCogVideoX, CogVideoXDPMScheduler, ConsisIDTransformer3DModel

    # from its module: without OpenCV `diffusers.ConsisIDPipeline` is a placeholder that refuses
    # to build, while the module itself needs cv2 only for `kps_cond` (`draw_kps`)
    from diffusers.pipelines.consisid.pipeline_consisid import ConsisIDPipeline

    with _seeded():
        transformer = ConsisIDTransformer3DModel(
            num_attention_heads=2,
            attention_head_dim=16,
            in_channels=8,
            out_channels=4,
            time_embed_dim=2,
            text_embed_dim=32,
            num_layers=1,
            sample_width=2,
            sample_height=2,
            sample_frames=9,
            patch_size=2,
            temporal_compression_ratio=4,
            max_text_seq_length=16,
            use_rotary_positional_embeddings=True,
            use_learned_positional_embeddings=True,
            cross_attn_interval=1,
            is_kps=False,
            is_train_face=True,
            cross_attn_dim_head=1,
            cross_attn_num_heads=1,
            LFE_id_dim=2,
            LFE_vit_dim=2,
            LFE_depth=5,
            LFE_dim_head=8,
            LFE_num_heads=2,
            LFE_num_id_token=1,
            LFE_num_querie=1,
            LFE_output_dim=21,
            LFE_ff_mult=1,
            LFE_num_scale=1,
        ).eval()
        vae = AutoencoderKLCogVideoX(
            in_channels=3,
            out_channels=3,
            down_block_types=("CogVideoXDownBlock3D",) * 4,
            up_block_types=("CogVideoXUpBlock3D",) * 4,
            block_out_channels=(8, 8, 8, 8),
            latent_channels=4,
            layers_per_block=1,
            norm_num_groups=2,
            temporal_compression_ratio=4,
        ).eval()
        encoder = t5_encoder()
    return ConsisIDPipeline(
        tokenizer=tokenizer(),
        text_encoder=encoder,
        vae=vae,
        transformer=transformer,
        scheduler=scheduler or CogVideoXDPMScheduler(),
    )


def identity() -> dict[str, Any]:
    """Made-up features of one face, of the shapes the tiny transformer takes (`LFE_vit_dim` 2,
    `LFE_id_dim` 2): one row, which the face cross-attention broadcasts over the batch."""
    return {"id_vit_hidden": [torch.ones([1, 2, 2])], "id_cond": torch.ones(1, 2)}


def _kwargs(prompts: int) -> dict[str, Any]:
    return {
        "image": image(0, 16) if prompts == 1 else [image(i, 16) for i in range(prompts)],
        "num_frames": 8,
        "height": 16,
        "width": 16,
        "num_inference_steps": 2,
        "guidance_scale": 6.0,
        "negative_prompt": "bad" if prompts == 1 else ["bad"] * prompts,
        "max_sequence_length": 16,
        "output_type": "pt",
        **identity(),
    }


diffusers_tiny.BUILDERS.update(consisid=consisid)
diffusers_tiny.CALL_KWARGS.update(consisid=_kwargs)
