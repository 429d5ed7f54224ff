"""Tiny HunyuanVideo-1.5 pipelines: `HunyuanVideo15Pipeline` and its image-to-video variant.

Sizes follow diffusers' own fast test (a /4 spatial, /2 temporal VAE with 4 latent channels, a
one-layer transformer with `target_size=16`), with offline tokenizers: the shared word-level
tokenizer given a chat template that renders only the user turn (so the pipeline's prompt crop
is set to 0 and its token budgets to 16 on the tiny pipelines) and a plain `ByT5Tokenizer`.
"""

from __future__ import annotations

from typing import Any

import diffusers_tiny
from diffusers_tiny import WORDS, _seeded, tokenizer

CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ message['content'] }}{% endif %}{% endfor %}"
)


def qwen_tokenizer() -> Any:
    tok = tokenizer(16)
    tok.chat_template = CHAT_TEMPLATE
    return tok


def hunyuan_video15(image_to_video: bool = False, stochastic: bool = False) -> Any:
    """HunyuanVideo-1.5 with classifier-free guidance (guidance scale 2.0). `stochastic`: a
    flow-match Euler scheduler with `stochastic_sampling` (the pipeline calls `scheduler.step`
    without the generator, so it draws from the global RNG)."""
    from diffusers import (
        AutoencoderKLHunyuanVideo15,
        FlowMatchEulerDiscreteScheduler,
        HunyuanVideo15ImageToVideoPipeline,
        HunyuanVideo15Pipeline,
        HunyuanVideo15Transformer3DModel,
    )
    from diffusers.guiders import ClassifierFreeGuidance
    from transformers import (
        ByT5Tokenizer,
        Qwen2_5_VLTextConfig,
        Qwen2_5_VLTextModel,
        SiglipVisionConfig,
        SiglipVisionModel,
        T5Config,
        T5EncoderModel,
    )

    image_embed_dim = 12
    with _seeded():
        transformer = HunyuanVideo15Transformer3DModel(
            in_channels=9,
            out_channels=4,
            num_attention_heads=2,
            attention_head_dim=8,
            num_layers=1,
            num_refiner_layers=1,
            mlp_ratio=2.0,
            patch_size=1,
            patch_size_t=1,
            text_embed_dim=16,
            text_embed_2_dim=32,
            image_embed_dim=image_embed_dim,
            rope_axes_dim=(2, 2, 4),
            target_size=16,
            task_type="i2v" if image_to_video else "t2v",
        ).eval()
        vae = AutoencoderKLHunyuanVideo15(
            in_channels=3,
            out_channels=3,
            latent_channels=4,
            block_out_channels=(16, 16),
            layers_per_block=1,
            spatial_compression_ratio=4,
            temporal_compression_ratio=2,
            downsample_match_channel=False,
            upsample_match_channel=False,
        ).eval()
        qwen = Qwen2_5_VLTextModel(
            Qwen2_5_VLTextConfig(
                vocab_size=len(WORDS) + 3,
                hidden_size=16,
                intermediate_size=16,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=2,
                rope_scaling={
                    "mrope_section": [1, 1, 2],
                    "rope_type": "default",
                    "type": "default",
                },
                rope_theta=1000000.0,
            )
        ).eval()
        byt5 = T5EncoderModel(
            T5Config(
                vocab_size=384,  # ByT5's 256 bytes + 3 specials + 125 extra ids
                d_model=32,
                d_ff=37,
                d_kv=8,
                num_layers=1,
                num_heads=4,
                relative_attention_num_buckets=8,
            )
        ).eval()
        image_encoder = (
            SiglipVisionModel(
                SiglipVisionConfig(
                    hidden_size=image_embed_dim,
                    intermediate_size=16,
                    num_hidden_layers=1,
                    num_attention_heads=2,
                    image_size=16,
                    patch_size=4,
                )
            ).eval()
            if image_to_video
            else None
        )
    components: dict[str, Any] = {
        "text_encoder": qwen,
        "tokenizer": qwen_tokenizer(),
        "transformer": transformer,
        "vae": vae,
        "scheduler": FlowMatchEulerDiscreteScheduler(shift=7.0, stochastic_sampling=stochastic),
        "text_encoder_2": byt5,
        "tokenizer_2": ByT5Tokenizer(),
        "guider": ClassifierFreeGuidance(guidance_scale=2.0),
    }
    if image_to_video:
        from transformers import SiglipImageProcessor

        components["image_encoder"] = image_encoder
        components["feature_extractor"] = SiglipImageProcessor(
            size={"height": 16, "width": 16}, do_normalize=True
        )
        pipe: Any = HunyuanVideo15ImageToVideoPipeline(**components)
    else:
        pipe = HunyuanVideo15Pipeline(**components)
    # the tiny tokenizer renders only the user turn: nothing to crop, and short token budgets
    pipe.prompt_template_encode_start_idx = 0
    pipe.tokenizer_max_length = 16
    pipe.tokenizer_2_max_length = 16
    return pipe


diffusers_tiny.BUILDERS.update(
    hunyuan_video15=hunyuan_video15,
    hunyuan_video15_stochastic=lambda: hunyuan_video15(stochastic=True),
    hunyuan_video15_i2v=lambda: hunyuan_video15(image_to_video=True),
)


def _t2v_kwargs(prompts: int) -> dict[str, Any]:
    # One negative prompt per prompt: `encode_prompt` does not repeat a single one. A batch of
    # more than one video stays latent: the VAE's mid-block attention mask does not broadcast
    # over a batch (diffusers 0.40.0-0.42.1).
    return {
        "negative_prompt": ["bad"] * prompts if prompts > 1 else "bad",
        "num_inference_steps": 2,
        "height": 16,
        "width": 16,
        "num_frames": 5,
        "output_type": "latent" if prompts > 1 else "pt",
    }


def _i2v_kwargs(prompts: int) -> dict[str, Any]:
    kwargs = _t2v_kwargs(prompts)
    del kwargs["height"], kwargs["width"]  # taken from the image (the transformer's target size)
    return {**kwargs, "image": diffusers_tiny.image(0, 16)}


diffusers_tiny.CALL_KWARGS.update(
    hunyuan_video15=_t2v_kwargs,
    hunyuan_video15_stochastic=_t2v_kwargs,
    hunyuan_video15_i2v=_i2v_kwargs,
)
