"""What `prenoise vllm-omni-verify` refuses before it runs the pipeline, and why.

Bad input is the user's to fix: it is reported in one line with exit status 2
(:class:`VerifyInputError`, a `UsageError`), never as an internal error, and before any heavy
work. Checked, in this order:
- the plugin's settings (`PRENOISE_VLLM_OMNI*`): an unknown value, or the plugin turned off
  (with `PRENOISE_VLLM_OMNI=0` the plugin-on arm would run upstream's code: nothing to verify);
- the request, with upstream's own validation first so that the message is the one a
  `vllm serve` client gets, unchanged (`OmniClientError`): outputs per prompt, duration and
  canvas (`resolve_minimax_h3_shape`), reference counts; then prenoise's seed range and the
  canvas bound below (upstream sets none for an explicit `height`/`width`);
- each reference file, typed by content (never by its name) and checked with upstream's own
  loaders and validators: images (`load_minimax_h3_images`,
  `resolve_minimax_h3_reference_image_shape`), videos (`_probe_video`,
  `_validate_reference_video_metadata`), audio (`validate_reference_audio_files`).

What only upstream's media preparation can see (e.g. the 15 s budget of several reference
videos together) it still refuses inside the run, with its own `OmniClientError`; the command
reports that the same way.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from prenoise.guards.path_checks import not_a_file, path_problem
from prenoise.integrations.vllm_omni.h3_request import H3Request
from prenoise.integrations.vllm_omni.h3_seeds import TORCH_SEED_MAX, TORCH_SEED_MIN, torch_seed
from prenoise.integrations.vllm_omni.reference_kinds import (
    ReferenceKind,
    VerifyInputError,
    reference_kind,
)
from prenoise.integrations.vllm_omni.settings import ENABLE_ENV, PluginSettings, SettingsError

__all__ = [
    "MAX_STEPS",
    "ReferenceKind",
    "VerifyInputError",
    "canvas_pixel_limit",
    "check_kind",
    "check_references",
    "check_request",
    "check_settings",
    "check_steps",
    "reference_kind",
    "resolve_reference_paths",
]

T = TypeVar("T")

# -- settings -----------------------------------------------------------------------------------


def check_settings() -> PluginSettings:
    """The plugin's settings from the environment; refuse unknown values and a disabled plugin.

    With `PRENOISE_VLLM_OMNI=0` the plugin's `forward` wrapper passes straight through to
    upstream: both arms would run the same code, so "equal" would prove nothing.
    """
    try:
        settings = PluginSettings.from_env()
    except SettingsError as error:
        raise VerifyInputError(str(error)) from None
    if not settings.enabled:
        raise VerifyInputError(
            f"plugin disabled by {ENABLE_ENV}=0: nothing to verify (both arms would run "
            f"upstream's code); unset {ENABLE_ENV} or set it to 1"
        )
    return settings


# -- the request --------------------------------------------------------------------------------


def canvas_pixel_limit() -> int:
    """The largest output canvas verified: upstream's `MINIMAX_H3_OUTPUT_MAX_PIXELS` (768x1344).

    That is the largest canvas upstream resolves by itself; for an explicit `height`/`width` it
    checks only the aspect ratio, so `--width 100000` would otherwise allocate tens of GB.
    """
    from vllm_omni.model_executor.models.minimax_h3 import preprocessing

    return int(preprocessing.MINIMAX_H3_OUTPUT_MAX_PIXELS)


def check_request(request: H3Request) -> None:
    """Refuse, before any pipeline work, a request upstream or prenoise would refuse.

    Raises :class:`VerifyInputError` with upstream's message where upstream has the check.
    """
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as pipeline
    from vllm_omni.model_executor.models.minimax_h3 import encoder_processing

    outputs = _upstream(pipeline._resolve_minimax_h3_num_outputs, request.outputs)
    _check_torch_seeds(request.seed, outputs)
    check_steps(request.steps)
    sampling = request.forward_request().sampling_params
    resolve_shape = encoder_processing.resolve_minimax_h3_shape
    height, width, *_ = _upstream(resolve_shape, "ref2va", sampling, None)
    limit = canvas_pixel_limit()
    if height * width > limit:
        raise VerifyInputError(
            f"canvas {width}x{height} ({width * height} pixels) is over {limit} pixels, the "
            "largest MiniMax-H3 canvas upstream resolves itself (768x1344); pass a smaller "
            "--width/--height"
        )
    check_references(request.references, request.task)


MAX_STEPS = 1000
"""The most denoising steps verify runs. Upstream sets no maximum (`minimax_h3_time_shift_sigmas`:
at least 1); each step runs the stand-in transformer twice, and the comparison needs no more
than a few (the default is 2): 100000000 ran ~10 min before upstream's own error."""


def check_steps(steps: int) -> None:
    """Refuse `--steps` outside 1..`MAX_STEPS` (one line, before anything is imported)."""
    if not 1 <= steps <= MAX_STEPS:
        raise VerifyInputError(
            f"--steps {steps}: expected 1..{MAX_STEPS} (upstream needs at least 1 and sets no "
            "maximum; verify's comparison needs no more than a few steps)"
        )


