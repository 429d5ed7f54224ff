"""Tiny AnimateDiff pipelines (text-to-video, video-to-video, SDXL, ControlNet, video-to-video
ControlNet, SparseCtrl): a two-block UNet with a motion adapter, CLIP text encoders, a two-block
`AutoencoderKL` (spatial factor 2) and DDIM, which draws at every step with `eta > 0` (the calls
pass `eta=0.5`)."""

from __future__ import annotations

from typing import Any

import torch
from diffusers_tiny import BUILDERS, CALL_KWARGS, WORDS, _seeded, image, tokenizer

SIZE = 16
FRAMES = 4


def clip_text_encoder(hidden_size: int = 16, with_projection: bool = False) -> Any:
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    config = CLIPTextConfig(
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=0,
        hidden_size=hidden_size,
        intermediate_size=37,
        num_attention_heads=4,
        num_hidden_layers=2,
        vocab_size=len(WORDS) + 3,
        projection_dim=hidden_size,
        max_position_embeddings=77,
    )
    cls = CLIPTextModelWithProjection if with_projection else CLIPTextModel
    return cls(config).eval()


def _vae(force_upcast: bool = True) -> Any:
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        block_out_channels=(8, 8),
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        latent_channels=4,
        norm_num_groups=2,
        sample_size=SIZE,
        force_upcast=force_upcast,
    ).eval()


def _ddim() -> Any:
    from diffusers import DDIMScheduler

    return DDIMScheduler(
        beta_start=0.00085, beta_end=0.012, beta_schedule="linear", clip_sample=False
    )


def _adapter() -> Any:
    from diffusers import MotionAdapter

    return MotionAdapter(
        block_out_channels=(8, 16),
        motion_layers_per_block=1,
        motion_norm_num_groups=2,
        motion_num_attention_heads=2,
        motion_max_seq_length=32,
    )


def _unet(**extra: Any) -> Any:
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel(
        block_out_channels=(8, 16),
        layers_per_block=1,
        sample_size=SIZE // 2,
        in_channels=4,
        out_channels=4,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=16,
        norm_num_groups=2,
        attention_head_dim=4,
        **extra,
    )


