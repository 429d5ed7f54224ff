"""What one Ref2VA request will allocate, and the two budget refusals of its plan.

`plan_request` (`ref2va/request_plan.py`) is the one caller: it estimates the request alone (no
reference opened yet) and refuses it with `require_size_fits` before it reads any reference's
header, then estimates it again with the references and refuses it with
`require_references_fit`. Every input (geometry, streams, headers, predicted shapes, weights)
comes resolved from the plan; nothing here computes geometry or streams.

The budget is `recipe.limits.memory_budget`, or the memory available at the check. The estimate
is the models' weights (counted on the meta device, `model_size`), a fixed `RUNTIME_BYTES`, and
the sum of the big tensors of the largest phase (preparation, denoising, decoding) times
`HEAP_MARGIN`; it uses the noise plan's own byte counts (`NoisePlan.peak_nbytes`) of the
output's very streams, so it follows the draws. It bounds the resident growth a real request
was measured to reach (tests/ref2va/test_request_memory.py, in fresh processes): the decode
phase counts a temporal group's float pixels, frames and activations and the H.264 encoder's
frames, and the pipeline hands the heap's free pages back between groups (`guards.heap`), so the
peak does not grow with the duration (issue 42, class 7: it was about half the real peak).
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
    "DECODER_FRAMES",
    "ENCODER_FRAMES",
    "HEAP_MARGIN",
    "RUNTIME_BYTES",
    "RequestEstimate",
    "estimate_request",
    "require_references_fit",
    "require_size_fits",
]

ReferenceHeader = tuple[ReferenceSpec, VideoInfo | None]
"""A reference and its video header as validated (None for images and audio clips)."""

_F32 = 4
ENCODER_FRAMES = 64
"""Frames' worth of yuv420 (W x H x 1.5 bytes) the MP4 writer's H.264 encoder holds: its
lookahead, references and frame threads. Measured: 91 MiB at 1344x768 (61.6 frames) and 29 MiB at
672x384 (78 frames, its fixed part) on 2 cores (3 x264 threads) with noise-like frames."""
DECODER_FRAMES = 32
"""Frames' worth of yuv420 at the source's size a reference's video decoder holds."""
RUNTIME_BYTES = 48 * 2**20
"""What a request adds whatever its size: the codec libraries' pages and the encoder's fixed
state (measured 27 MiB writing a 672x384 MP4's audio and first frames), thread stacks and the
small tensors of every stage."""
HEAP_MARGIN = 1.25
"""The counted tensors of a phase times this: what the C heap holds beyond the live tensors
(fragmentation between `guards.heap.release_free_heap` calls) and the small tensors not counted.
Measured peaks and the estimates: docs/guarantees.md (class 7)."""


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
        """The weights, `RUNTIME_BYTES` and the largest phase (preparation: noise + references,
        denoising or decoding) times `HEAP_MARGIN`."""
        largest = max(self.noise + self.references, self.denoise, self.decode)
        return self.model + RUNTIME_BYTES + int(largest * HEAP_MARGIN)

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
    hidden = recipe.model.video_vae.hidden
    model = recipe.model.transformer
    rows = geo.video_rows + geo.audio_rows
    video_rows_bytes = draws.video.output_nbytes
    activations = rows * model.dim * (6 + model.mlp_ratio) * _F32
    attention = 2 * rows * model.num_heads * recipe.model.text.max_length * _F32  # scores, softmax
    denoise = kept + 3 * (video_rows_bytes + draws.audio.output_nbytes) + activations
    waveform = 2 * round(geo.frames / FPS * recipe.model.audio_vae.sample_rate) * _F32
    # the final rows and their unpatchified latents, one temporal group decoding (float pixels,
    # the uint8 frames and their reshaped copy, the group's hidden activations), the encoder
    group = GROUP_FRAMES * geo.width * geo.height * 3 * (_F32 + 2)
    group += 4 * GROUP_FRAMES * geo.h * geo.w * hidden * _F32
    encoder = ENCODER_FRAMES * geo.width * geo.height * 3 // 2
    decode = kept + 2 * video_rows_bytes + group + waveform + encoder
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
    """Working set of decoding and encoding one reference: the video decoder's frames, a decoded
    chunk and the group being filled, the group's copy and float pixels, its activations."""
    width, height = geo.width, geo.height
    source = header.width * header.height if header is not None else width * height
    video = spec.kind == "video"
    frames = GROUP_FRAMES if video else 1
    pixels = frames * width * height * 3
    chunk = pixels * (2 + 2 + _F32)  # decoded chunk, pending group, its copy, float pixels
    chunk += 4 * frames * geo.h * geo.w * recipe.model.video_vae.hidden * _F32
    decoder = DECODER_FRAMES * source * 3 // 2 if video else 0
    sound = 3 * 2 * round(_seconds(spec, header) * recipe.model.audio_vae.sample_rate) * _F32
    return 2 * 3 * source + decoder + chunk + sound


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
