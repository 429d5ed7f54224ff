"""Hostile reference files, small on disk: timestamps that jump by hours, huge images."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image


def timestamp_jump_mp4(path: Path, pts: tuple[int, ...] = (0, 1, 10 * 3600 * 24)) -> Path:
    """An H.264 MP4 of three 64x64 frames at `pts` in time base 1/24 (the last one 10 h in)."""
    with av.open(str(path), "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=24)
        stream.width, stream.height, stream.pix_fmt = 64, 64, "yuv420p"
        stream.time_base = Fraction(1, 24)
        for i, t in enumerate(pts):
            frame = av.VideoFrame.from_ndarray(np.full((64, 64, 3), 40 * i, np.uint8), "rgb24")
            frame.pts, frame.time_base = t, Fraction(1, 24)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return path


def huge_png(path: Path, side: int) -> Path:
    """A black `side` x `side` PNG (1-bit while written, so this process stays small)."""
    Image.new("1", (side, side)).save(path)
    return path
