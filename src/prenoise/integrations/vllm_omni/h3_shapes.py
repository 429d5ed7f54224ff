"""MiniMax-H3's visual-condition shapes predicted from the media plan, before anything encodes.

Upstream's own code decides them: images are `(1, H // 16, W // 16)` of the prepared image; a
video's frame count is what `MiniMaxH3VideoVAE._stream_prepare_video_tensor` stages (run on a
1x1-pixel meta stand-in of its frames) and its latent shape the checkpoint processor's
`get_latent_length` / `_align_to_total_patch_size` (the same as 0.32.0rc1's own
`predict_video_latent_shape`). A prediction is only ever used after the pipeline's actual
arguments equal it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from prenoise.preparation.draws import Draw, Stream
from prenoise.ref2va.noise import LatentShape

__all__ = ["guided_condition_streams", "predict_condition_shapes", "predict_guided_shapes"]

logger = logging.getLogger("prenoise.vllm_omni")


def predict_condition_shapes(pipeline: Any, media: Any) -> tuple[LatentShape, ...] | None:
    """The `(t, h, w)` of every visual condition, in encoding order, before encoding.

    Images: `(1, H // 16, W // 16)` of the prepared image, exactly what `encode_media` reports.
    Videos: the pipeline's own video-VAE code decides the frame count it encodes
    (`MiniMaxH3VideoVAE._stream_prepare_video_tensor`, run on a 1x1-pixel meta stand-in of the
    frames) and the checkpoint processor's `get_latent_length` and `_align_to_total_patch_size`
    give the latent shape. None when the checkpoint does not expose those methods.
    """
    shapes: list[LatentShape] = [
        (1, int(image.shape[0]) // 16, int(image.shape[1]) // 16) for image in media.images
    ]
    for video in media.videos:
        shape = _predict_video_shape(pipeline.video_vae, tuple(int(d) for d in video.shape))
        if shape is None:
            logger.info("prenoise: the video VAE does not expose its alignment methods")
            return None
        shapes.append(shape)
    return tuple(shapes)


def predict_guided_shapes(
    pipeline: Any, media: Any, guides: Sequence[Any]
) -> tuple[LatentShape, ...] | None:
    """A timeline-guided request's visual conditions, in upstream's merged order: every guide
    that carries frames (a still: `(1, H // 16, W // 16)` of the output canvas; a clip: the video
    VAE's latent length of its frames), then the request's own visual conditions
    (`predict_condition_shapes`). None when a clip's length cannot be predicted."""
    latent_h, latent_w = int(media.height) // 16, int(media.width) // 16
    shapes: list[LatentShape] = []
    for guide in guides:
        frames = getattr(guide, "frames", None)
        if frames is None:
            continue  # an audio-only guide has no visual rows
        if not getattr(guide, "is_clip", False):
            shapes.append((1, latent_h, latent_w))
            continue
        shape = _predict_video_shape(pipeline.video_vae, tuple(int(d) for d in frames.shape))
        if shape is None:
            return None
        shapes.append((shape[0], latent_h, latent_w))
    own = predict_condition_shapes(pipeline, media)
    return None if own is None else (*shapes, *own)


def guided_condition_streams(
    seed: int, condition_shapes: Sequence[LatentShape], *, noise_stream: str = "native"
) -> tuple[Stream, ...]:
    """The guided recipe's draws: per condition `randn((rows, 96))` from a generator seeded
    `seed` (each condition's own), as upstream 0.32.0rc1 draws them."""
    return tuple(
        Stream(
            f"visual_condition_noise.{k}",
            seed,
            (Draw(f"visual_condition_noise.{k}", (t * (h // 2) * (w // 2), 96)),),
            noise_stream=noise_stream,
        )
        for k, (t, h, w) in enumerate(condition_shapes)
    )


def _predict_video_shape(vae: Any, frames_shape: tuple[int, ...]) -> LatentShape | None:
    from vllm_omni.diffusion.models.minimax_h3 import vae as upstream_vae

    model = getattr(vae, "model", None)
    processor = getattr(model, "processor", None)
    latent_length = getattr(processor, "get_latent_length", None)
    align = getattr(processor, "_align_to_total_patch_size", None)
    ratio = getattr(model, "vae_ratio", None)
    if not (callable(latent_length) and callable(align) and isinstance(ratio, int)):
        return None
    if len(frames_shape) != 4:
        return None
    num_frames, height, width, _ = frames_shape
    encoded_frames = num_frames
    if not upstream_vae._legacy_encode_prep_enabled():
        stand_in = np.zeros((num_frames, 1, 1, 3), dtype=np.uint8)
        staged = vae._stream_prepare_video_tensor(stand_in, torch.device("meta"))
        if staged is not None:
            encoded_frames = int(staged.shape[1])
    aligned_h, aligned_w = align(height, width)
    return int(latent_length(encoded_frames)), int(aligned_h) // ratio, int(aligned_w) // ratio
