"""docs/vllm-omni.md's "Request limits (upstream's)" table is what the installed vLLM-Omni enforces.

Each row of the table is probed here against the installed upstream code: its module constants,
and its validation functions called just inside and just outside each bound (bisection where a
bound is a literal inside a function). The probe writes the cell the doc must show for the
installed release (`importlib.metadata.version("vllm-omni")` names the column; a cell `as
0.30.0` means that column's text). Run in every release venv (`make pytest-vllm-omni`, `-031`,
`-032`), so each column is checked on its own release. No media is decoded: the functions called
take sizes, durations and metadata, never files.
"""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import math
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from vllm_omni.diffusion.models.minimax_h3 import continuation, time_request
from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as pipeline
from vllm_omni.errors import OmniClientError
from vllm_omni.model_executor.models.minimax_h3 import (
    encoder_processing,
    long_video,
    preprocessing,
)
from vllm_omni.model_executor.models.minimax_h3 import reference_video as video

DOC = Path(__file__).resolve().parents[2] / "docs" / "vllm-omni.md"
HEADING = "### Request limits (upstream's)"
RELEASE = importlib.metadata.version("vllm-omni")


# -- probing ---------------------------------------------------------------------------------


def accepts(call: Callable[[], object]) -> bool:
    """True if upstream accepts (returns), False if it refuses (a client or value error)."""
    try:
        call()
    except (OmniClientError, ValueError):
        return False
    return True


def boundary(accepted: Callable[[int], bool], inside: int, outside: int) -> int:
    """The last accepted integer between `inside` (accepted) and `outside` (refused)."""
    assert accepted(inside) and not accepted(outside), (inside, outside)
    while abs(outside - inside) > 1:
        middle = (inside + outside) // 2
        inside, outside = (middle, outside) if accepted(middle) else (inside, middle)
    return inside


def float_boundary(accepted: Callable[[float], bool], inside: float, outside: float) -> float:
    """The accepted end of a float interval, to 1e-9 (then rounded to 3 decimals)."""
    assert accepted(inside) and not accepted(outside), (inside, outside)
    for _ in range(80):
        middle = (inside + outside) / 2
        inside, outside = (middle, outside) if accepted(middle) else (inside, middle)
    return round(inside, 3)


def num(value: float) -> str:
    return f"{value:g}"


def mib(size: int) -> str:
    assert size % (1 << 20) == 0, size
    return f"{size >> 20} MiB"


def sampling(extra: dict[str, Any], **fields: Any) -> SimpleNamespace:
    """The sampling parameters `resolve_minimax_h3_shape` reads."""
    values = {"fps": None, "num_frames": None, "height": 256, "width": 256, **fields}
    return SimpleNamespace(extra_args=extra, **values)


def shape(task: str = "ref2va", extra: dict[str, Any] | None = None, **fields: Any) -> Any:
    return encoder_processing.resolve_minimax_h3_shape(task, sampling(extra or {}, **fields), None)


def waveform(samples: int) -> Any:
    """What the audio validators read of a waveform: its length (no samples allocated)."""
    return SimpleNamespace(shape=(1, samples))


def image(width: int, height: int) -> Any:
    """What `resolve_minimax_h3_reference_image_shape` reads of a PIL image: its size."""
    return SimpleNamespace(size=(width, height), width=width, height=height)


# -- the rows ----------------------------------------------------------------------------------


def output_duration() -> str:
    def seconds(extra: dict[str, Any]) -> str:
        ok = lambda d: accepts(lambda: shape(extra={**extra, "duration": d}))  # noqa: E731
        return f"{num(float_boundary(ok, 8.0, 0.0))}..{num(float_boundary(ok, 8.0, 1e5))} s"

    full = seconds({"long_video": True, "long_video_mode": "full"})
    chained = seconds({"long_video": True})  # Ref2VA's default long mode: continuation
    assert long_video.resolve_long_video_mode({"long_video": True}, "ref2va") == "continuation"
    return f"{seconds({})}; `long_video`: {full} (full), {chained} (continuation, Ref2VA)"


def output_frames() -> str:
    ok = lambda n: accepts(lambda: shape(num_frames=n))  # noqa: E731
    low, high = boundary(ok, 200, 2), boundary(ok, 200, 10**6)
    aligned = [shape(num_frames=n)[2] for n in (low, high)]
    ref2va, t2va = shape()[2], shape("t2va", {"aspect_ratio": "16:9"})[2]
    return (
        f"{low}..{high}, aligned up to 17n+5: {aligned[0]}..{aligned[1]}; "
        f"default {ref2va} (Ref2VA), {t2va} (T2VA, FL2VA)"
    )


