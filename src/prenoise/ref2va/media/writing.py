"""Writing media with PyAV: MP4 (H.264 + AAC), PNG, WAV, each renamed into place only when whole."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import av
import numpy as np
import torch

from prenoise.guards.atomic import atomic_output, write_atomic
from prenoise.ref2va import geometry
from prenoise.ref2va.media.caps import MediaError

__all__ = ["video_codec_name", "write_image", "write_mp4", "write_wav"]


def video_codec_name() -> str:
    """Best H.264 encoder the bundled FFmpeg has (``libx264``), else ``mpeg4``."""
    for name in ("libx264", "libopenh264", "mpeg4"):
        if name in av.codecs_available:
            return name
    raise MediaError("PyAV has no H.264 or MPEG-4 encoder")


# x264 cpu-flag names (x264 common/cpu.c) for the /proc/cpuinfo flags that imply them. AVX-512 is
# left out on purpose (see `_x264_cpu_options`); so are XOP/FMA4 (old AMD only, speed only).
_X264_CPU_NAMES = (
    ("sse", "MMX2"),
    ("sse", "SSE"),
    ("sse2", "SSE2"),
    ("pni", "SSE3"),
    ("ssse3", "SSSE3"),
    ("sse4_1", "SSE4.1"),
    ("sse4_2", "SSE4.2"),
    ("sse4_2", "SSE2Fast"),
    ("abm", "LZCNT"),
    ("avx", "AVX"),
    ("fma", "FMA3"),
    ("bmi1", "BMI1"),
    ("bmi2", "BMI2"),
    ("avx2", "AVX2"),
)


def _x264_cpu_options() -> dict[str, str]:
    """x264 options that keep its AVX-512 code paths off; empty when the CPU has no AVX-512.

    With AVX-512 (seen on AMD Zen 5, PyAV 18's bundled x264) the same frames encode to different
    bytes from one call to the next for widths such as 96, 160 or 224: those paths read memory
    the encoder never wrote. Without them the bytes are deterministic and encoding is as fast.
    The remaining flags are the CPU's own (from /proc/cpuinfo), never more.
    """
    flags = _cpu_flags()
    if "avx512f" not in flags:
        return {}
    names = dict.fromkeys(name for flag, name in _X264_CPU_NAMES if flag in flags)
    return {"x264-params": "asm=" + ",".join(names)} if names else {}


def _cpu_flags() -> frozenset[str]:
    """The `flags` of the first CPU in /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def write_mp4(
    path: str | os.PathLike[str],
    frames: Iterable[torch.Tensor],
    audio: torch.Tensor | None = None,
    fps: int = geometry.FPS,
    sample_rate: int = 16000,
    crf: int = 18,
    preset: str = "veryfast",
) -> Path:
    """Write uint8 frame chunks ``[n, H, W, 3]`` (H.264) and stereo audio ``[2, n]`` (AAC).

    The file is written under a temporary name in the same directory, synced and renamed on
    success (`prenoise.guards.atomic`); on any error the temporary file is removed and no partial
    output is left (a full disk: `OutputWriteError`, one line).
    """
    out = Path(path)
    with atomic_output(out, make_parents=False) as tmp:
        _write_mp4(tmp, iter(frames), audio, fps, sample_rate, crf, preset)
    return out


def _write_mp4(
    path: Path,
    chunks: Iterator[torch.Tensor],
    audio: torch.Tensor | None,
    fps: int,
    sample_rate: int,
    crf: int,
    preset: str,
) -> None:
    """Body of :func:`write_mp4`, writing directly to ``path``."""
    first = next(chunks, None)
    if first is None or first.shape[0] == 0:
        raise MediaError(f"{path}: no frames to write")
    if first.dim() != 4 or first.shape[-1] != 3 or first.dtype != torch.uint8:
        raise ValueError(f"frames must be uint8 [n, H, W, 3], got {first.dtype} {first.shape}")
    height, width = int(first.shape[1]), int(first.shape[2])
    with av.open(str(path), "w", format="mp4") as container:
        codec = video_codec_name()
        vstream: Any = container.add_stream(codec, rate=fps)
        vstream.width, vstream.height, vstream.pix_fmt = width, height, "yuv420p"
        if codec == "libx264":
            vstream.options = {"crf": str(crf), "preset": preset, **_x264_cpu_options()}
        astream: Any = None
        if audio is not None:
            astream = container.add_stream("aac", rate=sample_rate, layout="stereo")
        if astream is not None and audio is not None:
            _encode_audio(container, astream, audio, sample_rate)
        chunk: torch.Tensor | None = first
        del first
        while chunk is not None:
            _encode_frames(container, vstream, chunk)
            # no reference to this chunk while the next one is made (a decoder's next group)
            chunk = None
            chunk = next(chunks, None)
        container.mux(vstream.encode(None))


def _encode_frames(container: Any, stream: Any, chunk: torch.Tensor) -> None:
    """Encode uint8 frames ``[n, H, W, 3]`` into the video `stream`."""
    for arr in chunk.detach().cpu().numpy():
        frame = av.VideoFrame.from_ndarray(arr, format="rgb24")
        container.mux(stream.encode(frame))


def _encode_audio(container: Any, stream: Any, audio: torch.Tensor, sample_rate: int) -> None:
    """Encode a whole stereo waveform ``[2, n]`` into ``stream``."""
    wav = audio.detach().to("cpu", torch.float32)
    if wav.dim() == 1:
        wav = wav.unsqueeze(0)
    if wav.shape[0] == 1:
        wav = wav.expand(2, -1)
    arr = np.ascontiguousarray(wav.clamp(-1.0, 1.0).numpy())
    frame = av.AudioFrame.from_ndarray(arr, format="fltp", layout="stereo")
    frame.sample_rate = sample_rate
    frame.pts = 0
    container.mux(stream.encode(frame))
    container.mux(stream.encode(None))


def write_image(path: str | os.PathLike[str], image: torch.Tensor) -> Path:
    """Write a uint8 RGB image ``[H, W, 3]`` as PNG."""
    arr = image.detach().cpu().numpy()
    codec = av.CodecContext.create("png", "w")
    codec.width, codec.height, codec.pix_fmt = arr.shape[1], arr.shape[0], "rgb24"
    packets = codec.encode(av.VideoFrame.from_ndarray(arr, format="rgb24"))
    packets += codec.encode(None)
    return write_atomic(path, b"".join(bytes(p) for p in packets))


def write_wav(path: str | os.PathLike[str], audio: torch.Tensor, sample_rate: int) -> Path:
    """Write a stereo waveform ``[2, n]`` in [-1, 1] as 16-bit PCM WAV."""
    wav = audio.detach().to("cpu", torch.float32)
    wav = wav.unsqueeze(0) if wav.dim() == 1 else wav
    wav = wav.expand(2, -1) if wav.shape[0] == 1 else wav
    pcm = (wav.clamp(-1.0, 1.0) * 32767.0).round().to(torch.int16).T.contiguous().numpy()
    out = Path(path)
    with atomic_output(out) as tmp, av.open(str(tmp), "w", format="wav") as container:
        stream: Any = container.add_stream("pcm_s16le", rate=sample_rate, layout="stereo")
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="stereo")
        frame.sample_rate = sample_rate
        frame.pts = 0
        container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return out
