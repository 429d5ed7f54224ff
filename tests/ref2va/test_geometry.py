"""The contract's geometry table, patchify order and round trip."""

from __future__ import annotations

import pytest
import torch

from prenoise.ref2va import geometry as g


@pytest.mark.parametrize(
    ("frames", "latent"),
    [(1, 2), (5, 2), (6, 2), (22, 7), (23, 7), (39, 12), (124, 37), (362, 107)],
)
def test_latent_frames(frames: int, latent: int) -> None:
    assert g.latent_frames(frames) == latent


@pytest.mark.parametrize(
    ("frames", "aligned"), [(1, 5), (5, 5), (6, 22), (22, 22), (23, 39), (124, 124), (360, 362)]
)
def test_align_frames(frames: int, aligned: int) -> None:
    assert g.align_frames_17k5(frames) == aligned


def test_seed_workload_table() -> None:
    assert g.frames_for_duration(15) == 362
    assert g.frames_for_duration(2.0) == 56
    assert g.frames_for_duration(0.01) == 5
    assert g.size_from_short_edge(768, "16:9") == (1344, 768)
    assert g.size_from_short_edge(768, "16:9", "portrait") == (768, 1344)
    geo = g.RequestGeometry.from_duration(15, 1344, 768)
    assert (geo.frames, geo.T, geo.height, geo.width, geo.h, geo.w) == (362, 107, 768, 1344, 48, 84)
    assert geo.audio_t == 603
    assert geo.audio_rows == 1206
    assert geo.video_rows == 107 * 24 * 42
    assert geo.video_latent_shape == (1, 24, 107, 48, 84)
    default = g.RequestGeometry.from_frames(124, 1344, 768)
    assert default.T == 37


def test_floor_size_and_audio_len() -> None:
    assert g.floor_size(1000, 700) == (992, 672)
    assert g.audio_latent_len(124) == round(124 / 24 * 40) == 207
    with pytest.raises(ValueError, match="20x700"):
        g.floor_size(20, 700)


@pytest.mark.parametrize("bad", [0, -1.5, float("nan")])
def test_bad_duration_names_value(bad: float) -> None:
    with pytest.raises(ValueError, match=str(bad).replace(".", r"\.")):
        g.frames_for_duration(bad)


def test_cover_crop_box() -> None:
    assert g.cover_crop_box(1920, 1080, 1344, 768) == (1365, 768, 10, 0)
    assert g.cover_crop_box(100, 100, 64, 32) == (64, 64, 0, 16)


def _reference_patchify(x: torch.Tensor) -> torch.Tensor:
    """Hand-written loops: row (t, h', w'), feature (c, pt, ph, pw) with patch (1, 2, 2)."""
    _, c, t, h, w = x.shape
    rows = torch.empty(t * (h // 2) * (w // 2), c * 4)
    for ti in range(t):
        for hi in range(h // 2):
            for wi in range(w // 2):
                r = (ti * (h // 2) + hi) * (w // 2) + wi
                for ci in range(c):
                    for ph in range(2):
                        for pw in range(2):
                            f = (ci * 2 + ph) * 2 + pw
                            rows[r, f] = x[0, ci, ti, hi * 2 + ph, wi * 2 + pw]
    return rows


def test_patchify_matches_hand_written_reference() -> None:
    x = torch.randn(1, 24, 3, 4, 6, generator=torch.Generator().manual_seed(0))
    rows = g.patchify(x)
    assert rows.shape == (3 * 2 * 3, 96)
    assert torch.equal(rows, _reference_patchify(x))
    contract = x.view(1, 24, 3, 1, 2, 2, 3, 2).permute(0, 2, 4, 6, 1, 3, 5, 7).contiguous()
    assert torch.equal(rows, contract.view(-1, 96))


def test_unpatchify_round_trip() -> None:
    x = torch.randn(1, 24, 5, 8, 10, generator=torch.Generator().manual_seed(1))
    rows = g.patchify(x)
    assert torch.equal(g.unpatchify(rows, (1, 24, 5, 8, 10)), x)
    with pytest.raises(ValueError, match="do not fit"):
        g.unpatchify(rows[:-1], (1, 24, 5, 8, 10))