def output_fps() -> str:
    rates = [fps for fps in range(1, 121) if accepts(lambda fps=fps: shape(fps=fps))]
    assert len(rates) == 1, rates
    return f"{rates[0]} only"


def explicit_canvas() -> str:
    floored = shape(height=63, width=95)[:2]
    step = math.gcd(*floored)
    assert floored == (32, 64) and step == 32, floored
    assert not accepts(lambda: shape(height=step - 1, width=step * 2))
    ok = lambda k: accepts(lambda: shape(height=step, width=step * k))  # noqa: E731
    widest = boundary(ok, 1, 10**4)
    assert boundary(lambda k: accepts(lambda: shape(height=step * k, width=step)), 1, 10**4) == (
        widest
    )
    huge = accepts(lambda: shape(height=step * 10**4, width=step * 10**4))
    return f"floored to a multiple of {step}, ≥ {step} a side, 1:{widest}..{widest}:1" + (
        ", no maximum" if huge else ""
    )


def resolved_canvas() -> str:
    short_edge = preprocessing.MINIMAX_H3_OUTPUT_SHORT_EDGE
    assert not accepts(lambda: preprocessing.resolve_minimax_h3_output_canvas(1.0, short_edge - 32))
    pixels = preprocessing.MINIMAX_H3_OUTPUT_MAX_PIXELS
    height, width = preprocessing.resolve_minimax_h3_output_canvas(16 / 9, short_edge)
    names = ", ".join(preprocessing.MINIMAX_H3_SUPPORTED_ASPECT_RATIOS)
    required = not accepts(
        lambda: preprocessing.resolve_minimax_h3_aspect_ratio("t2va", None, None)
    )
    return (
        f"short edge {short_edge} only, ≤ {pixels:,} px (16:9: {width}×{height}); "
        f"aspect_ratio {names}" + ("; T2VA: required" if required else "")
    )


def outputs() -> str:
    ok = lambda n: accepts(lambda: pipeline._resolve_minimax_h3_num_outputs(n))  # noqa: E731
    return f"{boundary(ok, 1, -100)}..{boundary(ok, 1, 10**4)}"


def seeds() -> str:
    big = 2**80
    assert pipeline._minimax_h3_output_seeds(big, 3) == [big, big + 1, big + 2]
    default = "sampling.seed if sampling.seed is not None else 42"
    assert default in inspect.getsource(pipeline)
    return "output i: seed + i; unseeded: 42; no bound of upstream's own"


def steps() -> str:
    ok = lambda n: accepts(lambda: time_request.minimax_h3_time_shift_sigmas(num_steps=n))  # noqa: E731
    return f"≥ {boundary(ok, 8, -8)}"


def ref2va_counts() -> str:
    def most(kind: int) -> int:
        def ok(n: int) -> bool:
            counts = [1 if kind == 2 else 0, 0, 0]  # audio alone is no Ref2VA
            counts[kind] = n
            return accepts(lambda: encoder_processing._validate_ref2va_reference_counts(*counts))

        return boundary(ok, 1, 10**3)

    check = encoder_processing._validate_ref2va_reference_counts
    assert not accepts(lambda: check(0, 0, 1)) and accepts(lambda: check(0, 1, 0))
    images, videos, audio = most(0), most(1), most(2)
    ok = lambda n: accepts(lambda: check(images, videos, n - images - videos))  # noqa: E731
    total = boundary(ok, images + videos, images + videos + audio + 1)
    return (
        f"≥ 1 image or video; ≤ {images} images, ≤ {videos} videos, ≤ {audio} audio, "
        f"≤ {total} in all"
    )


def fl2va_images() -> str:
    def ok(count: int) -> bool:
        return accepts(lambda: encoder_processing._resolve_fl2va_keyframe_indices({}, count))

    counts = [n for n in range(1, 6) if ok(n)]
    candidates = [[0], [-1], [1], [-2], [0, -1], [-1, 0], [0, 1], [0, -2]]
    allowed = [
        str(c)
        for c in candidates
        if accepts(
            lambda c=c: encoder_processing._resolve_fl2va_keyframe_indices(
                {"frame_indices": c}, len(c)
            )
        )
    ]
    return f"{counts[0]}..{counts[-1]}; frame_indices {', '.join(allowed)}"


def image_size() -> str:
    resolve = preprocessing.resolve_minimax_h3_reference_image_shape
    square = lambda n: accepts(lambda: resolve(image(n, n)))  # noqa: E731
    low, high = boundary(square, 1000, 1), boundary(square, 1000, 10**5)
    wide = lambda w: accepts(lambda: resolve(image(w, 1000)))  # noqa: E731
    narrow, broad = boundary(wide, 1000, 1) / 1000, boundary(wide, 1000, 10**4) / 1000
    return f"{low}..{high} px a side, aspect {num(narrow)}..{num(broad)}"


