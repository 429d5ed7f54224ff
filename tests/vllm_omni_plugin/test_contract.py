"""The plugin's exact log texts, its prediction's refusals and the unused-condition-noise path."""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from prenoise.integrations.vllm_omni import h3_shapes, plugin, request
from prenoise.integrations.vllm_omni.settings import ENABLE_ENV
from prenoise.integrations.vllm_omni.verification import H3Request, run_arm, verify_request


@pytest.fixture
def said(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> pytest.LogCaptureFixture:
    monkeypatch.setattr(plugin, "_said", set())
    caplog.set_level(logging.WARNING, logger="prenoise.vllm_omni")
    return caplog


def test_disabled_says_so_exactly_once(
    monkeypatch: pytest.MonkeyPatch, said: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(ENABLE_ENV, "0")
    plugin.register()
    plugin.register()
    assert said.messages == ["prenoise: vLLM-Omni plugin disabled by PRENOISE_VLLM_OMNI=0"]


def test_missing_vllm_omni_says_not_installed(
    monkeypatch: pytest.MonkeyPatch, said: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(plugin, "_vllm_omni_version", lambda: None)
    plugin.register()
    assert not plugin.is_installed()
    assert said.messages == ["prenoise: vllm-omni is not installed; plugin did nothing"]


@pytest.mark.parametrize(
    "vae",
    [
        SimpleNamespace(),  # no model
        SimpleNamespace(model=SimpleNamespace(vae_ratio=8)),  # no processor
        SimpleNamespace(model=SimpleNamespace(vae_ratio=8, processor=SimpleNamespace())),
    ],
)
def test_a_vae_without_the_upstream_hooks_is_not_predicted(vae: object) -> None:
    assert h3_shapes._predict_video_shape(vae, (5, 64, 64, 3)) is None


def test_condition_noise_the_pipeline_does_not_use_is_dropped(
    image_ref: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With noise_aug == 1 upstream mixes no condition noise: the first output's prepared draw
    is discarded (taken and released at once), the unprepared second output has none to drop,
    and the outputs still equal plugin-off."""
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

    monkeypatch.setattr(upstream, "MINIMAX_H3_IMGVID_COND_TIMESTEP", 1.0)
    discarded: list[int] = []
    real = request.RequestPreparation.discard_condition_noise

    def spy(self: request.RequestPreparation, seed: int) -> None:
        pending = len(self.executor.pending)
        real(self, seed)
        discarded.append(pending - len(self.executor.pending))

    monkeypatch.setattr(request.RequestPreparation, "discard_condition_noise", spy)
    result = verify_request(H3Request((image_ref,), seed=5, outputs=2))
    assert result.equal, result.report.summary()
    assert discarded == [1, 0]  # the second output was not prepared: nothing to drop


_MISSING = object()


class _Vae:
    """The hooks `_predict_video_shape` reads from upstream's VAE adapter, recorded."""

    def __init__(self, staged_frames: int | None, **model: object) -> None:
        processor = SimpleNamespace(
            get_latent_length=lambda frames: (frames - 1) // 4 + 1,
            _align_to_total_patch_size=lambda h, w: (-(-h // 32) * 32, -(-w // 32) * 32),
        )
        hooks = {"vae_ratio": 8, "processor": processor, **model}
        self.model = SimpleNamespace(**{k: v for k, v in hooks.items() if v is not _MISSING})
        self.staged_frames = staged_frames
        self.calls: list[tuple[tuple[int, ...], object, object]] = []

    def _stream_prepare_video_tensor(self, frames: Any, device: object) -> torch.Tensor | None:
        self.calls.append((frames.shape, frames.dtype, device))
        if self.staged_frames is None:
            return None
        return torch.empty((1, self.staged_frames, 1, 1, 3), device="meta")


@pytest.fixture
def streamed_prep(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_omni.diffusion.models.minimax_h3 import vae as upstream_vae

    monkeypatch.setattr(upstream_vae, "_legacy_encode_prep_enabled", lambda: False)


def test_the_prediction_counts_the_frames_upstream_stages(streamed_prep: None) -> None:
    """Upstream's own staging decides the frame count (here 13 staged from 10 decoded), run on
    a 1x1-pixel uint8 stand-in on the meta device."""
    vae = _Vae(staged_frames=13)
    predicted = h3_shapes._predict_video_shape(vae, (10, 100, 200, 3))
    assert predicted == (4, 128 // 8, 224 // 8)
    assert [type(v) for v in predicted] == [int, int, int]  # keys compare with upstream's ints
    assert vae.calls == [((10, 1, 1, 3), np.dtype(np.uint8), torch.device("meta"))]
    unstaged = _Vae(staged_frames=None)  # staging declined: the decoded count stands
    assert h3_shapes._predict_video_shape(unstaged, (10, 100, 200, 3)) == (3, 16, 28)


def test_the_legacy_prep_counts_decoded_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_omni.diffusion.models.minimax_h3 import vae as upstream_vae

    monkeypatch.setattr(upstream_vae, "_legacy_encode_prep_enabled", lambda: True)
    vae = _Vae(staged_frames=13)
    assert h3_shapes._predict_video_shape(vae, (10, 100, 200, 3)) == (3, 16, 28)
    assert vae.calls == []


@pytest.mark.parametrize(
    "model",
    [
        {"vae_ratio": "8"},  # not an int
        {"vae_ratio": _MISSING},
        {"processor": SimpleNamespace(get_latent_length=len)},  # no alignment hook
        {"processor": SimpleNamespace(_align_to_total_patch_size=max)},  # no latent length
    ],
)
def test_incomplete_hooks_are_not_predicted(streamed_prep: None, model: dict[str, Any]) -> None:
    assert h3_shapes._predict_video_shape(_Vae(13, **model), (10, 100, 200, 3)) is None


def test_frames_that_are_not_thwc_are_not_predicted(streamed_prep: None) -> None:
    assert h3_shapes._predict_video_shape(_Vae(13), (10, 100, 200)) is None


def test_original_is_upstreams_own_whether_or_not_installed() -> None:
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

    methods = ("forward", "_initial_noise", "encode_prompt")
    functions = (
        "prepare_encoder_inputs",
        "minimax_h3_imgvid_cond_noise_aug_rows",
        "minimax_h3_audio_cond_noise_aug_rows",
    )
    expected = {n: upstream.MiniMaxH3Pipeline.__dict__[n] for n in methods}
    expected |= {n: getattr(upstream, n) for n in functions}
    plugin.uninstall()
    assert {n: plugin.original(n) for n in expected} == expected
    plugin.install()
    assert {n: plugin.original(n) for n in expected} == expected
    assert upstream.MiniMaxH3Pipeline.__dict__["forward"] is not expected["forward"]


@pytest.mark.parametrize("plugin_on", [True, False])
def test_an_arm_that_cannot_be_what_it_says_is_refused(
    plugin_on: bool, image_ref: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another plugin's patch makes `install` (before prenoise) or `uninstall` (after it) do
    nothing: both arms would run the same code, so verification refuses to compare them."""
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

    if not plugin_on:
        plugin.install()
    patched = functools.wraps(upstream.prepare_encoder_inputs)(
        functools.partial(upstream.prepare_encoder_inputs)
    )
    monkeypatch.setattr(upstream, "prepare_encoder_inputs", patched)
    action = "installed in" if plugin_on else "uninstalled from"
    with pytest.raises(RuntimeError, match=f"prenoise could not be {action} MiniMax-H3"):
        run_arm(H3Request((image_ref,), seed=1), plugin_on=plugin_on)
    assert plugin.is_installed() is not plugin_on
