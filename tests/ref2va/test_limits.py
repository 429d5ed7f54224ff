"""Reference media are bounded while they decode: caps named in one-line errors, nothing kept."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from hostile_media import huge_png, timestamp_jump_mp4
from prenoise.cli.commands import main
from prenoise.ref2va import media
from prenoise.ref2va.conditioning import validate_references
from prenoise.ref2va.config import ReferenceSpec, load_recipe
from prenoise.ref2va.limits import Limits
from prenoise.ref2va.media import (
    MediaError,
    iter_video_frames,
    probe_video,
    read_audio,
    read_image,
    reading,
    synthetic_frames,
    synthetic_tone,
    write_mp4,
    write_wav,
)

TINY = Path(__file__).with_name("tiny-recipe.yaml")


def _cap(key: str, value: int) -> str:
    return re.escape(f"above the cap limits.{key}={value}")


def test_timestamp_jump_is_refused_from_its_header(tmp_path: Path) -> None:
    path = timestamp_jump_mp4(tmp_path / "jump.mp4")
    assert path.stat().st_size < 4096
    assert probe_video(path).frames_at_24fps == 10 * 3600 * 24 + 1  # the header believes it
    with pytest.raises(MediaError, match=_cap("max_reference_frames", 2880)):
        validate_references([ReferenceSpec(kind="video", path=path)])
    # max_seconds truncates below the cap: then the same file is fine (3 s = 72 frames)
    assert validate_references([ReferenceSpec(kind="video", path=path, max_seconds=3)]) != []


def test_timestamp_jump_is_stopped_while_decoding(tmp_path: Path) -> None:
    """Whatever the header says, decoding stops at the cap: no frame past it is produced."""
    path = timestamp_jump_mp4(tmp_path / "jump.mp4")
    frames = iter_video_frames(path, 32, 32, limits=Limits(max_reference_frames=100))
    got = []
    with pytest.raises(MediaError, match=_cap("max_reference_frames", 100)) as info:
        for frame in frames:
            got.append(frame)
    assert len(got) == 100
    assert str(info.value).startswith(f"{path}: more than 100 frames at 24 fps")
    # the default cap stops the real 10-hour file at 2880 frames, too
    count = 0
    with pytest.raises(MediaError, match="more than 2880 frames at 24 fps"):
        for _ in iter_video_frames(path, 32, 32):
            count += 1
    assert count == 2880


def test_decoded_frames_and_pixels_are_capped(tmp_path: Path) -> None:
    fast = write_mp4(tmp_path / "240fps.mp4", synthetic_frames(0.5, 64, 64, fps=240), None, fps=240)
    decoded: list[Any] = []
    real = media.DecodeGuard.decoded

    def counting(self: media.DecodeGuard, frame: Any) -> None:
        decoded.append(frame.pts)
        real(self, frame)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(media.DecodeGuard, "decoded", counting)
        with pytest.raises(MediaError, match=_cap("max_decoded_frames", 50)):
            list(iter_video_frames(fast, 32, 32, limits=Limits(max_decoded_frames=50)))
    assert len(decoded) == 51  # refused at the first frame past the cap
    budget = 20 * 64 * 64
    with pytest.raises(MediaError, match=_cap("max_reference_pixels", budget)):
        list(iter_video_frames(fast, 32, 32, limits=Limits(max_reference_pixels=budget)))
    assert len(list(iter_video_frames(fast, 32, 32))) == 12  # 0.5 s at 24 fps, within caps


@pytest.mark.parametrize("side", [8000, 16000])
def test_huge_image_is_refused_from_its_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, side: int
) -> None:
    path = huge_png(tmp_path / "huge.png", side)
    assert path.stat().st_size < 64 * 1024

    def no_decoding(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the image was opened for decoding")

    monkeypatch.setattr(reading.av, "open", no_decoding)
    shown = f"{side}x{side}" if side == 8000 else "more than 178956970 pixels"
    with pytest.raises(MediaError, match=re.escape(shown) + ".*" + _cap("max_frame_pixels", 2**25)):
        validate_references([ReferenceSpec(kind="image", path=path)])
    with pytest.raises(MediaError, match=r"huge\.png"):
        read_image(path, 64, 64)


def test_frame_size_is_checked_from_a_video_header(tmp_path: Path) -> None:
    path = write_mp4(tmp_path / "v.mp4", synthetic_frames(0.2, 128, 96), None)
    with pytest.raises(MediaError, match=re.escape("128x96 (12288 pixels)")):
        probe_video(path, Limits(max_frame_pixels=10_000))
    image = read_image(write_png(tmp_path), limits=Limits(max_frame_pixels=64 * 32))
    assert image.shape == (32, 64, 3)
    with pytest.raises(MediaError, match=_cap("max_frame_pixels", 64 * 32 - 1)):
        read_image(write_png(tmp_path), limits=Limits(max_frame_pixels=64 * 32 - 1))


def write_png(tmp_path: Path) -> Path:
    return media.write_image(tmp_path / "small.png", next(synthetic_frames(0.1, 64, 32))[0])


def test_audio_is_capped_and_huge_max_seconds_do_not_overflow(tmp_path: Path) -> None:
    wav = write_wav(tmp_path / "tone.wav", synthetic_tone(3.0, 16000), 16000)
    one_second = Limits(max_reference_frames=24)
    with pytest.raises(MediaError, match=r"above the audio cap of 1 s \(24 frames at 24 fps: "):
        validate_references([ReferenceSpec(kind="audio", path=wav)], one_second)
    with pytest.raises(MediaError, match="more than 1 s of audio"):
        read_audio(wav, 16000, limits=one_second)
    assert read_audio(wav, 16000, max_seconds=0.5, limits=one_second).shape == (2, 8000)
    assert read_audio(wav, 16000, max_seconds=1e308).shape == (2, 48000)
    spec = ReferenceSpec(kind="audio", path=wav, max_seconds=0.5)
    assert validate_references([spec], one_second) == [None]


def test_caps_come_from_the_recipe_and_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(TINY, tmp_path / "tiny.yaml")
    base = load_recipe(tmp_path / "tiny.yaml")
    assert base.limits == Limits()
    args = ["verify", "--recipe", "tiny.yaml", "--max-reference-frames", "5"]
    assert main(args) == 2  # the tiny reference is 12 frames
    out = capsys.readouterr().out.strip()
    assert out.startswith("error:") and "Traceback" not in out
    assert "limits.max_reference_frames=5 (--max-reference-frames)" in " ".join(out.split())
    (tmp_path / "capped.yaml").write_text(
        (tmp_path / "tiny.yaml").read_text() + "\nlimits: {max_reference_frames: 5}\n"
    )
    assert load_recipe(tmp_path / "capped.yaml").limits.max_reference_frames == 5
    assert main(["verify", "--recipe", "capped.yaml"]) == 2
    assert "max_reference_frames=5" in capsys.readouterr().out
    assert main(["verify", "--recipe", "tiny.yaml", "--memory-budget", "lots"]) == 2
    assert "memory_budget" in capsys.readouterr().out