def image_resize() -> str:
    resolve = preprocessing.resolve_minimax_h3_reference_image_shape
    small, large = resolve(image(256, 320)), resolve(image(4000, 3000))
    if small == (256, 320) and large == (4000, 3008):
        text = "kept, sides rounded to 32"
    else:
        short_edge = min(small)
        assert small == (short_edge, short_edge * 5 // 4) and min(large) == short_edge, small
        text = f"short edge scaled to {short_edge} (up or down), sides rounded to 32"
    if "max_area" in inspect.signature(resolve).parameters:
        assert resolve(image(1024, 1024), max_area=256 * 256) == (256, 256)
        text += "; timeline-guided requests: scaled down to the output's area"
    return text


def image_file() -> str:
    formats = ", ".join(
        sorted(name.upper() for name in preprocessing.MINIMAX_H3_REFERENCE_IMAGE_FORMATS)
    )
    return f"≤ {mib(preprocessing.MINIMAX_H3_MAX_REFERENCE_IMAGE_BYTES)}; {formats}"


def video_meta(**fields: Any) -> dict[str, Any]:
    meta = {"width": 1280, "height": 720, "fps": 24.0, "duration": 5.0, "file_size": 1 << 20}
    meta.update(format_names=("mov", "mp4"), video_codec="h264", audio_codecs=("aac",))
    return {**meta, **fields}


def video_ok(**fields: Any) -> bool:
    meta = video_meta(**fields)
    return accepts(lambda: video._validate_reference_video_metadata(meta, index=0, source="-"))


def video_limits() -> str:
    low = boundary(lambda n: video_ok(width=n, height=n), 1000, 1)
    high = boundary(lambda n: video_ok(width=n, height=n), 1000, 10**5)
    broad = boundary(lambda w: video_ok(width=w, height=1000), 1000, 10**4) / 1000
    narrow = boundary(lambda w: video_ok(width=w, height=1000), 1000, 1) / 1000
    fps = [float_boundary(lambda f: video_ok(fps=f), 30.0, end) for end in (1.0, 1000.0)]
    seconds = [float_boundary(lambda d: video_ok(duration=d), 5.0, end) for end in (0.0, 1e4)]
    return (
        f"{low}..{high} px a side, aspect {num(narrow)}..{num(broad)}; "
        f"{num(fps[0])}..{num(fps[1])} fps; {num(seconds[0])}..{num(seconds[1])} s each"
    )


def video_file() -> str:
    size = boundary(lambda n: video_ok(file_size=n), 1, 1 << 40)
    assert not video_ok(format_names=("matroska", "webm"))
    assert not video_ok(video_codec="vp9") and not video_ok(audio_codecs=("opus",))
    containers = "/".join(sorted(name.upper() for name in video.MINIMAX_H3_VIDEO_FORMATS))
    codecs = "/".join(sorted(video.MINIMAX_H3_VIDEO_CODECS))
    sound = "/".join(sorted(name.upper() for name in video.MINIMAX_H3_AUDIO_CODECS))
    return f"≤ {mib(size)}; {containers}; {codecs}; sound track {sound}"


def videos_together() -> str:
    total = video.MINIMAX_H3_MAX_REFERENCE_TOTAL_DURATION
    over = video.MINIMAX_H3_REFERENCE_DURATION_EPSILON
    least = video.MINIMAX_H3_MIN_REFERENCE_DURATION
    source = inspect.getsource(video.prepare_reference_videos)
    assert "MINIMAX_H3_MAX_REFERENCE_TOTAL_DURATION - total_duration" in source
    return (
        f"≤ {num(total)} s in all (up to {num(over)} s over: trimmed); "
        f"start_time_seconds must leave ≥ {num(least)} s"
    )


def video_resize() -> str:
    small, large = video._reference_video_shape(320, 256), video._reference_video_shape(3840, 2160)
    short_edge, pixels = video.MINIMAX_H3_BASE_SHORT_EDGE, video.MINIMAX_H3_MAX_PIXELS
    canvas = f"canvas of a {short_edge}-px short edge (≤ {pixels:,} px)"
    assert large == (1344, 768), large
    if small == (320, 256):
        return f"larger than the {canvas}: fitted to it; smaller: kept, sides rounded to 32"
    assert small == (960, 768), small
    return f"fitted to the {canvas}, smaller ones enlarged"


RATE = 1_000_000  # samples per second of the probe waveforms: durations to 1 µs


def audio_limits() -> str:
    def ok(*seconds: float) -> bool:
        waves = [(waveform(round(s * RATE)), RATE) for s in seconds]
        return accepts(lambda: video.validate_reference_audio_waveforms(waves))

    low = float_boundary(lambda s: ok(s), 5.0, 0.0)
    high = float_boundary(lambda s: ok(s), 5.0, 1e4)
    total = float_boundary(lambda s: ok(low, s - low), low * 2, 1e4)
    size = mib(video.MINIMAX_H3_MAX_AUDIO_BYTES)
    containers = "/".join(sorted(name.upper() for name in video.MINIMAX_H3_AUDIO_FORMATS))
    # a standalone reference longer than the output: its first output-length seconds
    ten_seconds = torch.zeros(1, 100)
    [(cut, _)] = encoder_processing._effective_audio_inputs(
        [], [(ten_seconds, 10)], max_standalone_seconds=4.5
    )
    assert cut.shape[-1] == 45
    return (
        f"{num(low)}..{num(high)} s each, ≤ {num(total)} s in all; ≤ {size}; {containers}; "
        "cut to the output's length"
    )


def timeline_guides() -> str:
    try:
        from vllm_omni.model_executor.models.minimax_h3 import timeline_guides as guides
    except ImportError:
        return "none (no timeline guides)"
    frames = 107

    def clip_ok(length: int) -> bool:
        clip = np.zeros((length, 32, 32, 3), dtype=np.uint8)
        value = [{"frame_index": 0, "video": clip}]
        return accepts(
            lambda: guides.prepare_timeline_guides(value, width=32, height=32, num_frames=frames)
        )

    longest = boundary(clip_ok, 5, frames + 100)
    assert guides.normalize_visual_frame_count(longest) == frames
    assert not accepts(lambda: guides.resolve_guide_start(frames, frames))
    return (
        f"frame_index inside the output; a clip ≤ the output's frames + {longest - frames}, "
        "cut to 17k+5 frames"
    )


def continuation_windows() -> str:
    def ok(window: int) -> bool:
        extra = {"long_video_mode": "continuation", "continuation_window_frames": window}
        return accepts(
            lambda: continuation.resolve_continuation(extra, task="ref2va", step_execution=False)
        )

    grid = [17 * n + 5 for n in range(0, 40)]
    windows = [w for w in grid if ok(w)]
    same = {"long_video_mode": "continuation", "continuation_window_frames": 107}
    same["continuation_overlap_frames"] = 107
    assert not accepts(
        lambda: continuation.resolve_continuation(same, task="ref2va", step_execution=False)
    )
    extra = {"long_video_mode": "continuation"}
    window, overlap = continuation.resolve_continuation(extra, task="ref2va", step_execution=False)
    return (
        f"window {windows[0]}..{windows[-1]} frames on 17n+5 (default {window}), "
        f"overlap < window (default {overlap})"
    )


def pad_seq_len() -> str:
    ok = lambda n: accepts(lambda: pipeline._resolve_pad_seq_len(n))  # noqa: E731
    step = next(n for n in range(1, 1025) if ok(n))
    high = boundary(lambda k: ok(step * k), 1, 10**9) * step
    return f"a multiple of {step}, ≤ {high:,}"


def product(node: ast.expr) -> int:
    """An integer literal or a product of them (`50 * 1024 * 1024`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    assert isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult), ast.dump(node)
    return product(node.left) * product(node.right)


def http_uploads() -> str:
    """The OpenAI video API's multipart limits, read from its source (it imports uvicorn)."""
    import vllm_omni

    path = Path(vllm_omni.__file__).parent / "entrypoints/openai/video/generation/helpers.py"
    values: dict[str, int] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.startswith("MINIMAX_H3_MAX_REFERENCE_"):
                values[name] = product(node.value)
    count = values["MINIMAX_H3_MAX_REFERENCE_COUNT"]
    sizes = [
        mib(values[f"MINIMAX_H3_MAX_REFERENCE_{kind}_BYTES"])
        for kind in ("IMAGE", "VIDEO", "AUDIO")
    ]
    return f"≤ {count} files; image ≤ {sizes[0]}, video ≤ {sizes[1]}, audio ≤ {sizes[2]}"


ROWS: dict[str, Callable[[], str]] = {
    "output duration (`resolve_minimax_h3_shape`, `max_output_seconds`)": output_duration,
    "output frames as `num_frames` (`resolve_minimax_h3_shape`)": output_frames,
    "output fps": output_fps,
    "explicit `height`/`width` (`resolve_minimax_h3_shape`)": explicit_canvas,
    "canvas without them (`resolve_minimax_h3_output_canvas`)": resolved_canvas,
    "outputs per request (`_resolve_minimax_h3_num_outputs`)": outputs,
    "seed (`_minimax_h3_output_seeds`)": seeds,
    "denoising steps (`minimax_h3_time_shift_sigmas`)": steps,
    "Ref2VA references (`_validate_ref2va_reference_counts`)": ref2va_counts,
    "FL2VA images (`_resolve_fl2va_keyframe_indices`)": fl2va_images,
    "reference image (`resolve_minimax_h3_reference_image_shape`)": image_size,
    "reference image, resized to": image_resize,
    "reference image file (`load_minimax_h3_images`)": image_file,
    "reference video (`_validate_reference_video_metadata`)": video_limits,
    "reference video file": video_file,
    "reference videos together (`prepare_reference_videos`)": videos_together,
    "reference video, resized to (`_reference_video_shape`)": video_resize,
    "reference audio (`validate_reference_audio_files`, `_waveforms`)": audio_limits,
    "timeline guides (`prepare_timeline_guides`)": timeline_guides,
    "continuation windows (`resolve_continuation`)": continuation_windows,
    "`pad_seq_len` (`_resolve_pad_seq_len`)": pad_seq_len,
    "HTTP multipart uploads (`entrypoints/openai/video/generation/helpers.py`)": http_uploads,
}


# -- the doc -----------------------------------------------------------------------------------


def doc_table() -> tuple[list[str], dict[str, list[str]]]:
    """The header and the rows (first cell -> the other cells) of the section's first table."""
    text = DOC.read_text(encoding="utf-8")
    assert HEADING in text, f"{DOC.name} has no '{HEADING}' section"
    section = text.split(HEADING, 1)[1].split("\n#", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    cells = [[cell.strip() for cell in line.strip().strip("|").split(" | ")] for line in lines]
    header, rows = cells[0], cells[2:]
    assert all(len(row) == len(header) for row in rows), "a row whose cells do not match the header"
    return header, {row[0]: row[1:] for row in rows}


def doc_cell(header: list[str], cells: list[str], release: str) -> str:
    """The cell of `release`, following `as <release>` to the column it names."""
    cell = cells[header.index(release) - 1]
    reference = re.fullmatch(r"as (\S+)", cell)
    return doc_cell(header, cells, reference.group(1)) if reference else cell


def test_every_row_of_the_table_is_probed_and_every_probe_has_a_row() -> None:
    header, rows = doc_table()
    assert header[1:4] == ["0.30.0", "0.31.0rc1", "0.32.0rc1"], header
    assert list(rows) == list(ROWS)


@pytest.mark.parametrize("label", list(ROWS))
def test_the_doc_states_the_installed_releases_limit(label: str) -> None:
    header, rows = doc_table()
    if RELEASE not in header:
        pytest.skip(f"vllm-omni {RELEASE}: no column in {DOC.name}'s request-limits table")
    assert doc_cell(header, rows[label], RELEASE) == ROWS[label](), label


def test_the_verify_defaults_and_the_test_fixtures_are_requests_upstream_accepts() -> None:
    """The references prenoise offers as examples are within these limits (no media decoded:
    their sizes and lengths as `standins` writes them)."""
    from prenoise.integrations.vllm_omni.h3_request import H3Request
    from prenoise.integrations.vllm_omni.standins import (
        synthetic_audio,
        synthetic_image,
        synthetic_video,
    )

    def default(function: Callable[..., object], name: str) -> Any:
        return inspect.signature(function).parameters[name].default

    image_size = default(synthetic_image, "width"), default(synthetic_image, "height")
    preprocessing.resolve_minimax_h3_reference_image_shape(image(*image_size))
    width, height = default(synthetic_video, "width"), default(synthetic_video, "height")
    meta = video_meta(width=width, height=height, duration=default(synthetic_video, "seconds"))
    video._validate_reference_video_metadata(meta, index=0, source="-")
    seconds, rate = default(synthetic_audio, "seconds"), default(synthetic_audio, "sample_rate")
    video.validate_reference_audio_waveforms([(torch.empty(1, round(seconds * rate)), rate)])
    request = H3Request(references=())
    extra = {"duration": request.duration}
    height, width, frames, *_ = shape(extra=extra, height=request.height, width=request.width)
    assert (width, height) == (request.width, request.height)  # an explicit canvas: kept
    assert request.duration == encoder_processing.MINIMAX_H3_MIN_OUTPUT_SECONDS
    assert frames == 107  # 4 s: 96 frames, aligned up to 17n+5
