"""What one Ref2VA request will allocate, and the two budget refusals of its plan.

`plan_request` (`ref2va/request_plan.py`) is the one caller: it estimates the request alone (no
reference opened yet) and refuses it with `require_size_fits` before it reads any reference's
header, then estimates it again with the references and refuses it with
`require_references_fit`. Every input (geometry, streams, headers, predicted shapes, weights)
comes resolved from the plan; nothing here computes geometry or streams.

The budget is `recipe.limits.memory_budget`, or the memory available at the check. The estimate
is the models' weights (counted on the meta device, `model_size`) plus the sum of the big
tensors of the largest phase (preparation, denoising, decoding); it uses the noise plan's own
byte counts (`NoisePlan.peak_nbytes`) of the output's very streams, so it follows the draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prenoise.guards.budget import format_bytes, require_fits
from prenoise.preparation.draws import NoisePlan
from prenoise.ref2va.config import Recipe, ReferenceSpec
from prenoise.ref2va.geometry import (
    AUDIO_FEATURES,
    AUDIO_RATE_HZ,
    FPS,
    GROUP_FRAMES,
    LATENT_CHANNELS,
    RequestGeometry,
)
from prenoise.ref2va.media import VideoInfo
from prenoise.ref2va.noise import OutputDraws
from prenoise.ref2va.references import truncated_frames

__all__ = [
    "RequestEstimate",
    "estimate_request",
    "require_references_fit",
    "require_size_fits",
]

ReferenceHeader = tuple[ReferenceSpec, VideoInfo | None]
"""A reference and its video header as validated (None for images and audio clips)."""

_F32 = 4


@dataclass(frozen=True)
class RequestEstimate:
    """Estimated bytes of one request at the peak of each phase (all outputs alike)."""

    noise: int
    """The draws of one output (`NoisePlan.peak_nbytes`)."""
    references: int
    """Latents and condition rows kept for the whole request, plus the largest decode."""
    denoise: int
    """Rows, velocities and transformer activations of one output."""
    decode: int
    """Final latents, one decoded temporal group and the waveform."""
    model: int = 0
    """The models' weights (`model_size.model_nbytes`), resident through every phase."""

    @property
    def peak(self) -> int:
        """The weights plus the largest phase: preparation (noise + references), denoising or
        decoding."""
        return self.model + max(self.noise + self.references, self.denoise, self.decode)

    def summary(self) -> str:
        """One line: each phase's bytes (phases with none left out)."""
        parts = [
            ("model", self.model),
            ("noise", self.noise),
            ("references", self.references),
            ("denoise", self.denoise),
            ("decode", self.decode),
        ]
        return ", ".join(f"{name} {format_bytes(n)}" for name, n in parts if n)


def estimate_request(
    recipe: Recipe,
    geometry: RequestGeometry,
    draws: OutputDraws,
    references: Sequence[ReferenceHeader] = (),
    *,
    model_bytes: int,
) -> RequestEstimate:
    """Estimate the peak allocation of `recipe` at `geometry` whose outputs draw like `draws`
    (their `conditions` are the references' predicted latents; none without references).

    `references` pairs each reference with its validated header (empty: no reference counted,
    no file opened); `model_bytes` is `model_size.model_nbytes(recipe.model)`."""
    geo = geometry
    plan = NoisePlan(
        (draws.video, draws.audio, *draws.conditions),
        allow_scalar_path=True,
        noise_stream=draws.noise_stream,
    )
    visual_rows = sum(LATENT_CHANNELS * t * h * w for t, h, w in draws.condition_shapes) * _F32
    audio_rows = sum(_audio_ref_rows(spec, hdr) for spec, hdr in references)
    # kept for the request: latents, their rows, and the mixed condition rows
    kept = 3 * (visual_rows + audio_rows * _F32)
    decoding = max((_decode_bytes(recipe, geo, spec, hdr) for spec, hdr in references), default=0)
    model = recipe.model.transformer
    rows = geo.video_rows + geo.audio_rows
    video_rows_bytes = draws.video.output_nbytes
    activations = rows * model.dim * (6 + model.mlp_ratio) * _F32
    attention = rows * model.num_heads * recipe.model.text.max_length * _F32
    denoise = kept + 3 * (video_rows_bytes + draws.audio.output_nbytes) + activations
    group = GROUP_FRAMES * geo.width * geo.height * 3
    waveform = 2 * round(geo.frames / FPS * recipe.model.audio_vae.sample_rate) * _F32
    decode = kept + 2 * video_rows_bytes + group * (2 * _F32 + 1) + waveform
    return RequestEstimate(
        noise=plan.peak_nbytes,
        references=kept + decoding,
        denoise=denoise + attention,
        decode=decode,
        model=model_bytes,
    )


def _seconds(spec: ReferenceSpec, header: VideoInfo | None) -> float:
    seconds = header.duration_s if header is not None else 0.0
    frames = truncated_frames(spec)
    return seconds if frames is None else min(seconds, frames / FPS)


def _audio_ref_rows(spec: ReferenceSpec, header: VideoInfo | None) -> int:
    """Elements of a video soundtrack's latents (audio clips: bounded by the audio cap)."""
    if spec.kind == "image" or (spec.kind == "video" and not spec.use_audio):
        return 0
    seconds = _seconds(spec, header) if header is not None else 0.0
    return 2 * round(seconds * AUDIO_RATE_HZ) * AUDIO_FEATURES


def _decode_bytes(
    recipe: Recipe, geo: RequestGeometry, spec: ReferenceSpec, header: VideoInfo | None
) -> int:
    """Working set of decoding one reference: a source frame, a chunk and its float copy."""
    width, height = geo.width, geo.height
    source = header.width * header.height if header is not None else width * height
    frames = GROUP_FRAMES if spec.kind == "video" else 1
    chunk = frames * width * height * 3 * (1 + _F32)
    sound = 3 * 2 * round(_seconds(spec, header) * recipe.model.audio_vae.sample_rate) * _F32
    return 2 * 3 * source + chunk + sound


def _size_fix(geo: RequestGeometry, model_bytes: int) -> str:
    return (
        f"make the request smaller (width x height, now {geo.width}x{geo.height}; "
        f"duration/frames, now {geo.frames} frames; or the model: {format_bytes(model_bytes)} "
        "of weights) or raise limits.memory_budget (--memory-budget)"
    )


def require_size_fits(recipe: Recipe, geometry: RequestGeometry, alone: RequestEstimate) -> None:
    """Raise `BudgetExceededError` when the request's own size (`alone`: estimated without its
    references) exceeds the budget; the message says what to shrink."""
    fix = _size_fix(geometry, alone.model)
    require_fits(alone.peak, f"this request ({alone.summary()})", recipe.limits.memory_budget, fix)


def require_references_fit(
    recipe: Recipe, geometry: RequestGeometry, alone: RequestEstimate, full: RequestEstimate
) -> None:
    """Raise `BudgetExceededError` when the estimate with the references (`full`) exceeds the
    budget; checked only when the references add to `alone` (which already fit)."""
    if full.peak > alone.peak:
        require_fits(
            full.peak,
            f"this request with its references ({full.summary()})",
            recipe.limits.memory_budget,
            "shorten the references (max_seconds) or " + _size_fix(geometry, alone.model),
        )
