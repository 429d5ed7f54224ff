"""Reference media of a recipe: create synthetic ones, predict their latent shapes, encode them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from prenoise.guards.cancel import CancelEvent
from prenoise.observe.tracing import NULL_TRACER, Category, Tracer
from prenoise.ref2va import media
from prenoise.ref2va.audio_vae import AudioVAE
from prenoise.ref2va.config import ReferenceSpec
from prenoise.ref2va.geometry import FPS
from prenoise.ref2va.limits import Limits
from prenoise.ref2va.video_processor import VideoProcessor
from prenoise.ref2va.video_vae import VideoVAE


@dataclass(frozen=True)
class EncodedReference:
    """Latents of one reference: visual ``[1, 24, t, h, w]`` and/or audio ``[1, 2, t, 32]``."""

    spec: ReferenceSpec
    video_latents: torch.Tensor | None
    audio_latents: torch.Tensor | None
    num_frames: int


def ensure_reference(spec: ReferenceSpec) -> Path:
    """Path of the reference, first writing it from ``spec.synthetic`` when it is missing."""
    path = Path(spec.path)
    if path.exists() or spec.synthetic is None:
        return path
    syn = spec.synthetic
    path.parent.mkdir(parents=True, exist_ok=True)
    if spec.kind == "video":
        return media.make_synthetic_reference(path, syn.seconds, syn.width, syn.height)
    if spec.kind == "image":
        first = next(media.synthetic_frames(1 / FPS, syn.width, syn.height))
        return media.write_image(path, first[0])
    return media.write_wav(path, media.synthetic_tone(syn.seconds, 16000), 16000)


def reference_frame_count(spec: ReferenceSpec, header: media.VideoInfo | None = None) -> int:
    """Frames a visual reference is expected to give at 24 fps (1 for an image), from headers.

    `header` is the video's already-read `probe_video` result (the file is probed otherwise).
    """
    if spec.kind == "image":
        return 1
    if spec.kind != "video":
        raise ValueError(f"{spec.path}: an {spec.kind} reference has no frames")
    frames = (header or media.probe_video(spec.path)).frames_at_24fps
    max_frames = truncated_frames(spec)
    if max_frames is not None:
        frames = min(frames, max_frames)
    return max(frames, 1)


def truncated_frames(spec: ReferenceSpec) -> int | None:
    """Frames at 24 fps that `spec.max_seconds` keeps (None: no truncation)."""
    if spec.max_seconds is None:
        return None
    # min() before round(): a huge max_seconds (1e308) must not become an astronomic count
    return round(min(spec.max_seconds, 2**40) * FPS)


def predict_reference_shape(
    spec: ReferenceSpec,
    processor: VideoProcessor,
    width: int,
    height: int,
    header: media.VideoInfo | None = None,
) -> tuple[int, int, int] | None:
    """Predicted visual latent ``(t, h, w)`` of a reference (None for audio references).

    `processor` is the video VAE's (`VideoVAE.processor`, or one built from the same config):
    the encoder calls the very same alignment and padding methods.
    """
    if not spec.is_visual:
        return None
    return processor.predict_latent_shape(reference_frame_count(spec, header), height, width)


def encode_reference(
    spec: ReferenceSpec,
    video_vae: VideoVAE,
    audio_vae: AudioVAE,
    width: int,
    height: int,
    chunk_frames: int = media.DEFAULT_CHUNK_FRAMES,
    tracer: Tracer = NULL_TRACER,
    *,
    limits: Limits | None = None,
    cancel: CancelEvent | None = None,
) -> EncodedReference:
    """Decode and encode one reference, streaming video chunks into the VAE.

    Decoding is recorded in `media_decode` spans (one per chunk, nested in the caller's span),
    bounded by `limits` while it runs and stopped between frames once `cancel` is set.
    """
    path = ensure_reference(spec)
    video = audio = None
    frames = 0
    if spec.kind == "image":
        with tracer.span("media_decode:image", Category.ENCODE):
            image = media.read_image(path, width, height, limits=limits)
        video = video_vae.encode_image(image, height, width)
        frames = 1
    elif spec.kind == "video":
        max_frames = truncated_frames(spec)
        counted: list[int] = []

        def chunks() -> Iterator[torch.Tensor]:
            decoded = media.iter_video_chunks(
                path, width, height, chunk_frames, FPS, max_frames, limits=limits, cancel=cancel
            )
            while True:
                with tracer.span("media_decode:video", Category.ENCODE):
                    chunk = next(decoded, None)
                if chunk is None:
                    return
                counted.append(int(chunk.shape[0]))
                yield chunk

        video = video_vae.encode_stream(chunks(), height, width)
        frames = sum(counted)
        if spec.use_audio:
            with tracer.span("media_decode:audio", Category.ENCODE):
                wav = media.read_audio_if_any(
                    path, audio_vae.sample_rate, spec.max_seconds, limits=limits, cancel=cancel
                )
            if wav is not None and wav.shape[1] >= audio_vae.config.hop:
                audio = audio_vae.encode(wav)
    else:
        with tracer.span("media_decode:audio", Category.ENCODE):
            wav = media.read_audio(
                path, audio_vae.sample_rate, spec.max_seconds, limits=limits, cancel=cancel
            )
        audio = audio_vae.encode(wav)
    return EncodedReference(spec=spec, video_latents=video, audio_latents=audio, num_frames=frames)