def check_kind(kind: str, references: Sequence[Path]) -> None:
    """Refuse, in one line, references the request kind (`h3_request.KINDS`) cannot take, and a
    guided request where upstream has no timeline guides."""
    if kind == "t2va" and references:
        raise VerifyInputError("--kind t2va: a text-only request takes no --reference")
    if kind == "fl2va":
        kinds = [reference_kind(path) for path in references]
        if not 1 <= len(kinds) <= 2 or set(kinds) != {"image"}:
            raise VerifyInputError(
                f"--kind fl2va: the keyframes are 1 or 2 --reference images (first, or first "
                f"and last), got {', '.join(kinds) or 'none'}"
            )
    if kind == "guided":
        import importlib.util

        guides = "vllm_omni.model_executor.models.minimax_h3.timeline_guides"
        if importlib.util.find_spec(guides) is None:
            raise VerifyInputError(
                "--kind guided: this vllm-omni has no timeline guides (new in vllm-omni "
                "0.32.0rc1); pick another --kind"
            )
        if not any(reference_kind(path) == "image" for path in references):
            raise VerifyInputError(
                "--kind guided: the guide is the first --reference image; give one"
            )


def check_references(paths: Sequence[Path], task: str = "ref2va") -> dict[Path, ReferenceKind]:
    """Type each reference by content and run upstream's checks for its kind; the kinds. For a
    Ref2VA request (`task`), upstream's reference counts too (FL2VA: `check_kind`)."""
    from vllm_omni.model_executor.models.minimax_h3 import encoder_processing

    kinds = {path: reference_kind(path) for path in paths}
    by_kind = {kind: [p for p in paths if kinds[p] == kind] for kind in ("image", "video", "audio")}
    if task == "ref2va":
        _upstream(
            encoder_processing._validate_ref2va_reference_counts,
            len(by_kind["image"]),
            len(by_kind["video"]),
            len(by_kind["audio"]),
        )
    if (by_kind["video"] or by_kind["audio"]) and not _have_ffmpeg():
        raise VerifyInputError(
            "video and audio references need ffmpeg and ffprobe (upstream runs them); "
            "install ffmpeg"
        )
    for path in by_kind["image"]:
        _check_image(path)
    for index, path in enumerate(by_kind["video"]):
        _check_video(path, index)
    if by_kind["audio"]:
        _check_audio(by_kind["audio"])
    return kinds


def _check_image(path: Path) -> None:
    from vllm_omni.model_executor.models.minimax_h3 import preprocessing

    try:
        [image] = _upstream(preprocessing.load_minimax_h3_images, str(path))
    except OSError as error:  # Pillow: truncated or corrupt data
        raise VerifyInputError(f"reference {path}: cannot decode the image ({error})") from None
    _upstream(preprocessing.resolve_minimax_h3_reference_image_shape, image)


def _check_video(path: Path, index: int) -> None:
    from vllm_omni.model_executor.models.minimax_h3 import reference_video

    meta = _upstream(_ffprobed, path, reference_video._probe_video)
    validate = reference_video._validate_reference_video_metadata
    _upstream(validate, meta, index=index, source=str(path))


def _check_audio(paths: list[Path]) -> None:
    from vllm_omni.model_executor.models.minimax_h3 import reference_video

    # One call: upstream also checks the references' 15 s total.
    _upstream(_ffprobed, [str(p) for p in paths], reference_video.validate_reference_audio_files)


def _ffprobed(subject: Any, probe: Callable[[Any], T]) -> T:
    """`probe(subject)`; ffprobe failing on the file is bad media, said in one line."""
    try:
        return probe(str(subject) if isinstance(subject, Path) else subject)
    except subprocess.CalledProcessError as error:
        detail = (error.stderr or "").strip().splitlines()
        why = detail[-1] if detail else f"exit status {error.returncode}"
        raise VerifyInputError(f"reference {subject}: ffprobe cannot read it ({why})") from None


def _have_ffmpeg() -> bool:
    return shutil.which("ffmpeg") is not None and shutil.which("ffprobe") is not None


def _upstream(check: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Upstream's check; its `OmniClientError` (a request it refuses) as our one-line error."""
    from vllm_omni.errors import OmniClientError

    try:
        return check(*args, **kwargs)
    except OmniClientError as error:
        raise VerifyInputError(str(error)) from None


def _check_torch_seeds(seed: int, outputs: int) -> None:
    """Refuse what upstream's `manual_seed` raises on for output `i`'s seed `seed + i`.

    Upstream accepts every seed torch takes (negative ones included, which torch maps to
    `2^64 + s`), so verify does too; `torch_seed` is the plugin's own rule for the same range.
    """
    last = seed + outputs - 1
    for value, what in ((seed, f"seed {seed}"), (last, f"seed + outputs - 1 = {last}")):
        if torch_seed(value) is None:
            raise VerifyInputError(
                f"{what} is outside torch's seed range {TORCH_SEED_MIN}..{TORCH_SEED_MAX} "
                "(upstream's manual_seed raises for it)"
            )


# -- reference files ----------------------------------------------------------------------------


def resolve_reference_paths(raw_paths: Sequence[str | Path]) -> tuple[Path, ...]:
    """Absolute paths of existing, readable regular files (a clear error before any work)."""
    resolved = []
    for raw in raw_paths:
        problem = path_problem(raw)
        if problem is not None:
            raise VerifyInputError(f"reference: the path {problem}")
        path = Path(raw).expanduser()
        if not path.is_file():  # missing, a directory, a device (/dev/zero exists: say what)
            raise VerifyInputError(f"reference {raw}: {not_a_file(path)}")
        try:
            with path.open("rb"):
                pass
        except OSError as error:
            raise VerifyInputError(f"reference {raw}: cannot read it ({error.strerror})") from None
        resolved.append(path.resolve())
    return tuple(resolved)
