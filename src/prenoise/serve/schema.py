"""The `POST /v1/videos` body and how it becomes a `Recipe` and its request plan.

Every field is optional; omitted fields keep the service recipe's value. `references` (paths
under the media root) and uploaded files, together, replace the recipe's references; when the
request gives neither, the recipe's references are used. Overrides follow `prenoise generate`:
`duration` clears `frames` and vice versa, `width`+`height` (or `size: "WxH"`) clear
`short_edge`, so the same request gives the same `Recipe` (and the same MP4) as the CLI.
Every refusal is a `RequestRejected` naming the field: non-finite numbers, sizes above
`ServeLimits`, references above the recipe's media caps (`limits:`), and requests whose
estimated allocation exceeds the memory budget (`prenoise.ref2va.request_budget`). An accepted
request leaves as its `Ref2VARequestPlan` (`plan_request`, run once here): the job carries it to
preparation, denoising and decoding, which never resolve or check it again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from prenoise.guards.budget import BudgetExceededError
from prenoise.guards.seeds import SEED_MAX, SEED_MIN
from prenoise.ref2va.cli_options import reference_kind
from prenoise.ref2va.conditioning import validate_references
from prenoise.ref2va.config import Recipe, ReferenceSpec
from prenoise.ref2va.geometry import RequestGeometry
from prenoise.ref2va.limits import Limits
from prenoise.ref2va.media import MediaError, VideoInfo
from prenoise.ref2va.request_plan import Ref2VARequestPlan, plan_request
from prenoise.serve.paths import PathRejected, resolve_media_path

__all__ = [
    "ReferenceIn",
    "RequestRejected",
    "ServeLimits",
    "VideoRequest",
    "build_plan",
    "parse_request",
]


Kind = Literal["image", "video", "audio"]
logger = logging.getLogger("prenoise.serve")


class RequestRejected(ValueError):
    """Invalid request input; `field` names the offending field (e.g. `references[0].path`)."""

    def __init__(self, field: str, message: str, status: int = 422) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.status = status


@dataclass(frozen=True)
class ServeLimits:
    """Upper bounds on one request, so a single request cannot exhaust the service."""

    max_steps: int = 1000
    max_frames: int = 24 * 60 + 5
    max_side: int = 4096
    max_outputs: int = 8
    max_references: int = 8
    max_upload_bytes: int = 64 * 2**20
    """Whole request body (JSON or multipart, all uploads together), in bytes."""
    max_queued: int = 32
    """Requests waiting for the executor, those still arriving included (more: HTTP 429)."""
    max_queued_upload_bytes: int = 256 * 2**20
    """Upload bytes held at once: bodies arriving plus uploads of unfinished jobs (more: 429)."""


class ReferenceIn(BaseModel):
    """A reference file under the media root; `kind` defaults to the suffix's kind."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    path: str = Field(min_length=1, max_length=4096)
    kind: Kind | None = None
    use_audio: bool = True
    max_seconds: float | None = Field(default=None, gt=0)


class VideoRequest(BaseModel):
    """Per-request overrides of the service recipe."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    prompt: str | None = Field(default=None, min_length=1, max_length=4000)
    seed: int | None = Field(default=None, ge=SEED_MIN, le=SEED_MAX)  # + outputs: Recipe checks
    noise_stream: Literal["native", "x86", "libm"] | None = None  # opt-in cross-machine noise
    duration: float | None = Field(default=None, gt=0)
    frames: int | None = Field(default=None, ge=1)
    width: int | None = Field(default=None, ge=32)
    height: int | None = Field(default=None, ge=32)
    size: str | None = Field(default=None, pattern=r"^[0-9]{2,5}x[0-9]{2,5}$")
    steps: int | None = Field(default=None, ge=1)
    shift_video: float | None = Field(default=None, gt=0)
    shift_audio: float | None = Field(default=None, gt=0)
    outputs: int | None = Field(default=None, ge=1)
    references: list[ReferenceIn] | None = None


def _field_name(loc: tuple[Any, ...]) -> str:
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or "body"


def parse_request(data: Any) -> VideoRequest:
    """Validate a decoded JSON body; the first error becomes a `RequestRejected`."""
    if not isinstance(data, dict):
        raise RequestRejected("body", f"expected a JSON object, got {type(data).__name__}")
    try:
        return VideoRequest.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        if err["type"] == "extra_forbidden":
            raise RequestRejected(_field_name(err["loc"]), "unknown field") from None
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise RequestRejected(_field_name(err["loc"]), msg) from None


def _overrides(req: VideoRequest) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("prompt", "seed", "noise_stream", "steps", "shift_video", "shift_audio", "outputs"):
        value = getattr(req, key)
        if value is not None:
            out[key] = value
    if req.duration is not None and req.frames is not None:
        raise RequestRejected("duration", "give either duration or frames, not both")
    if req.duration is not None:
        out.update(duration=req.duration, frames=None)
    if req.frames is not None:
        out.update(frames=req.frames, duration=None)
    width, height = req.width, req.height
    if req.size is not None:
        if width is not None or height is not None:
            raise RequestRejected("size", "give either size or width+height, not both")
        width, height = (int(v) for v in req.size.split("x"))
    if (width is None) != (height is None):
        raise RequestRejected("width" if width is None else "height", "give both width and height")
    if width is not None:
        out.update(width=width, height=height, short_edge=None)
    return out


def _check_limits(recipe: Recipe, geometry: RequestGeometry, limits: ServeLimits) -> None:
    """The service's own limits, on the request as its plan resolves it (`geometry`)."""
    if recipe.steps > limits.max_steps:
        raise RequestRejected("steps", f"at most {limits.max_steps}")
    if recipe.outputs > limits.max_outputs:
        raise RequestRejected("outputs", f"at most {limits.max_outputs}")
    if geometry.frames > limits.max_frames:
        field = "frames" if recipe.frames is not None else "duration"
        raise RequestRejected(field, f"at most {limits.max_frames} frames")
    width, height = geometry.width, geometry.height
    if max(width, height) > limits.max_side:
        raise RequestRejected(
            "width" if width >= height else "height", f"at most {limits.max_side}"
        )
    if len(recipe.references) > limits.max_references:
        raise RequestRejected("references", f"at most {limits.max_references}")


