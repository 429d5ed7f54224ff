"""The plugin's exact log texts, its prediction's refusals and the unused-condition-noise path."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from prenoise.integrations.vllm_omni import plugin, request
from prenoise.integrations.vllm_omni.settings import ENABLE_ENV
from prenoise.integrations.vllm_omni.verification import H3Request, verify_request


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
    monkeypatch.setattr(plugin, "SUPPORTED_VERSIONS", ("0.30.", "0.29."))
    plugin.register()
    assert not plugin.is_installed()
    assert said.messages == [
        "prenoise: vllm-omni (not installed) is not supported (supported: 0.30.x, 0.29.x); "
        "plugin did nothing"
    ]


@pytest.mark.parametrize(
    "vae",
    [
        SimpleNamespace(),  # no model
        SimpleNamespace(model=SimpleNamespace(vae_ratio=8)),  # no processor
        SimpleNamespace(model=SimpleNamespace(vae_ratio=8, processor=SimpleNamespace())),
    ],
)
def test_a_vae_without_the_upstream_hooks_is_not_predicted(vae: object) -> None:
    assert request._predict_video_shape(vae, (5, 64, 64, 3)) is None


def test_condition_noise_the_pipeline_does_not_use_is_dropped(
    image_ref: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With noise_aug == 1 upstream mixes no condition noise: the prepared draw is discarded
    (taken and released at once) and the outputs still equal plugin-off."""
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

    monkeypatch.setattr(upstream, "MINIMAX_H3_IMGVID_COND_TIMESTEP", 1.0)
    discarded: list[int] = []
    real = request.RequestPreparation.discard_condition_noise

    def spy(self: request.RequestPreparation, seed: int) -> None:
        pending = len(self.executor.pending)
        real(self, seed)
        discarded.append(pending - len(self.executor.pending))

    monkeypatch.setattr(request.RequestPreparation, "discard_condition_noise", spy)
    result = verify_request(H3Request((image_ref,), seed=5))
    assert result.equal, result.report.summary()
    assert discarded == [1]
