"""MiniMax-H3 modular (`MiniMaxH3ModularPipeline`; workflows t2va, fl2va, ref2va).

Every draw is a float32 `randn_tensor` call in `minimax_h3/before_denoise.py` on the ONE
generator the request passes, after the text and VAE encoder blocks, in this order:

1. `MiniMaxH3PrepareConditionLatentsStep` (fl2va, ref2va): one draw per encoded visual
   condition, at its own shape `(1, C, T, h, w)`: each keyframe (fl2va), each image or video
   reference (ref2va), in packed order;
2. `MiniMaxH3PrepareLatentsStep`: the video noise `(1, C, T, H/r, W/r)` unless `latents` is
   given, then the audio rows `(A * channels, audio_latent_channels)` unless `audio_latents` is
   given (a given tensor skips its draw and the later draws move up).

The plan is made when the first encoder block starts, after the setup blocks ran: the canvas,
the aligned frame count and every normalized reference are then diffusers' own results in the
state (`MiniMaxH3ResizeStep`, `MiniMaxH3Ref2VASetupStep`), never recomputed here. What is
computed here is the encoded shape of each condition, from those normalized references with
diffusers' own geometry functions (`video_latent_num_frames`, the VAE's compression ratio and
chunking), the reference encoder's snap of a video down to `17 * n + 5` frames and, for a video
shorter than that, the VAE's padding to whole clips (`_video_latent_frames`); before any
condition draw is taken, the encoded condition latents are compared with it (`confirm_conditions`)
and a difference ends the plan (the plain draws run, the reason is in the report).

The encoders sample their posteriors from a fresh `torch.Generator().manual_seed(42)`
(`encode_vae_condition`): nothing but these draws uses the request's generator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from prenoise.integrations.diffusers.modular.plan import ModularPlan, declared_default
from prenoise.integrations.diffusers.plan import PlannedDraw, Unpredictable

__all__ = ["MINIMAX_H3", "PIPELINE_CLASS", "confirm_conditions", "plan_minimax_h3"]

PACKAGE = "diffusers.modular_pipelines.minimax_h3"
DRAW_MODULE = f"{PACKAGE}.before_denoise"
PIPELINE_CLASS = f"{PACKAGE}.modular_pipeline.MiniMaxH3ModularPipeline"
_ENCODERS = f"{PACKAGE}.encoders"
TRIGGERS = frozenset(
    f"{_ENCODERS}.{name}"
    for name in (
        "MiniMaxH3TextEncoderStep",
        "MiniMaxH3FL2VATextEncoderStep",
        "MiniMaxH3Ref2VATextEncoderStep",
        "MiniMaxH3KeyframeVaeEncoderStep",
        "MiniMaxH3Ref2VAReferenceEncoderStep",
    )
)
CONDITION_STEP = f"{DRAW_MODULE}.MiniMaxH3PrepareConditionLatentsStep"
LAYOUT_STEP = f"{DRAW_MODULE}.MiniMaxH3PrepareLayoutStep"


def _geometry() -> Any:
    from diffusers.modular_pipelines.minimax_h3 import modular_pipeline

    return modular_pipeline


def _draw(label: str, shape: tuple[int, ...], gens: tuple[torch.Generator, ...]) -> PlannedDraw:
    return PlannedDraw(label, shape, torch.float32, gens, module=DRAW_MODULE)


def _video_condition_frames(num_frames: int, frames_per_chunk: int, latents_per_chunk: int) -> int:
    """The reference encoder's frame count: snapped DOWN to `frames_per_chunk * n +
    latents_per_chunk`, at least one chunk (`MiniMaxH3Ref2VAReferenceEncoderStep`)."""
    chunks = max(1, (num_frames - latents_per_chunk) // frames_per_chunk)
    return chunks * frames_per_chunk + latents_per_chunk


def _video_latent_frames(pipe: Any, frames: int) -> int:
    """The latent frames the reference encoder gets for a normalized video of `frames` frames.

    It encodes `frames[:snapped]`: `snapped` frames when the video has them (diffusers'
    `video_latent_num_frames`), else all `frames` (a video shorter than `frames_per_chunk +
    latents_per_chunk`), which the VAE pads to whole `frames_per_chunk` clips, encodes to
    `latents_per_chunk` latent frames each and trims by its `token_drop`
    (`AutoencoderKLMiniMaxH3._encode`; one frame alone: one latent frame)."""
    fpc, lpc = int(pipe.vae_frames_per_chunk), int(pipe.vae_latents_per_chunk)
    encoded = min(frames, _video_condition_frames(frames, fpc, lpc))
    if encoded % fpc == lpc:
        return int(_geometry().video_latent_num_frames(encoded, fpc, lpc))
    if encoded == 1:
        return 1
    vae = getattr(pipe, "vae", None)
    if vae is None:
        raise Unpredictable("a short video reference and no VAE to read token_drop from", "vae")
    return -(-encoded // fpc) * lpc - int(vae.config.token_drop)


def _condition_shapes(pipe: Any, values: Mapping[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    channels = int(pipe.vae_latent_channels)
    ratio = int(pipe.vae_spatial_compression_ratio)
    references = values.get("normalized_references")
    if references is not None:
        shapes: list[tuple[str, tuple[int, ...]]] = []
        for index, reference in enumerate(references):
            if reference.kind == "image":
                width, height = reference.image.size
                shapes.append(
                    (f"condition.{index}", (1, channels, 1, height // ratio, width // ratio))
                )
            elif reference.kind == "video":
                frames, height, width = (int(n) for n in reference.frames.shape[:3])
                latent_frames = _video_latent_frames(pipe, frames)
                shape = (1, channels, latent_frames, height // ratio, width // ratio)
                shapes.append((f"condition.{index}", shape))
        return shapes
    keyframes = values.get("keyframes")
    if keyframes:
        return [
            (f"keyframe.{i}", (1, channels, 1, k.size[1] // ratio, k.size[0] // ratio))
            for i, k in enumerate(keyframes)
        ]
    return []


def _target_geometry(pipe: Any, values: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """(latent frames, latent height, latent width, audio latents) as the layout steps resolve
    them: a missing canvas is MiniMax-H3's own 16:9 one, the frame count aligned up."""
    geometry = _geometry()
    height, width = values.get("height"), values.get("width")
    if (height is None) != (width is None):
        raise Unpredictable("only one of height and width given", "size-half-given")
    if height is None:
        height, width = geometry.resolve_canvas_size(
            16,
            9,
            pipe.canvas_multiple,
            pipe.config.canvas_short_edge,
            pipe.config.canvas_max_pixels,
        )
    num_frames = values.get("num_frames")
    if num_frames is None:  # t2va: its layout step's own default
        num_frames = declared_default(pipe, LAYOUT_STEP, "num_frames")
    if not isinstance(num_frames, int) or not isinstance(height, int) or not isinstance(width, int):
        raise Unpredictable("num_frames / height / width are not ints", "size-type")
    fpc, lpc = int(pipe.vae_frames_per_chunk), int(pipe.vae_latents_per_chunk)
    aligned = geometry.align_num_frames(num_frames, fpc, lpc)
    ratio = int(pipe.vae_spatial_compression_ratio)
    latent_frames = geometry.video_latent_num_frames(aligned, fpc, lpc)
    return latent_frames, height // ratio, width // ratio, geometry.audio_latent_num_frames(aligned)


def plan_minimax_h3(
    pipe: Any, values: Mapping[str, Any], gens: tuple[torch.Generator, ...]
) -> list[PlannedDraw]:
    """Every draw of the call in order: the conditions, the video noise, the audio rows."""
    if len(gens) != 1:
        raise Unpredictable(f"{len(gens)} generators: MiniMax-H3 draws from one", "generator-count")
    planned = [_draw(label, shape, gens) for label, shape in _condition_shapes(pipe, values)]
    frames, latent_height, latent_width, audio_latents = _target_geometry(pipe, values)
    if values.get("latents") is None:
        channels = int(pipe.vae_latent_channels)
        planned.append(_draw("video", (1, channels, frames, latent_height, latent_width), gens))
    if values.get("audio_latents") is None:
        rows = audio_latents * int(pipe.audio_channels)
        planned.append(_draw("audio", (rows, int(pipe.audio_latent_channels)), gens))
    return planned


def confirm_conditions(values: Mapping[str, Any], planned: Sequence[PlannedDraw]) -> str | None:
    """Before the first condition draw: the encoded condition latents' shapes against the plan."""
    encoded = [tuple(int(s) for s in c.shape) for c in values.get("condition_latents") or ()]
    predicted = [p.shape for p in planned if p.label.startswith(("condition.", "keyframe."))]
    if encoded != predicted:
        return f"encoded condition shapes {encoded} differ from the predicted {predicted}"
    return None


MINIMAX_H3 = ModularPlan(
    family="MiniMax-H3",
    triggers=TRIGGERS,
    planner=plan_minimax_h3,
    confirms={CONDITION_STEP: confirm_conditions},
)