def animatediff(
    video_to_video: bool = False,
    dtype: torch.dtype = torch.float32,
    force_upcast: bool = True,
) -> Any:
    """`AnimateDiffPipeline` (or its video-to-video sibling) with DDIM, in `dtype`."""
    from diffusers import AnimateDiffPipeline, AnimateDiffVideoToVideoPipeline

    with _seeded():
        unet = _unet()
        adapter = _adapter()
        vae = _vae(force_upcast)
        encoder = clip_text_encoder()
    cls = AnimateDiffVideoToVideoPipeline if video_to_video else AnimateDiffPipeline
    pipe = cls(
        vae=vae,
        text_encoder=encoder,
        tokenizer=tokenizer(77),
        unet=unet,
        motion_adapter=adapter,
        scheduler=_ddim(),
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe.to(dtype) if dtype != torch.float32 else pipe


def animatediff_sdxl() -> Any:
    """`AnimateDiffSDXLPipeline`: two CLIP encoders (8 + 8 = the UNet's cross-attention width)
    and SDXL's text-time embedding."""
    from diffusers import AnimateDiffSDXLPipeline

    with _seeded():
        unet = _unet(
            use_linear_projection=True,
            addition_embed_type="text_time",
            addition_time_embed_dim=4,
            projection_class_embeddings_input_dim=6 * 4 + 8,  # 6 time ids × 4 + the pooled 8
        )
        adapter = _adapter()
        vae = _vae()
        encoder = clip_text_encoder(8)
        encoder_2 = clip_text_encoder(8, with_projection=True)
    pipe = AnimateDiffSDXLPipeline(
        vae=vae,
        text_encoder=encoder,
        text_encoder_2=encoder_2,
        tokenizer=tokenizer(77),
        tokenizer_2=tokenizer(77),
        unet=unet,
        motion_adapter=adapter,
        scheduler=_ddim(),
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _controlnet() -> Any:
    """A tiny `ControlNetModel`: its conditioning embedding halves the frames' size, as the VAE
    does."""
    from diffusers import ControlNetModel

    return ControlNetModel(
        block_out_channels=(8, 16),
        layers_per_block=1,
        in_channels=4,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        cross_attention_dim=16,
        norm_num_groups=2,
        attention_head_dim=4,
        conditioning_embedding_out_channels=(4, 8),
    )


def _unzeroed(controlnet: Any) -> Any:
    """`controlnet` with its zero-initialised convolutions (the conditioning input and the
    residual outputs) given small random weights, so that its conditioning reaches the output
    (call inside `_seeded`)."""
    with torch.no_grad():
        for parameter in controlnet.parameters():
            if not parameter.any():
                parameter.copy_(torch.randn_like(parameter) * 0.1)
    return controlnet


def animatediff_controlnet() -> Any:
    """`AnimateDiffControlNetPipeline` with a tiny `ControlNetModel`."""
    from diffusers import AnimateDiffControlNetPipeline

    with _seeded():
        unet = _unet()
        controlnet = _controlnet()
        adapter = _adapter()
        vae = _vae()
        encoder = clip_text_encoder()
    pipe = AnimateDiffControlNetPipeline(
        vae=vae,
        text_encoder=encoder,
        tokenizer=tokenizer(77),
        unet=unet,
        motion_adapter=adapter,
        controlnet=controlnet,
        scheduler=_ddim(),
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


def animatediff_v2v_controlnet(force_upcast: bool = True) -> Any:
    """`AnimateDiffVideoToVideoControlNetPipeline` with a tiny `ControlNetModel`."""
    from diffusers import AnimateDiffVideoToVideoControlNetPipeline

    with _seeded():
        unet = _unet()
        controlnet = _unzeroed(_controlnet())
        adapter = _adapter()
        vae = _vae(force_upcast)
        encoder = clip_text_encoder()
    pipe = AnimateDiffVideoToVideoControlNetPipeline(
        vae=vae,
        text_encoder=encoder,
        tokenizer=tokenizer(77),
        unet=unet,
        motion_adapter=adapter,
        controlnet=controlnet,
        scheduler=_ddim(),
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


def animatediff_sparsectrl(simplified: bool = False) -> Any:
    """`AnimateDiffSparseControlNetPipeline` with a tiny `SparseControlNetModel`.

    `simplified` (`use_simplified_condition_embedding`, the released checkpoints' setting): the
    conditioning frames are VAE-encoded (a posterior sample on the global RNG) and embedded by
    one convolution; without it, the RGB frames go through a conditioning embedding that halves
    their size, as the VAE does."""
    from diffusers import AnimateDiffSparseControlNetPipeline, SparseControlNetModel

    with _seeded():
        unet = _unet()
        controlnet = SparseControlNetModel(
            in_channels=4,
            conditioning_channels=4 if simplified else 3,
            down_block_types=("CrossAttnDownBlockMotion", "DownBlockMotion"),
            block_out_channels=(8, 16),
            layers_per_block=1,
            norm_num_groups=2,
            cross_attention_dim=16,
            attention_head_dim=4,
            conditioning_embedding_out_channels=(4, 8),
            motion_max_seq_length=32,
            motion_num_attention_heads=2,
            use_simplified_condition_embedding=simplified,
        )
        controlnet = _unzeroed(controlnet)
        adapter = _adapter()
        vae = _vae()
        encoder = clip_text_encoder()
    pipe = AnimateDiffSparseControlNetPipeline(
        vae=vae,
        text_encoder=encoder,
        tokenizer=tokenizer(77),
        unet=unet,
        motion_adapter=adapter,
        controlnet=controlnet,
        scheduler=_ddim(),
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


BUILDERS.update(
    animatediff=animatediff,
    animatediff_v2v_controlnet=animatediff_v2v_controlnet,
    animatediff_sparsectrl=animatediff_sparsectrl,
    animatediff_v2v=lambda: animatediff(video_to_video=True),
    animatediff_sdxl=animatediff_sdxl,
    animatediff_controlnet=animatediff_controlnet,
)


def video(seed: int = 0, frames: int = 3, size: int = SIZE) -> list[Any]:
    """One video: `frames` PIL images."""
    return [image(seed * 100 + f, size) for f in range(frames)]


def _negative(prompts: int) -> str | list[str]:
    return "bad" if prompts == 1 else ["bad"] * prompts


def _conditioning_frames(prompts: int) -> list[Any]:
    """`num_frames` conditioning frames: PIL images for one prompt; for several, each frame a
    `(prompts, 3, H, W)` tensor (a list of PIL frames is one video, which the pipeline does not
    repeat per prompt: its batch of prompts fails with it in the plain call)."""
    if prompts == 1:
        return video(7, FRAMES)
    g = torch.Generator().manual_seed(7)
    return [torch.rand((prompts, 3, SIZE, SIZE), generator=g) for _ in range(FRAMES)]


def _text_to_video(prompts: int) -> dict[str, Any]:
    return {
        "num_frames": FRAMES,
        "height": SIZE,
        "width": SIZE,
        "num_inference_steps": 2,
        "guidance_scale": 5.0,
        "negative_prompt": _negative(prompts),
        "eta": 0.5,
        "output_type": "pt",
    }


def _video_to_video(prompts: int) -> dict[str, Any]:
    return {
        "video": video() if prompts == 1 else [video(p) for p in range(prompts)],
        "height": SIZE,
        "width": SIZE,
        "num_inference_steps": 4,
        "strength": 0.5,
        "guidance_scale": 5.0,
        "negative_prompt": _negative(prompts),
        "eta": 0.5,
        "decode_chunk_size": 2,
        "output_type": "pt",
    }


def _v2v_conditioning_frames(prompts: int) -> list[Any]:
    """Video-to-video ControlNet frames: the 3 frames of the one video as PIL images; for
    several prompts (and videos) one `(3, 3, H, W)` tensor per video (the pipeline checks that
    there are as many of them as entries in `video`)."""
    if prompts == 1:
        return video(8)
    g = torch.Generator().manual_seed(8)
    return [torch.rand((3, 3, SIZE, SIZE), generator=g) for _ in range(prompts)]


CALL_KWARGS.update(
    animatediff=_text_to_video,
    animatediff_sdxl=_text_to_video,
    animatediff_controlnet=lambda prompts: {
        **_text_to_video(prompts),
        "conditioning_frames": _conditioning_frames(prompts),
    },
    animatediff_v2v=_video_to_video,
    animatediff_v2v_controlnet=lambda prompts: {
        **_video_to_video(prompts),
        "conditioning_frames": _v2v_conditioning_frames(prompts),
    },
    animatediff_sparsectrl=lambda prompts: {
        **_text_to_video(prompts),
        "conditioning_frames": [image(30), image(31)],
        "controlnet_frame_indices": [0, FRAMES - 1],
    },
)
