"""Synthetic reference media: a moving colour pattern and a stereo tone, written as real files."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from prenoise.ref2va import geometry
from prenoise.ref2va.media.writing import write_mp4

__all__ = ["make_synthetic_reference", "synthetic_frames", "synthetic_tone"]


def synthetic_frames(
    seconds: float, width: int, height: int, fps: int = geometry.FPS, chunk_frames: int = 24
) -> Iterator[torch.Tensor]:
    """A moving colour pattern as uint8 chunks ``[n, height, width, 3]``."""
    total = round(seconds * fps)
    ys = np.arange(height, dtype=np.int32)[:, None]
    xs = np.arange(width, dtype=np.int32)[None, :]
    for start in range(0, total, chunk_frames):
        batch = []
        for i in range(start, min(total, start + chunk_frames)):
            r = (xs * 256 // width + 4 * i) % 256 + 0 * ys
            g = (ys * 256 // height + 2 * i) % 256 + 0 * xs
            cx = width / 2 + width / 3 * math.cos(2 * math.pi * i / (fps * 2))
            cy = height / 2 + height / 3 * math.sin(2 * math.pi * i / (fps * 2))
            disc = ((xs - cx) ** 2 + (ys - cy) ** 2) < (min(width, height) / 6) ** 2
            b = np.where(disc, 255, 64)
            batch.append(np.stack([r, g, b], axis=-1).astype(np.uint8))
        yield torch.from_numpy(np.stack(batch))


def synthetic_tone(
    seconds: float, sample_rate: int, left_hz: float = 440.0, right_hz: float = 660.0
) -> torch.Tensor:
    """A stereo tone ``[2, n]`` at amplitude 0.3 (different pitch per channel)."""
    t = torch.arange(round(seconds * sample_rate), dtype=torch.float64) / sample_rate
    wav = torch.stack([torch.sin(2 * math.pi * left_hz * t), torch.sin(2 * math.pi * right_hz * t)])
    return (0.3 * wav).to(torch.float32)


def make_synthetic_reference(
    path: str | os.PathLike[str],
    seconds: float,
    width: int,
    height: int,
    fps: int = geometry.FPS,
    sample_rate: int = 44100,
) -> Path:
    """Write a real MP4 (H.264 moving pattern + AAC stereo tone) of ``seconds`` seconds."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds!r}")
    return write_mp4(
        path,
        synthetic_frames(seconds, width, height, fps),
        synthetic_tone(seconds, sample_rate),
        fps=fps,
        sample_rate=sample_rate,
        preset="ultrafast",
    )
