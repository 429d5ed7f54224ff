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


def truncated_faststart_mp4(path: Path) -> Path:
    """The synthetic 2 s reference (48 frames, H.264 + AAC) remuxed with its header first
    (`movflags=faststart`) and cut to its first half: the header still declares 48 frames."""
    from prenoise.ref2va.media import make_synthetic_reference

    whole = make_synthetic_reference(path.with_name(f"whole-{path.name}"), 2.0, 64, 64)
    faststart = path.with_name(f"faststart-{path.name}")
    with (
        av.open(str(whole)) as source,
        av.open(str(faststart), "w", format="mp4", options={"movflags": "faststart"}) as target,
    ):
        streams = {s.index: target.add_stream_from_template(s) for s in source.streams}
        for packet in source.demux():
            if packet.dts is None:  # the end-of-stream flush packets carry nothing
                continue
            packet.stream = streams[packet.stream.index]
            target.mux(packet)
    data = faststart.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path
