"""The encoding stage of a Ref2VA request: prompt and references → clean conditioning.

`Conditioning` is shared by every output of a request and never holds noise. It comes from the
local encoders (`encode_conditioning`), from another stage (`ExternalConditioning`, nothing is
encoded here), and may carry a continuation clip's latents (the first visual condition).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from prenoise.guards.cancel import CancelEvent
from prenoise.observe.tracing import NULL_TRACER, Category, Tracer
from prenoise.ref2va.audio_vae import latents_to_rows
from prenoise.ref2va.config import Recipe, ReferenceSpec
from prenoise.ref2va.geometry import FPS, RequestGeometry, patchify
from prenoise.ref2va.limits import Limits, describe_cap
from prenoise.ref2va.media import (
    MediaError,
    VideoInfo,
    check_audio_header,
    probe_video,
    read_image,
)
from prenoise.ref2va.models import Ref2VAModels
from prenoise.ref2va.references import encode_reference, ensure_reference, reference_frame_count

__all__ = [
    "Conditioning",
    "ExternalConditioning",
    "encode_conditioning",
    "validate_references",
]

LatentShape = tuple[int, int, int]


@dataclass
class ExternalConditioning:
    """Already-encoded conditioning handed over from another stage.

    `text` is `[1, L, d]`; `visual_latents` are `[1, 24, t, h, w]` each; `audio_latents` are
    `[1, 2, t, 32]` each.
    """

    text: torch.Tensor
    text_mask: torch.Tensor | None = None
    visual_latents: list[torch.Tensor] = field(default_factory=list)
    audio_latents: list[torch.Tensor] = field(default_factory=list)


@dataclass
class Conditioning:
    """Clean conditioning shared by all outputs of a request (no noise, ever)."""

    text: torch.Tensor
    text_mask: torch.Tensor | None
    visual_latents: list[torch.Tensor]
    audio_latents: list[torch.Tensor]

    @property
    def visual_shapes(self) -> list[LatentShape]:
        """Encoded `(t, h, w)` of each visual condition, in order."""
        return [(int(x.shape[2]), int(x.shape[3]), int(x.shape[4])) for x in self.visual_latents]

    def visual_rows(self) -> list[torch.Tensor]:
        """Patchified clean rows `[t·h/2·w/2, 96]` of each visual condition."""
        return [patchify(x) for x in self.visual_latents]

    def audio_rows(self) -> list[torch.Tensor]:
        """Clean rows `[2·t, 32]` (channel-major) of each audio condition."""
        return [latents_to_rows(x) for x in self.audio_latents]

    @classmethod
    def from_external(
        cls, external: ExternalConditioning, continuation: torch.Tensor | None = None
    ) -> Conditioning:
        """Adopt another stage's conditioning (a continuation clip goes first)."""
        visual = ([continuation] if continuation is not None else []) + list(
            external.visual_latents
        )
        return cls(external.text, external.text_mask, visual, list(external.audio_latents))


def validate_references(
    references: Sequence[ReferenceSpec], limits: Limits | None = None
) -> list[VideoInfo | None]:
    """Create missing synthetic references and check every file is readable and within `limits`.

    Cheap: headers (sizes, durations) are checked against the caps before anything is decoded;
    an image is then decoded once, bounded. Returns each reference's video header (None for
    images and audio), so that shape prediction does not open the files a second time.
    """
    limits = limits or Limits()
    headers: list[VideoInfo | None] = []
    for spec in references:
        path = ensure_reference(spec)
        header = None
        if spec.kind == "video":
            header = probe_video(path, limits)
            if header.frames_at_24fps < 1:
                raise MediaError(f"{path}: the video has zero frames")
            frames = reference_frame_count(spec, header)
            if frames > limits.max_reference_frames:
                cap = describe_cap("max_reference_frames", limits.max_reference_frames)
                raise MediaError(
                    f"{path}: {frames} frames at {FPS} fps (from its header), above the cap "
                    f"{cap}; trim the reference, set its max_seconds, or raise the cap"
                )
        elif spec.kind == "image":
            read_image(path, limits=limits)
        else:
            check_audio_header(path, limits, spec.max_seconds)
        headers.append(header)
    return headers


def encode_conditioning(
    models: Ref2VAModels,
    recipe: Recipe,
    geometry: RequestGeometry,
    *,
    continuation: torch.Tensor | None = None,
    tracer: Tracer = NULL_TRACER,
    cancel: CancelEvent | None = None,
) -> Conditioning:
    """Encode the prompt and every reference (each in its own ENCODE span), in recipe order.

    Visual conditions are the continuation latents (if any), then image/video references in
    order; audio conditions are video soundtracks and audio clips, in order. Every visual
    reference is brought to the request's canvas (`geometry.width` x `geometry.height`, as its
    plan resolved it). Decoding is bounded by `recipe.limits` and stops between frames once
    `cancel` is set.
    """
    width, height = geometry.width, geometry.height
    with tracer.span("text_encode", Category.ENCODE), torch.no_grad():
        text, mask = models.text_encoder.encode_with_mask([recipe.prompt])
    visual = [continuation] if continuation is not None else []
    audio: list[torch.Tensor] = []
    for k, spec in enumerate(recipe.references):
        with tracer.span(f"media_encode:{k}:{spec.kind}", Category.ENCODE):
            encoded = encode_reference(
                spec,
                models.video_vae,
                models.audio_vae,
                width,
                height,
                tracer=tracer,
                limits=recipe.limits,
                cancel=cancel,
            )
        if encoded.video_latents is not None:
            visual.append(encoded.video_latents)
        if encoded.audio_latents is not None:
            audio.append(encoded.audio_latents)
    return Conditioning(text, mask, visual, audio)
