"""Caps on one Ref2VA request: reference media (enforced while decoding) and the memory budget.

Every reference is bounded while it is decoded, not after: decoding stops and a one-line
`MediaError` names the cap that was hit (see `prenoise.ref2va.media.DecodeGuard`). Header facts
(image size, video duration) are checked first, so a file whose header already says "too big"
is refused before a single pixel is decoded. The memory budget bounds the whole request's
estimated allocation (`prenoise.ref2va.budget`).

Set them in a recipe (`limits:`), with the `--max-reference-*` / `--memory-budget` options of
`prenoise generate|verify|bench|serve`, or in `ServeSettings.recipe`; service clients cannot
raise them.
"""

from __future__ import annotations

import argparse
from typing import Any

from pydantic import BaseModel, ByteSize, ConfigDict, Field

from prenoise.ref2va.geometry import FPS

__all__ = ["Limits", "add_limit_arguments", "describe_cap", "limit_overrides"]


class Limits(BaseModel):
    """Caps on one request; the defaults allow 2-minute, 8K references and any size that fits."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_reference_frames: int = Field(default=120 * FPS, ge=1)
    """Frames of one video reference at 24 fps (audio: this many 24ths of a second)."""
    max_decoded_frames: int = Field(default=1200 * FPS, ge=1)
    """Frames decoded from one video file at its own rate (10 x the above: up to 240 fps)."""
    max_frame_pixels: int = Field(default=2**25, ge=1)
    """Pixels (width x height) of one decoded frame or image (33.5 M: 8K UHD fits)."""
    max_reference_pixels: int = Field(default=2**35, ge=1)
    """Pixels decoded from one reference, all frames together (34.4 G: 2 min of 4K at 24 fps)."""
    memory_budget: ByteSize | None = None
    """Bytes one request may allocate (e.g. `8GiB`); None: the memory available at the check."""

    @property
    def max_audio_seconds(self) -> float:
        """Seconds of audio one reference may decode (`max_reference_frames / 24`)."""
        return self.max_reference_frames / FPS


_FLAGS: dict[str, tuple[str, Any, str]] = {
    "max_reference_frames": (
        "--max-reference-frames",
        int,
        "cap on frames of one video reference at 24 fps, and on its audio (N/24 s)",
    ),
    "max_decoded_frames": (
        "--max-decoded-frames",
        int,
        "cap on frames decoded from one video at its own rate",
    ),
    "max_frame_pixels": (
        "--max-frame-pixels",
        int,
        "cap on width x height of one decoded frame or image, checked from the header first",
    ),
    "max_reference_pixels": (
        "--max-reference-pixels",
        int,
        "cap on pixels decoded from one reference, all frames together",
    ),
    "memory_budget": (
        "--memory-budget",
        str,
        "bytes one request may allocate, e.g. 8GiB; bigger requests are refused before any "
        "model loads",
    ),
}


def describe_cap(key: str, value: object) -> str:
    """How an error names a cap: `limits.KEY=VALUE (--FLAG)`."""
    return f"limits.{key}={value} ({_FLAGS[key][0]})"


def add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    """The `--max-reference-*` and `--memory-budget` options (they override the recipe's)."""
    group = parser.add_argument_group("limits (override the recipe's `limits:`)")
    for key, (flag, kind, help_text) in _FLAGS.items():
        default = Limits.model_fields[key].default
        shown = "the memory available at the check" if default is None else f"{default:,}"
        group.add_argument(
            flag,
            dest=key,
            type=kind,
            metavar="N" if kind is int else "SIZE",
            help=f"{help_text} (default: {shown})",
        )


def limit_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The limit options given on the command line (unset ones left out)."""
    return {key: getattr(args, key) for key in _FLAGS if getattr(args, key, None) is not None}
