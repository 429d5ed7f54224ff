"""Reading media with PyAV, bounded as it decodes: images, videos at 24 fps in chunks, audio.

The one layer the pipeline reads references through. Every read is bounded by `Limits` while
it decodes (`prenoise.ref2va.media.caps.DecodeGuard`): header sizes are checked before any pixel
is decoded (image headers with Pillow, which decodes nothing), FFmpeg's own `max_pixels` stops
its decoders from allocating a larger frame, and frames, pixels and audio samples are counted as
they come, so a file whose header lies (timestamps that jump by hours, a wrong frame count) is
stopped at the cap instead of materialised. Reads also take a `cancel` event, polled once per
decoded or emitted frame. Truncated files are told from resource failures by
`prenoise.ref2va.media.demux`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import torch

from prenoise.guards.cancel import CancelEvent
from prenoise.guards.path_checks import not_a_file, path_problem
from prenoise.ref2va import geometry
from prenoise.ref2va.limits import Limits
from prenoise.ref2va.media.caps import (
    DecodeGuard,
    MediaError,
    bounded_stream,
    check_image_header,
    decoder_options,
)
from prenoise.ref2va.media.demux import (
    RESOURCE_ERRNOS,
    PacketCount,
    check_complete,
    counted_frames,
    resource_failure,
)

__all__ = [
    "DEFAULT_CHUNK_FRAMES",
    "VideoInfo",
    "check_audio_header",
    "iter_video_chunks",
    "iter_video_frames",
    "probe_audio",
    "probe_video",
    "read_audio",
    "read_audio_if_any",
    "read_image",
    "require_file",
]

DEFAULT_CHUNK_FRAMES = 17
"""Frames per decoded chunk (one temporal group of the video VAE)."""


@dataclass(frozen=True)
class VideoInfo:
    """Header facts of a video file."""

    path: Path
    width: int
    height: int
    duration_s: float
    has_audio: bool
    frames_at_24fps: int
    """Frames :func:`iter_video_frames` gives at 24 fps: ``ceil(duration * 24)`` (exact)."""


def require_file(path: str | os.PathLike[str]) -> Path:
    """`path` if it is a file; else a :class:`MediaError` saying what it is (a name the OS
    refuses, missing, a directory, a device, something else)."""
    p = Path(path)
    problem = path_problem(p)
    if problem is not None:
        raise MediaError(f"{p}: the path {problem}")
    if p.is_file():
        return p
    raise MediaError(f"{p}: {not_a_file(p)}")


def _open(path: str | os.PathLike[str], limits: Limits | None = None) -> Any:
    """Open a media file for reading, with a one-line :class:`MediaError` on failure.

    FFmpeg's `max_pixels` (from `limits`) already applies to the frames it decodes while
    probing the file, so opening a huge image allocates nothing large.
    """
    p = require_file(path)
    try:
        return av.open(str(p), options=decoder_options(limits))
    except (av.FFmpegError, OSError, ValueError) as exc:
        failure = resource_failure(p, exc)
        if failure is not None:
            raise failure from exc
        raise MediaError(f"{p}: cannot read media ({type(exc).__name__}: {exc})") from exc


def _frame_to_array(frame: Any, width: int | None, height: int | None) -> np.ndarray:
    """Convert a decoded frame to RGB uint8 ``[H, W, 3]``, cover-scaled and centre-cropped."""
    if width is None or height is None:
        return np.asarray(frame.to_ndarray(format="rgb24"))
    scaled_w, scaled_h, left, top = geometry.cover_crop_box(
        frame.width, frame.height, width, height
    )
    try:
        rgb = frame.reformat(
            width=scaled_w, height=scaled_h, format="rgb24", interpolation="BILINEAR"
        ).to_ndarray()
    except av.FFmpegError as exc:
        if getattr(exc, "errno", None) in RESOURCE_ERRNOS:  # no memory for the scaler (ulimit -v)
            raise MemoryError(
                f"scaling a {frame.width}x{frame.height} frame to {scaled_w}x{scaled_h}: {exc}"
            ) from exc
        # The request's size failed here, not the file: say so (callers blame FFmpegErrors on
        # the file they decode).
        raise MediaError(
            f"cannot scale a {frame.width}x{frame.height} frame to {scaled_w}x{scaled_h} "
            f"for the requested {width}x{height} output ({exc})"
        ) from exc
    return np.ascontiguousarray(rgb[top : top + height, left : left + width])


def read_image(
    path: str | os.PathLike[str],
    width: int | None = None,
    height: int | None = None,
    *,
    limits: Limits | None = None,
) -> torch.Tensor:
    """Decode an image (PNG, JPEG, ...) to uint8 RGB ``[H, W, 3]``, optionally cover-cropped.

    The size is checked against `limits.max_frame_pixels` from the header, before decoding.
    """
    guard = DecodeGuard(path, limits)
    header_read = check_image_header(require_file(path), guard)
    with _open(path, guard.limits) as container:
        if not container.streams.video:
            raise MediaError(f"{path}: no image stream")
        stream = bounded_stream(container.streams.video[0], guard, "an image")
        try:
            for frame in container.decode(stream):
                guard.decoded(frame)
                return torch.from_numpy(_frame_to_array(frame, width, height))
        except av.FFmpegError as exc:
            failure = resource_failure(path, exc)
            if failure is not None:
                raise failure from exc
            # Without a header size, the decoder's own pixel cap may be what refused it.
            cap = guard.limits.max_frame_pixels
            hint = "" if header_read else f"; images above {cap} pixels are refused"
            raise MediaError(f"{path}: cannot decode image ({exc}{hint})") from exc
    raise MediaError(f"{path}: image has no frames")


def probe_video(path: str | os.PathLike[str], limits: Limits | None = None) -> VideoInfo:
    """Read the header of a video: size, duration, whether it has audio.

    Refuses a frame size above `limits.max_frame_pixels` (the duration is the caller's to cap).
    """
    guard = DecodeGuard(path, limits)
    with _open(path, guard.limits) as container:
        if not container.streams.video:
            raise MediaError(f"{path}: video has no frames (no video stream)")
        stream = bounded_stream(container.streams.video[0], guard, "frames")
        if stream.duration is not None and stream.time_base is not None:
            duration = Fraction(stream.duration) * Fraction(stream.time_base)
        elif container.duration is not None:
            duration = Fraction(container.duration, av.time_base)
        else:
            duration = Fraction(0)
        return VideoInfo(
            path=Path(path),
            width=int(stream.codec_context.width),
            height=int(stream.codec_context.height),
            duration_s=float(duration),
            has_audio=bool(container.streams.audio),
            frames_at_24fps=math.ceil(duration * geometry.FPS),
        )


def probe_audio(path: str | os.PathLike[str]) -> float:
    """Seconds of the first audio stream from the header (0.0 when the header does not say)."""
    with _open(path) as container:
        if not container.streams.audio:
            raise MediaError(f"{path}: no audio stream")
        stream = container.streams.audio[0]
        if stream.duration is not None and stream.time_base is not None:
            return float(stream.duration * stream.time_base)
        if container.duration is not None:
            return container.duration / av.time_base
        return 0.0


def check_audio_header(
    path: str | os.PathLike[str], limits: Limits, max_seconds: float | None = None
) -> float:
    """The audio seconds a reference will decode, from its header (:func:`probe_audio`, at most
    `max_seconds`); a :class:`MediaError` naming the cap, before any sample is decoded, when
    that is above `limits.max_audio_seconds`."""
    seconds = probe_audio(path)
    if max_seconds is not None:
        seconds = min(seconds, max_seconds)
    DecodeGuard(path, limits).check_audio_seconds(seconds)
    return seconds


def iter_video_frames(
    path: str | os.PathLike[str],
    width: int | None = None,
    height: int | None = None,
    fps: int = geometry.FPS,
    max_frames: int | None = None,
    *,
    limits: Limits | None = None,
    cancel: CancelEvent | None = None,
) -> Iterator[np.ndarray]:
    """Yield RGB uint8 frames ``[H, W, 3]`` resampled to ``fps`` by timestamp.

    Output frame ``i`` shows the source frame displayed at time ``i / fps`` (from the first
    frame's timestamp). Frames are cover-scaled and centre-cropped to ``width x height``.
    ``max_frames`` stops (truncates) the video; `limits` refuses it (`MediaError`) as soon as
    a cap is passed, whatever the header says; `cancel` stops it between frames.
    """
    emitted = 0
    guard = DecodeGuard(path, limits, cancel)
    with _open(path, guard.limits) as container:
        if not container.streams.video:
            raise MediaError(f"{path}: video has no frames (no video stream)")
        stream = bounded_stream(container.streams.video[0], guard, "frames")
        stream.thread_type = "AUTO"
        rate = stream.average_rate
        step = Fraction(1, fps)
        start: Fraction | None = None
        prev: Any = None
        prev_ts = Fraction(0)
        cached: np.ndarray | None = None
        last_gap: Fraction | None = None
        count = PacketCount()
        try:
            for frame in counted_frames(container, stream, count):
                guard.decoded(frame)
                ts = _timestamp(frame, stream)
                if start is None:
                    start = ts
                ts -= start
                if prev is not None:
                    last_gap = ts - prev_ts
                    while emitted * step < ts:
                        guard.emitted()
                        if cached is None:
                            cached = _frame_to_array(prev, width, height)
                        yield cached
                        emitted += 1
                        if max_frames is not None and emitted >= max_frames:
                            return
                prev, prev_ts, cached = frame, ts, None
        except av.FFmpegError as exc:
            raise resource_failure(path, exc) or MediaError(
                f"{path}: cannot decode video ({exc})"
            ) from exc
        check_complete(path, stream, count)  # the file may end before its header says
        if prev is None:
            raise MediaError(f"{path}: video has no frames")
        duration = Fraction(1, 1) / Fraction(rate) if rate else (last_gap or step)
        while emitted * step < prev_ts + duration and (max_frames is None or emitted < max_frames):
            guard.emitted()
            if cached is None:
                cached = _frame_to_array(prev, width, height)
            yield cached
            emitted += 1


def _timestamp(frame: Any, stream: Any) -> Fraction:
    """Presentation time of a frame as an exact fraction of seconds."""
    if frame.pts is not None and stream.time_base is not None:
        return Fraction(frame.pts) * Fraction(stream.time_base)
    return Fraction(frame.time or 0.0)


def iter_video_chunks(
    path: str | os.PathLike[str],
    width: int | None = None,
    height: int | None = None,
    chunk_frames: int = DEFAULT_CHUNK_FRAMES,
    fps: int = geometry.FPS,
    max_frames: int | None = None,
    *,
    limits: Limits | None = None,
    cancel: CancelEvent | None = None,
) -> Iterator[torch.Tensor]:
    """Yield uint8 chunks ``[n, H, W, 3]`` (``n <= chunk_frames``) of a video at ``fps``.

    Bounded and cancellable frame by frame, as :func:`iter_video_frames`.
    """
    if chunk_frames < 1:
        raise ValueError(f"chunk_frames must be positive, got {chunk_frames}")
    batch: list[np.ndarray] = []
    frames = iter_video_frames(path, width, height, fps, max_frames, limits=limits, cancel=cancel)
    for arr in frames:
        batch.append(arr)
        if len(batch) == chunk_frames:
            yield torch.from_numpy(np.stack(batch))
            batch = []
    if batch:
        yield torch.from_numpy(np.stack(batch))


def read_audio(
    path: str | os.PathLike[str],
    sample_rate: int = 16000,
    max_seconds: float | None = None,
    *,
    limits: Limits | None = None,
    cancel: CancelEvent | None = None,
) -> torch.Tensor:
    """Decode the first audio stream to float32 stereo ``[2, n]`` at ``sample_rate``.

    ``max_seconds`` truncates; more than `limits.max_audio_seconds` of audio is refused while
    decoding (`MediaError`), and `cancel` stops it between blocks.
    """
    audio = read_audio_if_any(path, sample_rate, max_seconds, limits=limits, cancel=cancel)
    if audio is None:
        raise MediaError(f"{path}: no audio stream")
    return audio


def read_audio_if_any(
    path: str | os.PathLike[str],
    sample_rate: int = 16000,
    max_seconds: float | None = None,
    *,
    limits: Limits | None = None,
    cancel: CancelEvent | None = None,
) -> torch.Tensor | None:
    """Like :func:`read_audio`, but ``None`` when the file has no audio stream."""
    guard = DecodeGuard(path, limits, cancel)
    with _open(path, guard.limits) as container:
        if not container.streams.audio:
            return None
        stream = container.streams.audio[0]
        limit = None
        if stream.duration is not None and stream.time_base is not None:
            limit = round(stream.duration * stream.time_base * sample_rate)
        if max_seconds is not None:
            # clamped first: a huge max_seconds (1e308) must not overflow into inf
            seconds = min(max_seconds, guard.limits.max_audio_seconds + 1)
            cap = round(seconds * sample_rate)
            limit = cap if limit is None else min(limit, cap)
        resampler = av.AudioResampler(format="fltp", layout="stereo", rate=sample_rate)
        parts: list[np.ndarray] = []
        samples = 0
        count = PacketCount()
        try:
            for frame in counted_frames(container, stream, count):
                for block in resampler.resample(frame):
                    parts.append(block.to_ndarray())
                    samples += parts[-1].shape[1]
                if limit is not None and samples >= limit:
                    break  # the first `limit` samples are final: no need to decode further
                guard.audio(samples, sample_rate)
            else:
                parts.extend(f.to_ndarray() for f in resampler.resample(None))
                guard.audio(sum(p.shape[1] for p in parts), sample_rate)
                check_complete(path, stream, count)  # read to the end: all of it was there
        except av.FFmpegError as exc:
            raise resource_failure(path, exc) or MediaError(
                f"{path}: cannot decode audio ({exc})"
            ) from exc
    wav = np.concatenate(parts, axis=1) if parts else np.zeros((2, 0), np.float32)
    if limit is not None:
        wav = wav[:, :limit]
    return torch.from_numpy(np.ascontiguousarray(wav, dtype=np.float32))
