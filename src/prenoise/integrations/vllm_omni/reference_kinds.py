"""What kind of Ref2VA reference a file is (image, video or audio), from its content alone."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from prenoise.guards.usage import UsageError

__all__ = [
    "UPSTREAM_MAX_IMAGE_SIDE",
    "ReferenceKind",
    "VerifyInputError",
    "check_image_header",
    "reference_kind",
]

ReferenceKind = Literal["image", "video", "audio"]
"""The three kinds of Ref2VA reference upstream accepts (`multi_modal_data` keys)."""

# PyAV opens pictures too, through these demuxers (`image2` by the file name alone, even for a
# text file; `gif`, `apng`: animated pictures): such a file is an image or nothing, and Pillow
# decides which.
_IMAGE_DEMUXERS = ("image2", "image2pipe", "gif", "apng")
_IMAGE_DEMUXER_SUFFIX = "_pipe"


class VerifyInputError(UsageError):
    """Input `vllm-omni-verify` cannot verify (one line, exit status 2)."""


@dataclass(frozen=True)
class _Streams:
    """The kinds of stream PyAV found in a container (their first frame decodes)."""

    video: bool
    audio: bool


def reference_kind(path: Path) -> ReferenceKind:
    """`image`, `video` or `audio`, from the file's content (its name is never looked at).

    An image in one of upstream's formats (Pillow) is an image; otherwise a container with a
    video stream (PyAV; cover art does not count) is a video, one with audio streams only is an
    audio reference; any other picture Pillow reads is an image (upstream's loader then names
    its format in its refusal). Anything else is refused.
    """
    image_format = _image_format(path)
    if image_format in _upstream_image_formats():
        return "image"
    streams = _media_streams(path)
    if streams is not None and streams.video:
        return "video"
    if streams is not None and streams.audio:
        return "audio"
    if image_format is not None:
        return "image"
    raise VerifyInputError(
        f"reference {path}: not an image, video or audio file (neither Pillow nor PyAV can read it)"
    )


def _upstream_image_formats() -> frozenset[str]:
    from vllm_omni.model_executor.models.minimax_h3 import preprocessing

    return frozenset(preprocessing.MINIMAX_H3_REFERENCE_IMAGE_FORMATS)


UPSTREAM_MAX_IMAGE_SIDE = 5760
"""The longest side of a reference image upstream takes (`resolve_minimax_h3_reference_image_shape`:
256..5760 px a side, every reviewed release)."""


def check_image_header(path: Path) -> None:
    """Refuse, from the header alone (no pixel decoded), an image of more pixels than upstream's
    largest (5760x5760): through prenoise's media caps (`check_image_header`), which also refuse
    one Pillow declines to open as a decompression bomb (a PNG declaring 100000x100000)."""
    from prenoise.ref2va.limits import Limits
    from prenoise.ref2va.media.caps import DecodeGuard, MediaError, check_image_header

    side = UPSTREAM_MAX_IMAGE_SIDE

    class UpstreamCap(DecodeGuard):
        def refuse(self, what: str, key: str, fix: str) -> MediaError:
            return MediaError(
                f"reference {self.path}: {what}, read from its header (nothing decoded), over "
                f"the largest image upstream takes ({side}x{side}: 256..{side} px a side); use "
                "a smaller image"
            )

    try:
        check_image_header(path, UpstreamCap(path, Limits(max_frame_pixels=side * side)))
    except MediaError as error:
        raise VerifyInputError(str(error)) from None


def _image_format(path: Path) -> str | None:
    """Pillow's name for the file's image format (lower case), or None if it is no image; an
    image over upstream's size is refused from its header first (`check_image_header`)."""
    from PIL import Image, UnidentifiedImageError

    check_image_header(path)

    try:
        with Image.open(path) as image:
            return str(image.format or "").lower() or None
    except (UnidentifiedImageError, OSError, ValueError):
        return None


def _media_streams(path: Path) -> _Streams | None:
    """The video/audio streams PyAV can open and decode a first frame of; None if none."""
    try:
        import av
    except ImportError:
        raise VerifyInputError(
            f"reference {path}: typing a video or audio reference needs PyAV (pip install av)"
        ) from None
    try:
        container = av.open(str(path))
    except (av.FFmpegError, OSError, ValueError, UnicodeDecodeError):
        return None
    with container:
        format_name = str(container.format.name)
        if format_name in _IMAGE_DEMUXERS or format_name.endswith(_IMAGE_DEMUXER_SUFFIX):
            return None  # a picture (or a name that looks like one): Pillow's to read
        pictures = av.stream.Disposition.attached_pic
        video = [s for s in container.streams.video if not s.disposition & pictures]
        audio = list(container.streams.audio)
        kind = "video" if video else "audio"
        stream = (video or audio or [None])[0]
        if stream is None:
            return None
        try:
            next(container.decode(stream))
        except (av.FFmpegError, StopIteration) as error:
            why = "no frames" if isinstance(error, StopIteration) else str(error)
            raise VerifyInputError(
                f"reference {path}: a {kind} file whose first frame cannot be decoded ({why})"
            ) from None
    return _Streams(video=bool(video), audio=bool(audio))
