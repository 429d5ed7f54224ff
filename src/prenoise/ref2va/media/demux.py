"""Reading a stream's packets with a count (to tell a truncated file), and telling which FFmpeg
failures are the file's and which the system's.

A faststart MP4 cut short keeps its whole header (the `moov` box, which declares every frame)
while its data ends early; FFmpeg's demuxer then simply stops, and the frame-threaded decoder
reports nothing, so half a video decoded as if it were all of it. :func:`counted_frames` counts
the packets the file really gave and :func:`check_complete` compares them with the header.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prenoise.guards.budget import memory_limit
from prenoise.ref2va.media.caps import MediaError

__all__ = [
    "RESOURCE_ERRNOS",
    "PacketCount",
    "check_complete",
    "counted_frames",
    "resource_failure",
]

RESOURCE_ERRNOS = frozenset({errno.EAGAIN, errno.ENOMEM})
"""FFmpeg errors that mean "no thread or memory to be had" (its frame threads fail to start with
EAGAIN when the process is out of threads), whatever file is being decoded."""


@dataclass
class PacketCount:
    """Packets one stream gave while it was demuxed (the final flush packet not counted)."""

    packets: int = 0


def counted_frames(container: Any, stream: Any, count: PacketCount) -> Iterator[Any]:
    """The decoded frames of `stream` (as `container.decode(stream)`), counting its packets."""
    for packet in container.demux(stream):
        if packet.dts is not None or packet.size:  # PyAV's end-of-file flush packet has neither
            count.packets += 1
        yield from packet.decode()


def check_complete(path: str | os.PathLike[str], stream: Any, count: PacketCount) -> None:
    """Refuse a stream that gave fewer packets than its header declares frames: a cut file."""
    declared = int(stream.frames or 0)  # 0: the container does not say (not MP4/MOV, say)
    if declared and count.packets < declared:
        raise MediaError(
            f"{path}: the file is truncated: its header declares {declared} {stream.type} "
            f"frames, only {count.packets} are in the file"
        )


def resource_failure(path: str | os.PathLike[str], exc: Exception) -> OSError | None:
    """An `OSError` saying the system, not the file, failed (no thread or memory for the
    decoder), or None when `exc` is about the file."""
    code = getattr(exc, "errno", None)
    if code not in RESOURCE_ERRNOS:
        return None
    return OSError(
        code,
        f"decoding {path}: the system refused the decoder threads or memory "
        f"({os.strerror(code)}); the file is not at fault, retry with fewer processes running "
        f"({memory_limit().described})",
    )
