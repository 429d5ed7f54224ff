"""Ref2VA media with PyAV: one reading layer that enforces the caps as it decodes, and writers.

- `reading`: probe, decode and resample references (images, video at 24 fps, audio), bounded as
  they decode — the only way the pipeline reads a file;
- `caps`: `DecodeGuard`, the running counts and header checks `reading` applies, and `MediaError`;
- `demux`: truncated files told apart from resource failures (EAGAIN/ENOMEM);
- `writing`: MP4 (renamed into place only when whole), PNG and WAV;
- `synthetic`: generated reference files for recipes and tests.

Imports go one way: `synthetic` → `writing` → `caps`; `reading` → `caps`, `demux` → `caps`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prenoise.ref2va.media.caps import DecodeGuard, MediaError
    from prenoise.ref2va.media.reading import (
        DEFAULT_CHUNK_FRAMES,
        VideoInfo,
        check_audio_header,
        iter_video_chunks,
        iter_video_frames,
        probe_audio,
        probe_video,
        read_audio,
        read_audio_if_any,
        read_image,
        require_file,
    )
    from prenoise.ref2va.media.synthetic import (
        make_synthetic_reference,
        synthetic_frames,
        synthetic_tone,
    )
    from prenoise.ref2va.media.writing import video_codec_name, write_image, write_mp4, write_wav

_HOME = {
    "DecodeGuard": "caps",
    "MediaError": "caps",
    "DEFAULT_CHUNK_FRAMES": "reading",
    "VideoInfo": "reading",
    "check_audio_header": "reading",
    "iter_video_chunks": "reading",
    "iter_video_frames": "reading",
    "probe_audio": "reading",
    "probe_video": "reading",
    "read_audio": "reading",
    "read_audio_if_any": "reading",
    "read_image": "reading",
    "require_file": "reading",
    "make_synthetic_reference": "synthetic",
    "synthetic_frames": "synthetic",
    "synthetic_tone": "synthetic",
    "video_codec_name": "writing",
    "write_image": "writing",
    "write_mp4": "writing",
    "write_wav": "writing",
}
"""Where each public name lives. Names are imported on first use (PEP 562): `caps` (and so
`MediaError`) needs no PyAV, so the CLI can name media errors without the `ref2va` extra."""


__all__ = [
    "DEFAULT_CHUNK_FRAMES",
    "DecodeGuard",
    "MediaError",
    "VideoInfo",
    "check_audio_header",
    "iter_video_chunks",
    "iter_video_frames",
    "make_synthetic_reference",
    "probe_audio",
    "probe_video",
    "read_audio",
    "read_audio_if_any",
    "read_image",
    "require_file",
    "synthetic_frames",
    "synthetic_tone",
    "video_codec_name",
    "write_image",
    "write_mp4",
    "write_wav",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
