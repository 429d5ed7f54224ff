"""Ref2VA: the reference-to-video+audio model components, media I/O, checkpoints and recipes.

Names are imported on first use (PEP 562), so `import prenoise.ref2va.config` and the CLI's
`--help` work without the `ref2va` extra (PyAV, Pillow, transformers, safetensors).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prenoise.ref2va.audio_vae import (
        AudioVAE,
        AudioVAEConfig,
        latents_from_rows,
        latents_to_rows,
    )
    from prenoise.ref2va.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
    from prenoise.ref2va.config import (
        ModelConfig,
        Recipe,
        RecipeError,
        ReferenceSpec,
        SyntheticSpec,
        load_recipe,
        recipe_from_dict,
    )
    from prenoise.ref2va.geometry import (
        RequestGeometry,
        align_frames_17k5,
        audio_latent_len,
        floor_size,
        frames_for_duration,
        latent_frames,
        patchify,
        size_from_short_edge,
        unpatchify,
    )
    from prenoise.ref2va.media import (
        MediaError,
        VideoInfo,
        iter_video_chunks,
        make_synthetic_reference,
        probe_video,
        read_audio,
        read_audio_if_any,
        read_image,
        write_image,
        write_mp4,
    )
    from prenoise.ref2va.models import Ref2VAModels
    from prenoise.ref2va.references import (
        EncodedReference,
        encode_reference,
        ensure_reference,
        predict_reference_shape,
    )
    from prenoise.ref2va.request_plan import Ref2VARequestPlan, plan_request
    from prenoise.ref2va.sampler import (
        FlowEulerSampler,
        SamplingCancelled,
        StepInfo,
        sigma_schedule,
    )
    from prenoise.ref2va.text_encoder import ByteTokenizer, TextEncoder, TextEncoderConfig
    from prenoise.ref2va.transformer import JointTransformer, TransformerConfig, VelocityFn
    from prenoise.ref2va.video_processor import VideoProcessor
    from prenoise.ref2va.video_vae import VideoVAE, VideoVAEConfig

_EXPORTS = {
    "AudioVAE": "prenoise.ref2va.audio_vae",
    "AudioVAEConfig": "prenoise.ref2va.audio_vae",
    "latents_from_rows": "prenoise.ref2va.audio_vae",
    "latents_to_rows": "prenoise.ref2va.audio_vae",
    "CheckpointError": "prenoise.ref2va.checkpoint",
    "load_checkpoint": "prenoise.ref2va.checkpoint",
    "save_checkpoint": "prenoise.ref2va.checkpoint",
    "ModelConfig": "prenoise.ref2va.config",
    "Recipe": "prenoise.ref2va.config",
    "RecipeError": "prenoise.ref2va.config",
    "ReferenceSpec": "prenoise.ref2va.config",
    "SyntheticSpec": "prenoise.ref2va.config",
    "load_recipe": "prenoise.ref2va.config",
    "recipe_from_dict": "prenoise.ref2va.config",
    "RequestGeometry": "prenoise.ref2va.geometry",
    "align_frames_17k5": "prenoise.ref2va.geometry",
    "audio_latent_len": "prenoise.ref2va.geometry",
    "floor_size": "prenoise.ref2va.geometry",
    "frames_for_duration": "prenoise.ref2va.geometry",
    "latent_frames": "prenoise.ref2va.geometry",
    "patchify": "prenoise.ref2va.geometry",
    "size_from_short_edge": "prenoise.ref2va.geometry",
    "unpatchify": "prenoise.ref2va.geometry",
    "MediaError": "prenoise.ref2va.media",
    "VideoInfo": "prenoise.ref2va.media",
    "iter_video_chunks": "prenoise.ref2va.media",
    "make_synthetic_reference": "prenoise.ref2va.media",
    "probe_video": "prenoise.ref2va.media",
    "read_audio": "prenoise.ref2va.media",
    "read_audio_if_any": "prenoise.ref2va.media",
    "read_image": "prenoise.ref2va.media",
    "write_image": "prenoise.ref2va.media",
    "write_mp4": "prenoise.ref2va.media",
    "Ref2VAModels": "prenoise.ref2va.models",
    "EncodedReference": "prenoise.ref2va.references",
    "encode_reference": "prenoise.ref2va.references",
    "ensure_reference": "prenoise.ref2va.references",
    "predict_reference_shape": "prenoise.ref2va.references",
    "Ref2VARequestPlan": "prenoise.ref2va.request_plan",
    "plan_request": "prenoise.ref2va.request_plan",
    "FlowEulerSampler": "prenoise.ref2va.sampler",
    "SamplingCancelled": "prenoise.ref2va.sampler",
    "StepInfo": "prenoise.ref2va.sampler",
    "sigma_schedule": "prenoise.ref2va.sampler",
    "ByteTokenizer": "prenoise.ref2va.text_encoder",
    "TextEncoder": "prenoise.ref2va.text_encoder",
    "TextEncoderConfig": "prenoise.ref2va.text_encoder",
    "JointTransformer": "prenoise.ref2va.transformer",
    "TransformerConfig": "prenoise.ref2va.transformer",
    "VelocityFn": "prenoise.ref2va.transformer",
    "VideoProcessor": "prenoise.ref2va.video_processor",
    "VideoVAE": "prenoise.ref2va.video_vae",
    "VideoVAEConfig": "prenoise.ref2va.video_vae",
}

__all__ = [
    "AudioVAE",
    "AudioVAEConfig",
    "ByteTokenizer",
    "CheckpointError",
    "EncodedReference",
    "FlowEulerSampler",
    "JointTransformer",
    "MediaError",
    "ModelConfig",
    "Recipe",
    "RecipeError",
    "Ref2VAModels",
    "Ref2VARequestPlan",
    "ReferenceSpec",
    "RequestGeometry",
    "SamplingCancelled",
    "StepInfo",
    "SyntheticSpec",
    "TextEncoder",
    "TextEncoderConfig",
    "TransformerConfig",
    "VelocityFn",
    "VideoInfo",
    "VideoProcessor",
    "VideoVAE",
    "VideoVAEConfig",
    "align_frames_17k5",
    "audio_latent_len",
    "encode_reference",
    "ensure_reference",
    "floor_size",
    "frames_for_duration",
    "iter_video_chunks",
    "latent_frames",
    "latents_from_rows",
    "latents_to_rows",
    "load_checkpoint",
    "load_recipe",
    "make_synthetic_reference",
    "patchify",
    "plan_request",
    "predict_reference_shape",
    "probe_video",
    "read_audio",
    "read_audio_if_any",
    "read_image",
    "recipe_from_dict",
    "save_checkpoint",
    "sigma_schedule",
    "size_from_short_edge",
    "unpatchify",
    "write_image",
    "write_mp4",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
