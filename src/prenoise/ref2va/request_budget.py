"""What one Ref2VA request will allocate, estimated from its recipe and headers, and the check.

`check_request(recipe)` is the one gate every entry point passes before heavy work (`prenoise
generate|verify|bench`, `prenoise serve` admission, `Ref2VAPipeline.prepare`, distributed rank 0):

1. the request's own size (noise, denoise, decode; no reference opened yet) against the memory
   budget, so an impossible `--width`/`--duration` is refused as such, never blamed on a file;
2. every reference's headers against the media caps (`validate_references`);
3. the whole estimate, references included, against the budget.

The budget is `recipe.limits.memory_budget`, or the memory available at the check. The estimate
is the models' weights (counted on the meta device, `model_size`) plus the sum of the big
tensors of the largest phase (preparation, denoising, decoding); it uses the noise plan's own
byte counts (`NoisePlan.peak_nbytes`), so it follows the draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prenoise.guards.budget import format_bytes, require_fits
from prenoise.preparation.draws import NoisePlan
from prenoise.ref2va.conditioning import validate_references
from prenoise.ref2va.config import Recipe, ReferenceSpec
from prenoise.ref2va.geometry import (
    AUDIO_FEATURES,
    AUDIO_RATE_HZ,
    FPS,
    GROUP_FRAMES,
    LATENT_CHANNELS,
)
from prenoise.ref2va.media import VideoInfo
from prenoise.ref2va.model_size import model_nbytes
from prenoise.ref2va.noise import condition_streams, initial_noise_streams
from prenoise.ref2va.references import reference_frame_count, truncated_frames
from prenoise.ref2va.video_processor import VideoProcessor

__all__ = ["RequestCheck", "RequestEstimate", "check_request", "estimate_request"]

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


@dataclass(frozen=True)
class RequestCheck:
    """What `check_request` found: the estimate and each reference's video header."""

    estimate: RequestEstimate
    headers: list[VideoInfo | None]


def estimate_request(
    recipe: Recipe, headers: Sequence[VideoInfo | None] | None = None
) -> RequestEstimate:
    """Estimate `recipe`'s peak allocation; `headers` (from `validate_references`) add the
    references, None leaves them out (no file is opened)."""
    geo = recipe.geometry()
    specs = list(recipe.references) if headers is not None else []
    pairs = list(zip(specs, headers or [], strict=True))
    shapes = _visual_shapes(recipe, pairs)
    video, audio = initial_noise_streams(recipe.seed, geo.T, geo.h, geo.w, geo.audio_t)
    plan = NoisePlan(
        (video, audio, *condition_streams(recipe.seed, geo.T, shapes)), allow_scalar_path=True
    )
    visual_rows = sum(LATENT_CHANNELS * t * h * w for t, h, w in shapes) * _F32
    audio_rows = sum(_audio_ref_rows(spec, hdr) for spec, hdr in pairs)
    # kept for the request: latents, their rows, and the mixed condition rows
    kept = 3 * (visual_rows + audio_rows * _F32)
    decoding = max((_decode_bytes(recipe, spec, hdr) for spec, hdr in pairs), default=0)
    model = recipe.model.transformer
    rows = geo.video_rows + geo.audio_rows
    video_rows_bytes = plan.streams[0].output_nbytes
    activations = rows * model.dim * (6 + model.mlp_ratio) * _F32
    attention = rows * model.num_heads * recipe.model.text.max_length * _F32
    denoise = kept + 3 * (video_rows_bytes + plan.streams[1].output_nbytes) + activations
    group = GROUP_FRAMES * geo.width * geo.height * 3
    waveform = 2 * round(geo.frames / FPS * recipe.model.audio_vae.sample_rate) * _F32
    decode = kept + 2 * video_rows_bytes + group * (2 * _F32 + 1) + waveform
    return RequestEstimate(
        noise=plan.peak_nbytes,
        references=kept + decoding,
        denoise=denoise + attention,
        decode=decode,
        model=model_nbytes(recipe.model),
    )


def _visual_shapes(
    recipe: Recipe, pairs: Sequence[tuple[ReferenceSpec, VideoInfo | None]]
) -> list[tuple[int, int, int]]:
    """Predicted latent `(t, h, w)` of every visual reference (the encoder's own rule)."""
    width, height = recipe.size()
    processor = VideoProcessor()
    return [
        processor.predict_latent_shape(reference_frame_count(spec, header), height, width)
        for spec, header in pairs
        if spec.is_visual
    ]


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


def _decode_bytes(recipe: Recipe, spec: ReferenceSpec, header: VideoInfo | None) -> int:
    """Working set of decoding one reference: a source frame, a chunk and its float copy."""
    width, height = recipe.size()
    source = header.width * header.height if header is not None else width * height
    frames = GROUP_FRAMES if spec.kind == "video" else 1
    chunk = frames * width * height * 3 * (1 + _F32)
    sound = 3 * 2 * round(_seconds(spec, header) * recipe.model.audio_vae.sample_rate) * _F32
    return 2 * 3 * source + chunk + sound


def _size_fix(recipe: Recipe) -> str:
    width, height = recipe.size()
    return (
        f"make the request smaller (width x height, now {width}x{height}; duration/frames, now "
        f"{recipe.num_frames()} frames; or the model: {format_bytes(model_nbytes(recipe.model))} "
        "of weights) or raise limits.memory_budget (--memory-budget)"
    )


def check_request(recipe: Recipe, *, references: bool = True) -> RequestCheck:
    """Refuse, before any heavy work, a request that cannot fit or whose media exceed the caps.

    Raises `BudgetExceededError` (the request's size: says what to shrink) or `MediaError` (a
    reference: names the file and the cap). See the module docstring for the order.
    `references=False` checks the size alone (conditioning that comes from elsewhere).
    """
    budget = recipe.limits.memory_budget
    alone = estimate_request(recipe)
    require_fits(alone.peak, f"this request ({alone.summary()})", budget, _size_fix(recipe))
    if not references:
        return RequestCheck(alone, [])
    headers = validate_references(recipe.references, recipe.limits)
    estimate = estimate_request(recipe, headers)
    if estimate.peak > alone.peak:
        require_fits(
            estimate.peak,
            f"this request with its references ({estimate.summary()})",
            budget,
            "shorten the references (max_seconds) or " + _size_fix(recipe),
        )
    return RequestCheck(estimate, headers)
