"""Tiny diffusers pipelines built offline from small configs with seeded random weights.

What `prenoise demo diffusers` runs (`integrations/diffusers/demo.py`), and what the diffusers
integration tests build on (`tests/integrations/diffusers_tiny.py` imports these): no
checkpoint, no hub access, no file read, nothing downloaded. Every model is made from a config
(`transformers` / `diffusers` classes) with random weights, and the tokenizer is a word-level
one over `WORDS` built here, so neither a vocabulary file nor `ftfy` is needed: the pipelines
built here (Wan 2.1 text-to-video, LTX-2 and its modular pipeline) do not call `ftfy` (diffusers'
Wan image-to-video, VACE, Animate, SkyReels-V2 and modular Wan modules call `ftfy.fix_text`
without importing it when ftfy is not installed: the tests give those an identity stub).

Every builder seeds the global RNG inside `torch.random.fork_rng()` (`seeded`), so building
never changes the caller's global RNG state and two builds are identical. Needs diffusers and
transformers (with `tokenizers`), imported when a builder runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast, T5EncoderModel

__all__ = [
    "WORDS",
    "gemma3_encoder",
    "ltx2",
    "ltx2_modular",
    "ltx2_modular_call_kwargs",
    "modular",
    "seeded",
    "t5_encoder",
    "tokenizer",
    "wan",
    "wan_call_kwargs",
]

WORDS = [
    "a",
    "cat",
    "dog",
    "monkey",
    "dance",
    "on",
    "the",
    "moon",
    "red",
    "blue",
    "negative",
    "bad",
    "video",
    "of",
    "in",
    "sky",
]


def tokenizer(max_length: int = 16) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over `WORDS`, built here: no vocabulary file, no download."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=max_length,
    )


def t5_encoder(d_model: int = 32) -> T5EncoderModel:
    """A two-layer T5 encoder over `WORDS` with random weights (seed them: `seeded`)."""
    from transformers import T5Config, T5EncoderModel

    config = T5Config(
        vocab_size=len(WORDS) + 3,
        d_model=d_model,
        d_ff=37,
        d_kv=8,
        num_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
    )
    return T5EncoderModel(config).eval()


@contextmanager
def seeded(seed: int = 0) -> Iterator[None]:
    """The global RNG seeded with `seed` inside, restored on exit (`torch.random.fork_rng`)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def wan(ti2v: bool = False, image_to_video: bool = False) -> Any:
    """WanPipeline (2.1: 16 latent channels, /8) or its 2.2 TI2V layout (48 channels, /16)."""
    from diffusers import (
        AutoencoderKLWan,
        FlowMatchEulerDiscreteScheduler,
        WanImageToVideoPipeline,
        WanPipeline,
        WanTransformer3DModel,
    )

    z_dim = 48 if ti2v else 16
    with seeded():
        vae_kwargs: dict[str, Any] = {
            "base_dim": 3 if not ti2v else 8,
            "z_dim": z_dim,
            "dim_mult": [1, 1, 1, 1],
            "num_res_blocks": 1,
            "temperal_downsample": [False, True, True],
            "latents_mean": [0.0] * z_dim,
            "latents_std": [1.0] * z_dim,
        }
        if ti2v:
            vae_kwargs.update(
                is_residual=True,
                in_channels=12,
                out_channels=12,
                patch_size=2,
                scale_factor_spatial=16,
            )
        vae = AutoencoderKLWan(**vae_kwargs).eval()  # type: ignore[attr-defined]
        in_channels = z_dim * 2 + 4 if image_to_video and not ti2v else z_dim
        transformer = WanTransformer3DModel(  # type: ignore[attr-defined]
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=12,
            in_channels=in_channels,
            out_channels=z_dim,
            text_dim=32,
            freq_dim=256,
            ffn_dim=32,
            num_layers=2,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            rope_max_seq_len=32,
        ).eval()
        encoder = t5_encoder()
    cls = WanImageToVideoPipeline if image_to_video else WanPipeline
    return cls(
        tokenizer=tokenizer(),
        text_encoder=encoder,
        vae=vae,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0),
        transformer=transformer,
        expand_timesteps=ti2v,
    )


