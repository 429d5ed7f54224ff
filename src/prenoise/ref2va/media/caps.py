"""Bounds on decoding one reference: header checks, FFmpeg's `max_pixels`, running counts.

`DecodeGuard` is the one place that bounds a decode: every loop in `prenoise.ref2va.media`
reports each decoded frame, each frame emitted at 24 fps and each audio block to it, and it
raises a one-line `MediaError` naming the cap (or `Cancelled`) before the over-cap data is kept.
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import Any

from prenoise.guards.cancel import CancelEvent, raise_if_cancelled
from prenoise.ref2va.geometry import FPS
from prenoise.ref2va.limits import Limits, describe_cap

__all__ = ["DecodeGuard", "MediaError", "bounded_stream", "check_image_header", "decoder_options"]


class MediaError(ValueError):
    """A media file is missing, unreadable, or has no usable stream; the message names it."""


class DecodeGuard:
    """Counts what one reference decodes and stops it at the first cap it passes, or at cancel.

    Every decode loop calls `decoded(frame)` per frame the file gives, `emitted()` per frame
    resampled to 24 fps, and `audio(samples)` per block of audio; each raises a one-line
    `MediaError` naming the cap (or `Cancelled`) before the over-cap data is kept.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        limits: Limits | None = None,
        cancel: CancelEvent | None = None,
    ) -> None:
        self.path = Path(path)
        self.limits = limits or Limits()
        self.cancel = cancel
        self.decoded_frames = 0
        self.emitted_frames = 0
        self.pixels = 0

    def refuse(self, what: str, key: str, fix: str) -> MediaError:
        """The one-line error for `what` passing cap `key`, with how to fix it."""
        cap = describe_cap(key, getattr(self.limits, key))
        return MediaError(f"{self.path}: {what}, above the cap {cap}; {fix}")

    def check_size(self, width: int, height: int, what: str = "frames") -> None:
        """Refuse a frame or image size (from a header or a frame) above `max_frame_pixels`."""
        if width * height > self.limits.max_frame_pixels:
            raise self.refuse(
                f"{what} of {width}x{height} ({width * height} pixels)",
                "max_frame_pixels",
                "use a smaller reference or raise the cap",
            )

    def decoded(self, frame: Any) -> None:
        """Account one decoded frame of the file (before it is converted or kept)."""
        raise_if_cancelled(self.cancel, f"decoding {self.path}")
        self.decoded_frames += 1
        if self.decoded_frames > self.limits.max_decoded_frames:
            raise self.refuse(
                f"more than {self.limits.max_decoded_frames} decoded frames",
                "max_decoded_frames",
                "trim the reference, set its max_seconds, or raise the cap",
            )
        self.check_size(int(frame.width), int(frame.height))
        self.pixels += int(frame.width) * int(frame.height)
        if self.pixels > self.limits.max_reference_pixels:
            raise self.refuse(
                f"more than {self.limits.max_reference_pixels} decoded pixels",
                "max_reference_pixels",
                "use a shorter or smaller reference, set its max_seconds, or raise the cap",
            )

    def emitted(self) -> None:
        """Account one frame about to be given at 24 fps."""
        raise_if_cancelled(self.cancel, f"decoding {self.path}")
        self.emitted_frames += 1
        if self.emitted_frames > self.limits.max_reference_frames:
            raise self.refuse(
                f"more than {self.limits.max_reference_frames} frames at {FPS} fps",
                "max_reference_frames",
                "trim the reference, set its max_seconds, or raise the cap",
            )

    def check_audio_seconds(self, seconds: float) -> None:
        """Refuse an audio duration read from a header above `max_audio_seconds`."""
        if seconds > self.limits.max_audio_seconds:
            raise self._audio_refusal(f"{seconds:.1f} s of audio (from its header)")

    def audio(self, samples: int, sample_rate: int) -> None:
        """Refuse once `samples` decoded samples pass `max_audio_seconds` at `sample_rate`."""
        raise_if_cancelled(self.cancel, f"decoding {self.path}")
        seconds = self.limits.max_audio_seconds
        if samples > math.ceil(seconds * sample_rate):
            raise self._audio_refusal(f"more than {seconds:g} s of audio")

    def _audio_refusal(self, what: str) -> MediaError:
        """Audio is capped in seconds, derived from the frame cap: name both."""
        frames = self.limits.max_reference_frames
        cap = describe_cap("max_reference_frames", frames)
        return MediaError(
            f"{self.path}: {what}, above the audio cap of {self.limits.max_audio_seconds:g} s "
            f"({frames} frames at {FPS} fps: {cap}); trim the reference, set its max_seconds, "
            "or raise the cap"
        )


FFMPEG_MAX_PIXELS = 2**31 - 1
"""The largest `max_pixels` FFmpeg accepts (its option's range is 0..INT_MAX; it decodes no
larger frame anyway). A larger cap, such as `--max-frame-pixels 1e18`, made opening the decoder
fail with ERANGE, which was reported as the reference being undecodable."""


def decoder_options(limits: Limits | None) -> dict[str, str]:
    """Decoder options that make FFmpeg refuse frames above the per-frame pixel cap (capped at
    what FFmpeg accepts; `DecodeGuard` still applies the whole cap to every frame)."""
    cap = min((limits or Limits()).max_frame_pixels, FFMPEG_MAX_PIXELS)
    return {"max_pixels": str(cap)}


def bounded_stream(stream: Any, guard: DecodeGuard, what: str) -> Any:
    """`stream` with its header size checked and its decoder capped at `max_frame_pixels`."""
    width, height = int(stream.codec_context.width), int(stream.codec_context.height)
    if width and height:
        guard.check_size(width, height, what)
    stream.codec_context.options = decoder_options(guard.limits)
    return stream


def check_image_header(path: Path, guard: DecodeGuard) -> bool:
    """Check an image's size from its header alone (Pillow decodes no pixels to read it).

    True when the header was read; False when Pillow does not know the format (FFmpeg then
    decodes it, still bounded by its `max_pixels`).
    """
    try:
        from PIL import Image
    except ImportError:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            with Image.open(path) as image:
                width, height = image.size
        except Image.DecompressionBombError:
            # Pillow refuses, without saying the size, images above 2 * MAX_IMAGE_PIXELS.
            bound = 2 * int(Image.MAX_IMAGE_PIXELS or 0)
            if bound >= guard.limits.max_frame_pixels:
                raise guard.refuse(
                    f"an image of more than {bound} pixels",
                    "max_frame_pixels",
                    "use a smaller reference or raise the cap",
                ) from None
            return False
        except Exception:  # not a format Pillow knows (or a broken header): FFmpeg decides
            return False
    guard.check_size(width, height, "an image")
    return True
