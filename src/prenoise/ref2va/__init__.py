"""Ref2VA: the reference-to-video+audio model components, media I/O, checkpoints and recipes."""

from prenoise.ref2va.audio_vae import AudioVAE, AudioVAEConfig, latents_from_rows, latents_to_rows
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
from prenoise.ref2va.sampler import FlowEulerSampler, SamplingCancelled, StepInfo, sigma_schedule
from prenoise.ref2va.text_encoder import ByteTokenizer, TextEncoder, TextEncoderConfig
from prenoise.ref2va.transformer import JointTransformer, TransformerConfig, VelocityFn
from prenoise.ref2va.video_processor import VideoProcessor
from prenoise.ref2va.video_vae import VideoVAE, VideoVAEConfig

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