def gemma3_encoder(hidden_size: int = 16, layers: int = 2) -> Any:
    """A tiny `Gemma3ForConditionalGeneration` (LTX-2's text encoder) with random weights."""
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3TextConfig,
        SiglipVisionConfig,
    )

    text = Gemma3TextConfig(
        vocab_size=len(WORDS) + 3,
        hidden_size=hidden_size,
        intermediate_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        max_position_embeddings=64,
        sliding_window=8,
    )
    vision = SiglipVisionConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=16,
        patch_size=4,
    )
    config = Gemma3Config(
        text_config=text.to_dict(), vision_config=vision.to_dict(), mm_tokens_per_image=4
    )
    return Gemma3ForConditionalGeneration(config).eval()


def ltx2(duration_head: bool = False, timestep_conditioning: bool = True) -> Any:
    """LTX-2 video + audio. The VAE's `timestep_conditioning` makes the decode draw its noise."""
    from diffusers import (
        AutoencoderKLLTX2Audio,
        AutoencoderKLLTX2Video,
        FlowMatchEulerDiscreteScheduler,
        LTX2Pipeline,
        LTX2VideoTransformer3DModel,
    )
    from diffusers.pipelines.ltx2 import LTX2DurationHead, LTX2TextConnectors
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    hidden, layers = 16, 2
    with seeded():
        encoder = gemma3_encoder(hidden, layers)
        transformer = LTX2VideoTransformer3DModel(  # type: ignore[attr-defined]
            in_channels=4,
            out_channels=4,
            patch_size=1,
            patch_size_t=1,
            num_attention_heads=2,
            attention_head_dim=8,
            cross_attention_dim=16,
            audio_in_channels=4,
            audio_out_channels=4,
            audio_num_attention_heads=2,
            audio_attention_head_dim=4,
            audio_cross_attention_dim=8,
            num_layers=1,
            qk_norm="rms_norm_across_heads",
            caption_channels=hidden,
            rope_double_precision=False,
            rope_type="split",
        ).eval()
        connector = {
            "num_attention_heads": 2,  # heads × head_dim must equal caption_channels
            "attention_head_dim": 8,
            "num_layers": 1,
            "num_learnable_registers": None,
        }
        connectors = LTX2TextConnectors(
            caption_channels=hidden,
            text_proj_in_factor=layers + 1,
            **{f"video_connector_{k}": v for k, v in connector.items()},
            **{f"audio_connector_{k}": v for k, v in connector.items()},
            connector_rope_base_seq_len=32,
            rope_theta=10000.0,
            rope_double_precision=False,
            causal_temporal_positioning=False,
            rope_type="split",
        ).eval()
        vae = AutoencoderKLLTX2Video(  # type: ignore[attr-defined]
            in_channels=3,
            out_channels=3,
            latent_channels=4,
            block_out_channels=(8,),
            decoder_block_out_channels=(8,),
            layers_per_block=(1,),
            decoder_layers_per_block=(1, 1),
            spatio_temporal_scaling=(True,),
            decoder_spatio_temporal_scaling=(True,),
            decoder_inject_noise=(False, False),
            downsample_type=("spatial",),
            upsample_residual=(False,),
            upsample_factor=(1,),
            timestep_conditioning=timestep_conditioning,
            patch_size=1,
            patch_size_t=1,
            encoder_causal=True,
            decoder_causal=False,
        ).eval()
        vae.use_framewise_encoding = False
        vae.use_framewise_decoding = False
        audio_vae = AutoencoderKLLTX2Audio(  # type: ignore[attr-defined]
            base_channels=4,
            output_channels=2,
            ch_mult=(1,),
            num_res_blocks=1,
            attn_resolutions=None,
            in_channels=2,
            resolution=32,
            latent_channels=2,
            norm_type="pixel",
            causality_axis="height",
            dropout=0.0,
            mid_block_add_attention=False,
            sample_rate=16000,
            mel_hop_length=160,
            is_causal=True,
            mel_bins=8,
        ).eval()
        vocoder = LTX2Vocoder(
            in_channels=2 * 8,
            hidden_channels=32,
            out_channels=2,
            upsample_kernel_sizes=[4, 4],
            upsample_factors=[2, 2],
            resnet_kernel_sizes=[3],
            resnet_dilations=[[1, 3, 5]],
            leaky_relu_negative_slope=0.1,
            output_sampling_rate=16000,
        ).eval()
        head = (
            LTX2DurationHead(
                video_cross_attention_dim=hidden,
                audio_cross_attention_dim=hidden,
                pooler_hidden_dim=8,
                num_queries=1,
                num_pooler_heads=2,
                mlp_hidden_dim=8,
            ).eval()
            if duration_head
            else None
        )
    return LTX2Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae,
        audio_vae=audio_vae,
        text_encoder=encoder,
        tokenizer=tokenizer(),
        connectors=connectors,
        transformer=transformer,
        vocoder=vocoder,
        duration_head=head,
    )


