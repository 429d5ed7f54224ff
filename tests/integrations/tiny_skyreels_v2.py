"""Tiny SkyReels-V2 pipelines (registered in `diffusers_tiny`): text-to-video, image-to-video and
diffusion forcing, on the Wan 2.1 VAE layout (16 latent channels, /8 spatial, /4 temporal) with
the released scheduler (`UniPCMultistepScheduler`, flow prediction), seeded, offline."""

from __future__ import annotations

from typing import Any

import diffusers_tiny
from diffusers_tiny import VIDEO, _seeded, image, t5_encoder, tokenizer
from tiny_wan_variants import _wan_vae, clip_vision, frames


def unipc() -> Any:
    """SkyReels-V2's scheduler: UniPC on flow sigmas (deterministic, stepped without generator)."""
    from diffusers import UniPCMultistepScheduler

    return UniPCMultistepScheduler(
        prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=8.0
    )


def _transformer(in_channels: int, **extra: Any) -> Any:
    from diffusers.models import SkyReelsV2Transformer3DModel

    return SkyReelsV2Transformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=12,
        in_channels=in_channels,
        out_channels=16,
        text_dim=32,
        freq_dim=256,
        ffn_dim=32,
        num_layers=2,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        rope_max_seq_len=32,
        **extra,
    ).eval()


def skyreels_v2(cls_name: str = "SkyReelsV2Pipeline") -> Any:
    """A text-to-video SkyReels-V2 pipeline (`cls_name`: also the diffusion-forcing ones)."""
    import diffusers

    with _seeded():
        vae = _wan_vae()
        transformer = _transformer(16)
        encoder = t5_encoder()
    return getattr(diffusers, cls_name)(
        tokenizer=tokenizer(),
        text_encoder=encoder,
        transformer=transformer,
        vae=vae,
        scheduler=unipc(),
    )


def skyreels_v2_i2v() -> Any:
    """`SkyReelsV2ImageToVideoPipeline`: 16 noise + 20 condition channels, CLIP image embeds."""
    from diffusers import SkyReelsV2ImageToVideoPipeline

    with _seeded():
        vae = _wan_vae()
        transformer = _transformer(36, image_dim=4)
        encoder = t5_encoder()
        image_encoder, image_processor = clip_vision()
    return SkyReelsV2ImageToVideoPipeline(
        tokenizer=tokenizer(),
        text_encoder=encoder,
        image_encoder=image_encoder,
        image_processor=image_processor,
        transformer=transformer,
        vae=vae,
        scheduler=unipc(),
    )


def _t2v_kwargs(prompts: int) -> dict[str, Any]:
    del prompts
    return {**VIDEO, "height": 32, "width": 32, "negative_prompt": "bad", "guidance_scale": 6.0}


def _i2v_kwargs(prompts: int) -> dict[str, Any]:
    del prompts  # one image conditions the whole batch
    return {**_t2v_kwargs(1), "image": image(5)}


def _df_kwargs(prompts: int) -> dict[str, Any]:
    del prompts
    return {**_t2v_kwargs(1), "num_frames": 9, "addnoise_condition": 0}


def _df_i2v_kwargs(prompts: int) -> dict[str, Any]:
    del prompts
    return {**_df_kwargs(1), "image": image(6)}


def _df_v2v_kwargs(prompts: int) -> dict[str, Any]:
    """Extend a 5-frame video by the last `overlap_history` frames' latents (one iteration)."""
    video: Any = frames(7, 5) if prompts == 1 else [frames(7 + i, 5) for i in range(prompts)]
    return {**_df_kwargs(1), "video": video, "overlap_history": 5}


DF = "SkyReelsV2DiffusionForcing"
diffusers_tiny.BUILDERS.update(
    skyreels_v2=skyreels_v2,
    skyreels_v2_i2v=skyreels_v2_i2v,
    skyreels_v2_df=lambda: skyreels_v2(f"{DF}Pipeline"),
    skyreels_v2_df_i2v=lambda: skyreels_v2(f"{DF}ImageToVideoPipeline"),
    skyreels_v2_df_v2v=lambda: skyreels_v2(f"{DF}VideoToVideoPipeline"),
)
diffusers_tiny.CALL_KWARGS.update(
    skyreels_v2=_t2v_kwargs,
    skyreels_v2_i2v=_i2v_kwargs,
    skyreels_v2_df=_df_kwargs,
    skyreels_v2_df_i2v=_df_i2v_kwargs,
    skyreels_v2_df_v2v=_df_v2v_kwargs,
)