def _kind(path: PurePosixPath | Path) -> Kind:
    """The media kind `prenoise generate --reference` infers from the suffix."""
    return cast(Kind, reference_kind(Path(path)))


def _reference_specs(
    req: VideoRequest, media_root: Path | None, uploads: list[Path], limits: Limits
) -> list[tuple[str, ReferenceSpec]] | None:
    """`(field name, spec)` of every reference, or None to keep the recipe's."""
    if req.references is None and not uploads:
        return None
    specs: list[tuple[str, ReferenceSpec]] = []
    for k, ref in enumerate(req.references or []):
        if ref.max_seconds is not None and ref.max_seconds > limits.max_audio_seconds:
            raise RequestRejected(
                f"references[{k}].max_seconds",
                f"at most {limits.max_audio_seconds:g} (limits.max_reference_frames)",
            )
        field = f"references[{k}].path"
        if media_root is None:
            raise RequestRejected(field, "this service has no --media-root; upload the file")
        try:
            resolved = resolve_media_path(media_root, ref.path)
        except PathRejected as exc:
            raise RequestRejected(field, str(exc)) from None
        kind = ref.kind or _kind(PurePosixPath(ref.path))
        spec = ReferenceSpec(
            kind=kind, path=resolved, use_audio=ref.use_audio, max_seconds=ref.max_seconds
        )
        specs.append((field, spec))
    for k, path in enumerate(uploads):
        spec = ReferenceSpec(kind=_kind(path), path=path)
        specs.append((f"reference[{k}]", spec))
    return specs


def build_plan(
    base: Recipe,
    req: VideoRequest,
    *,
    media_root: Path | None,
    uploads: list[Path],
    limits: ServeLimits,
) -> Ref2VARequestPlan:
    """The request's plan: `base` with the overrides, limits checked, media readable, within the
    memory budget (`plan_request`: the service's limits first, then the size alone, then each
    reference, then the whole request)."""
    overrides = _overrides(req)
    specs = _reference_specs(req, media_root, uploads, base.limits)
    if specs is not None:
        overrides["references"] = [spec for _, spec in specs]
    try:
        recipe = Recipe.model_validate({**base.model_dump(), **overrides})
    except ValidationError as exc:
        err = exc.errors()[0]
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise RequestRejected(_field_name(err["loc"]), msg) from None

    def admit(geometry: RequestGeometry) -> None:
        _check_limits(recipe, geometry, limits)

    def validate(references: Sequence[ReferenceSpec], caps: Limits) -> list[VideoInfo | None]:
        if specs is None:  # the service recipe's own references
            return validate_references(references, caps)
        headers: list[VideoInfo | None] = []
        for field, spec in specs:  # the request's references: each refusal names its field
            try:
                headers += validate_references([spec], caps)
            except MediaError as exc:
                shown = str(exc).replace(str(spec.path), PurePosixPath(spec.path).name)
                raise RequestRejected(field, f"unreadable {spec.kind}: {shown}") from None
        return headers

    try:
        return plan_request(recipe, admit=admit, validate=validate)
    except BudgetExceededError as exc:
        raise RequestRejected(_size_field(req), str(exc)) from None
    except MediaError as exc:  # the service recipe's own references (checked at start-up)
        logger.warning("the service recipe's references: %s", exc)
        raise RequestRejected(
            "references", "the service's default references are unusable"
        ) from None


def _size_field(req: VideoRequest) -> str:
    """The field a too-large request should change: its length, else its size, else `body`."""
    for name in ("frames", "duration", "size", "width"):
        if getattr(req, name) is not None:
            return name
    return "body"