def modular(cls: type, classic: Any, **extra: Any) -> Any:
    """A `cls()` modular pipeline (its default blocks) holding `classic`'s components (those its
    blocks declare) and `extra`. The class is instantiated rather than reached through
    `SomeBlocks().init_pipeline()`, which picks the class from the blocks' `model_name` alone."""
    pipe = cls()
    specs = pipe._component_specs
    components = {k: v for k, v in classic.components.items() if k in specs and v is not None}
    pipe.update_components(**components, **extra)
    return pipe


def ltx2_modular(duration_head: bool = False) -> Any:
    """`LTX2ModularPipeline` from `ltx2`'s components (its video VAE has
    `timestep_conditioning`, so the decode draws noise). The guiders are set to the legacy
    one-pass-per-step knobs the classic tiny calls use (no CFG, STG or modality guidance)."""
    from diffusers import LTX2ModularPipeline

    try:
        from diffusers.guiders import LTX2Guidance
    except ImportError:  # diffusers 0.40.0: in the LTX-2 modular package only
        from diffusers.modular_pipelines.ltx2.guider import LTX2Guidance  # type: ignore[no-redef]

    classic = ltx2(duration_head=duration_head)
    with seeded():
        guidance = {"guidance_scale": 1.0, "stg_scale": 0.0, "modality_scale": 1.0}
        return modular(
            LTX2ModularPipeline,
            classic,
            guider=LTX2Guidance(**guidance),
            audio_guider=LTX2Guidance(**guidance),
        )


PROMPT = "a cat dance on the moon"
"""The demo's prompt (every word is in `WORDS`)."""


def wan_call_kwargs(seed: int) -> dict[str, Any]:
    """A small `wan()` call: 9 frames of 32x32, 2 steps, classifier-free guidance, the frames
    returned as a tensor, and `generator=torch.Generator("cpu").manual_seed(seed)`."""
    return {
        "prompt": PROMPT,
        "negative_prompt": "bad",
        "height": 32,
        "width": 32,
        "num_frames": 9,
        "num_inference_steps": 2,
        "guidance_scale": 5.0,
        "max_sequence_length": 16,
        "output_type": "pt",
        "generator": torch.Generator("cpu").manual_seed(seed),
    }


def ltx2_modular_call_kwargs(seed: int) -> dict[str, Any]:
    """A small `ltx2_modular()` text-to-video + audio call (5 frames of 32x32, 2 steps), with
    `generator=torch.Generator("cpu").manual_seed(seed)`; the call returns the whole
    `PipelineState`, whose "videos" and "audio" are the decoded tensors."""
    return {
        "prompt": PROMPT,
        "negative_prompt": "bad",
        "height": 32,
        "width": 32,
        "num_frames": 5,
        "frame_rate": 25.0,
        "num_inference_steps": 2,
        "max_sequence_length": 16,
        "decode_timestep": 0.05,
        "decode_noise_scale": 0.025,
        "output_type": "pt",
        "generator": torch.Generator("cpu").manual_seed(seed),
    }
