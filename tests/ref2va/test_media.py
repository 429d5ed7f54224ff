"""Media I/O: synthetic MP4 round trip, 24 fps resampling, atomic writes, clear errors."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import av
import pytest
import torch

from prenoise.ref2va import (
    MediaError,
    iter_video_chunks,
    probe_video,
    read_audio,
    read_audio_if_any,
    read_image,
    write_image,
    write_mp4,
)
from prenoise.ref2va.media import synthetic_frames, synthetic_tone, write_wav


def test_synthetic_reference_has_video_and_audio(synthetic_mp4: Path) -> None:
    with av.open(str(synthetic_mp4)) as container:
        assert len(container.streams.video) == 1 and len(container.streams.audio) == 1
        assert container.streams.video[0].codec_context.name == "h264"
        assert container.streams.audio[0].codec_context.name == "aac"
    info = probe_video(synthetic_mp4)
    assert (info.width, info.height, info.has_audio, info.frames_at_24fps) == (128, 96, True, 24)
    chunks = list(iter_video_chunks(synthetic_mp4, 128, 96, chunk_frames=10))
    assert [c.shape[0] for c in chunks] == [10, 10, 4]
    assert chunks[0].shape[1:] == (96, 128, 3) and chunks[0].dtype == torch.uint8
    audio = read_audio(synthetic_mp4, 16000)
    assert audio.shape == (2, 16000) and audio.dtype == torch.float32
    rms = audio[:, 2000:-2000].pow(2).mean(dim=1).sqrt()
    torch.testing.assert_close(rms, torch.full((2,), 0.3 / 2**0.5), atol=0.02, rtol=0)


def test_decode_resizes_to_target(synthetic_mp4: Path) -> None:
    chunks = list(iter_video_chunks(synthetic_mp4, 64, 64, max_frames=5))
    assert sum(c.shape[0] for c in chunks) == 5 and chunks[0].shape[1:] == (64, 64, 3)


def test_frame_rate_is_resampled_by_timestamp(tmp_path: Path) -> None:
    frames = torch.stack([torch.full((32, 32, 3), 20 * i, dtype=torch.uint8) for i in range(12)])
    path = write_mp4(tmp_path / "12fps.mp4", [frames], None, fps=12)
    out = torch.cat(list(iter_video_chunks(path, 32, 32)))
    assert out.shape[0] == 24
    means = out.float().mean(dim=(1, 2, 3))
    assert torch.equal(means[0::2], means[1::2])
    assert (means[2::2] > means[0:-2:2]).all()


def test_write_mp4_is_atomic(tmp_path: Path) -> None:
    def broken() -> Iterator[torch.Tensor]:
        yield from synthetic_frames(0.5, 64, 64)
        raise RuntimeError("encoder input failed")

    target = tmp_path / "out.mp4"
    with pytest.raises(RuntimeError, match="encoder input failed"):
        write_mp4(target, broken(), synthetic_tone(0.5, 16000))
    assert list(tmp_path.iterdir()) == []
    write_mp4(target, synthetic_frames(0.5, 64, 64), synthetic_tone(0.5, 16000))
    assert [p.name for p in tmp_path.iterdir()] == ["out.mp4"]
    assert read_audio(target).shape == (2, 8000)


def test_image_round_trip(tmp_path: Path) -> None:
    image = next(synthetic_frames(0.1, 96, 64))[0]
    path = write_image(tmp_path / "ref.png", image)
    assert torch.equal(read_image(path), image)
    assert read_image(path, 32, 32).shape == (32, 32, 3)


def test_audio_clip_is_resampled_to_stereo(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "tone.wav", synthetic_tone(1.0, 8000)[:1], 8000)
    audio = read_audio(path, 16000)
    assert audio.shape == (2, 16000)
    assert torch.equal(audio[0], audio[1])


def test_media_errors_name_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "missing.mp4"
    with pytest.raises(MediaError, match=re.escape("missing.mp4: no such file")):
        list(iter_video_chunks(missing))
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(b"not media" * 100)
    with pytest.raises(MediaError, match=re.escape("garbage.mp4: cannot read media")):
        read_image(garbage)
    wav = write_wav(tmp_path / "only-audio.wav", torch.zeros(2, 800), 16000)
    with pytest.raises(MediaError, match=re.escape("only-audio.wav: video has no frames")):
        list(iter_video_chunks(wav))
    no_audio = write_mp4(tmp_path / "silent.mp4", synthetic_frames(0.2, 32, 32), None)
    assert read_audio_if_any(no_audio) is None
    with pytest.raises(MediaError, match=re.escape("silent.mp4: no audio stream")):
        read_audio(no_audio)
    assert issubclass(MediaError, ValueError)
