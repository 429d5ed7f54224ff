"""Video VAE: shape prediction == encoded shape, streaming == one-shot, one source of truth."""

from __future__ import annotations

import pytest
import torch

from prenoise.ref2va import Ref2VAModels, VideoProcessor


def _frames(n: int, height: int = 64, width: int = 96, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, height, width, 3), dtype=torch.uint8, generator=gen)


def test_image_encodes_to_one_latent_frame(tiny_models: Ref2VAModels) -> None:
    vae = tiny_models.video_vae
    z = vae.encode_image(_frames(1, 70, 100)[0], 64, 96)
    assert z.shape == (1, 24, 1, 4, 6)
    assert vae.predict_video_latent_shape(1, 64, 96) == (1, 4, 6)
    assert vae.predict_video_latent_shape(1, 70, 100) == (1, 4, 6)


@pytest.mark.parametrize(("n", "t"), [(2, 2), (5, 2), (6, 7), (22, 7), (23, 12), (40, 17)])
def test_predicted_shape_equals_encoded(tiny_models: Ref2VAModels, n: int, t: int) -> None:
    vae = tiny_models.video_vae
    z = vae.encode_video(_frames(n, 64, 128), 64, 128)
    assert z.shape == (1, 24, t, 4, 8)
    assert vae.predict_video_latent_shape(n, 64, 128) == tuple(z.shape[2:])


def test_unaligned_size_is_floored_and_cropped(tiny_models: Ref2VAModels) -> None:
    vae = tiny_models.video_vae
    z = vae.encode_video(_frames(6, 50, 80), 50, 80)
    assert z.shape == (1, 24, 7, 2, 4)
    assert vae.predict_video_latent_shape(6, 50, 80) == (7, 2, 4)


@pytest.mark.parametrize("sizes", [[1] * 23, [3, 7, 13], [5, 17, 1], [22, 1], [10, 0, 13]])
def test_chunked_encode_equals_one_shot(tiny_models: Ref2VAModels, sizes: list[int]) -> None:
    vae = tiny_models.video_vae
    frames = _frames(sum(sizes), seed=3)
    one_shot = vae.encode_video(frames)
    chunked = vae.encode_stream(iter(frames.split(sizes)))
    assert torch.equal(one_shot, chunked)


def test_prediction_and_encode_share_processor_methods(
    tiny_models: Ref2VAModels, monkeypatch: pytest.MonkeyPatch
) -> None:
    vae = tiny_models.video_vae
    original = VideoProcessor.padded_frame_count

    def padded_more(self: VideoProcessor, num_frames: int) -> int:
        return original(self, num_frames) + 17

    assert vae.predict_video_latent_shape(6, 64, 96) == (7, 4, 6)
    monkeypatch.setattr(VideoProcessor, "padded_frame_count", padded_more)
    assert vae.predict_video_latent_shape(6, 64, 96) == (12, 4, 6)
    assert vae.encode_video(_frames(6)).shape == (1, 24, 12, 4, 6)

    def aligned_small(self: VideoProcessor, height: int, width: int) -> tuple[int, int]:
        return 32, 32

    monkeypatch.setattr(VideoProcessor, "aligned_size", aligned_small)
    assert vae.predict_video_latent_shape(6, 64, 96) == (12, 2, 2)
    assert vae.encode_video(_frames(6), 64, 96).shape == (1, 24, 12, 2, 2)


def test_padding_repeats_last_frame() -> None:
    proc = VideoProcessor()
    frames = _frames(3, 32, 32)
    padded = proc.pad_frames(frames, proc.padded_frame_count(3))
    assert padded.shape[0] == 5
    assert torch.equal(padded[3], frames[2]) and torch.equal(padded[4], frames[2])
    assert proc.padded_frame_count(1) == 1 and proc.padded_frame_count(360) == 362


def test_padded_tail_matches_explicit_padding(tiny_models: Ref2VAModels) -> None:
    vae = tiny_models.video_vae
    frames = _frames(9)
    explicit = vae.processor.pad_frames(frames, 22)
    assert torch.equal(vae.encode_video(frames), vae.encode_video(explicit))


def test_resize_cover_crop() -> None:
    proc = VideoProcessor()
    frames = torch.zeros(2, 40, 100, 3, dtype=torch.uint8)
    frames[:, :, 30:70] = 255  # a white band in the centre survives the centre crop
    out = proc.resize_frames(frames, 32, 32)
    assert out.shape == (2, 32, 32, 3) and out.dtype == torch.uint8
    assert int(out[0, 16, 16, 0]) == 255


def test_decode_streams_groups(tiny_models: Ref2VAModels) -> None:
    vae = tiny_models.video_vae
    z = vae.encode_video(_frames(23))
    chunks = list(vae.decode_stream(z))
    assert [c.shape[0] for c in chunks] == [5, 17, 17]
    assert all(c.shape[1:] == (64, 96, 3) and c.dtype == torch.uint8 for c in chunks)
    assert vae.decode(vae.encode_image(_frames(1)[0])).shape == (1, 64, 96, 3)
    with pytest.raises(ValueError, match="5k \\+ 2"):
        vae.decode(torch.zeros(1, 24, 4, 4, 6))


def test_zero_frames_is_an_error(tiny_models: Ref2VAModels) -> None:
    with pytest.raises(ValueError, match="zero frames"):
        tiny_models.video_vae.encode_stream(iter([]))
