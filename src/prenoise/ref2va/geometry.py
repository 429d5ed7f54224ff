"""Pure geometry of a Ref2VA request, exactly as the preparation contract states it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import torch

from prenoise.noise.layouts import Patchify

FPS = 24
"""Frames per second of every Ref2VA video."""
LATENT_CHANNELS = 24
"""Channels of a video latent."""
SPATIAL_FACTOR = 16
"""Spatial compression of the video VAE."""
SIZE_MULTIPLE = 32
"""Height and width are floored to multiples of this."""
FIRST_GROUP_FRAMES = 5
"""Frames of the first temporal group (5 frames -> 2 latent frames)."""
GROUP_FRAMES = 17
"""Frames of every following temporal group (17 frames -> 5 latent frames)."""
AUDIO_RATE_HZ = 40
"""Audio latent frames per second."""
AUDIO_CHANNELS = 2
"""Audio latents are stereo, channel-major."""
AUDIO_FEATURES = 32
"""Features of one audio latent row."""
PATCH = (1, 2, 2)
"""Patch of the video latent: (pt, ph, pw)."""
VIDEO_ROW_FEATURES = LATENT_CHANNELS * PATCH[0] * PATCH[1] * PATCH[2]
"""Features of one patchified video row (96)."""


def align_frames_17k5(num_frames: int) -> int:
    """Align a frame count UP to the next ``17k + 5`` (at least 5)."""
    if num_frames <= FIRST_GROUP_FRAMES:
        return FIRST_GROUP_FRAMES
    groups = -(-(num_frames - FIRST_GROUP_FRAMES) // GROUP_FRAMES)
    return FIRST_GROUP_FRAMES + groups * GROUP_FRAMES


def frames_for_duration(seconds: float) -> int:
    """Frames of a request lasting ``seconds``: ``round(24 * d)`` aligned up to ``17k + 5``."""
    if not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"duration must be a positive number of seconds, got {seconds!r}")
    return align_frames_17k5(round(FPS * seconds))


def latent_frames(num_frames: int) -> int:
    """Latent frames of ``num_frames`` frames: 2 if ``F <= 5``, else ``((F - 5) // 17) * 5 + 2``."""
    if num_frames < 1:
        raise ValueError(f"frame count must be at least 1, got {num_frames}")
    if num_frames <= FIRST_GROUP_FRAMES:
        return 2
    return ((num_frames - FIRST_GROUP_FRAMES) // GROUP_FRAMES) * 5 + 2


def floor_size(width: int, height: int) -> tuple[int, int]:
    """Floor ``(width, height)`` to multiples of 32; raise if either becomes zero."""
    out_w = (int(width) // SIZE_MULTIPLE) * SIZE_MULTIPLE
    out_h = (int(height) // SIZE_MULTIPLE) * SIZE_MULTIPLE
    if out_w <= 0 or out_h <= 0:
        raise ValueError(
            f"size {width}x{height} is smaller than {SIZE_MULTIPLE} pixels on one side"
        )
    return out_w, out_h


def parse_aspect(aspect: str) -> Fraction:
    """Parse an aspect ratio such as ``"16:9"`` into ``Fraction(16, 9)`` (long over short)."""
    try:
        long_s, short_s = aspect.split(":")
        ratio = Fraction(int(long_s), int(short_s))
    except (ValueError, ZeroDivisionError) as exc:
        raise ValueError(f"aspect must look like '16:9', got {aspect!r}") from exc
    if ratio <= 0:
        raise ValueError(f"aspect must be positive, got {aspect!r}")
    return ratio if ratio >= 1 else 1 / ratio


def size_from_short_edge(
    short_edge: int, aspect: str = "16:9", orientation: str = "landscape"
) -> tuple[int, int]:
    """``(width, height)`` for a short edge and aspect, both floored to multiples of 32.

    Short edge 768 at 16:9 landscape gives 1344x768 (768*16/9 = 1365.3, floored to 1344).
    """
    if orientation not in ("landscape", "portrait"):
        raise ValueError(f"orientation must be 'landscape' or 'portrait', got {orientation!r}")
    long_edge = math.floor(short_edge * parse_aspect(aspect))
    if orientation == "landscape":
        return floor_size(long_edge, short_edge)
    return floor_size(short_edge, long_edge)


def audio_latent_len(num_frames: int) -> int:
    """Audio latent frames of a ``num_frames`` video: ``round(F / 24 * 40)``."""
    return round(num_frames / FPS * AUDIO_RATE_HZ)


def cover_crop_box(
    src_width: int, src_height: int, width: int, height: int
) -> tuple[int, int, int, int]:
    """Scale-to-cover then centre-crop: ``(scaled_w, scaled_h, left, top)``.

    The source is scaled uniformly so that it covers ``width x height``, then a centred
    ``width x height`` window starting at ``(left, top)`` is cut out of the scaled image.
    """
    if src_width <= 0 or src_height <= 0:
        raise ValueError(f"source size must be positive, got {src_width}x{src_height}")
    scale = max(width / src_width, height / src_height)
    scaled_w = max(width, round(src_width * scale))
    scaled_h = max(height, round(src_height * scale))
    return scaled_w, scaled_h, (scaled_w - width) // 2, (scaled_h - height) // 2


def patchify(x: torch.Tensor, patch: tuple[int, int, int] = PATCH) -> torch.Tensor:
    """``[n, c, t, h, w]`` -> rows ``[n * t' * h' * w', c * pt * ph * pw]`` (core `Patchify`).

    Rows are in (n, t', h', w') order and features in (c, pt, ph, pw) order; for ``n == 1`` and
    patch (1, 2, 2) this is the contract's ``[T * h/2 * w/2, 96]``.
    """
    return Patchify(patch).apply(x)


def unpatchify(
    rows: torch.Tensor,
    shape: tuple[int, int, int, int, int],
    patch: tuple[int, int, int] = PATCH,
) -> torch.Tensor:
    """Inverse of :func:`patchify`: rows back to a contiguous ``[n, c, t, h, w]`` tensor."""
    n, c, t, h, w = shape
    pt, ph, pw = patch
    expected = (n * (t // pt) * (h // ph) * (w // pw), c * pt * ph * pw)
    if tuple(rows.shape) != expected:
        raise ValueError(f"rows of shape {tuple(rows.shape)} do not fit {shape}: need {expected}")
    v = rows.reshape(n, t // pt, h // ph, w // pw, c, pt, ph, pw)
    return v.permute(0, 4, 1, 5, 2, 6, 3, 7).contiguous().view(n, c, t, h, w)


@dataclass(frozen=True)
class RequestGeometry:
    """Geometry of one request: frames, latent sizes and audio length."""

    frames: int
    T: int
    height: int
    width: int
    h: int
    w: int
    audio_t: int

    @classmethod
    def from_frames(cls, frames: int, width: int, height: int) -> RequestGeometry:
        """Geometry for ``frames`` (aligned up to 17k+5) at ``width x height`` (floored to 32)."""
        aligned = align_frames_17k5(frames)
        out_w, out_h = floor_size(width, height)
        return cls(
            frames=aligned,
            T=latent_frames(aligned),
            height=out_h,
            width=out_w,
            h=out_h // SPATIAL_FACTOR,
            w=out_w // SPATIAL_FACTOR,
            audio_t=audio_latent_len(aligned),
        )

    @classmethod
    def from_duration(cls, seconds: float, width: int, height: int) -> RequestGeometry:
        """Geometry for a duration in seconds at ``width x height``."""
        return cls.from_frames(frames_for_duration(seconds), width, height)

    @property
    def video_latent_shape(self) -> tuple[int, int, int, int, int]:
        """Shape of the video latent ``(1, 24, T, h, w)``."""
        return (1, LATENT_CHANNELS, self.T, self.h, self.w)

    @property
    def video_rows(self) -> int:
        """Patchified video rows ``T * (h/2) * (w/2)``."""
        return self.T * (self.h // PATCH[1]) * (self.w // PATCH[2])

    @property
    def audio_rows(self) -> int:
        """Audio rows ``2 * audio_t`` (stereo, channel-major)."""
        return AUDIO_CHANNELS * self.audio_t

    @property
    def seconds(self) -> float:
        """Duration of the aligned frame count at 24 fps."""
        return self.frames / FPS
