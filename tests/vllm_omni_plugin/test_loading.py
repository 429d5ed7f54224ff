"""The entry point, the version guard, the settings and the install/uninstall mechanics."""

from __future__ import annotations

import functools
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from prenoise.integrations.vllm_omni import plugin, support
from prenoise.integrations.vllm_omni.request import RequestPreparation
from prenoise.integrations.vllm_omni.settings import ENABLE_ENV, MISMATCH_ENV, PluginSettings
from prenoise.preparation.prediction import MismatchPolicy


def upstream() -> Any:
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3

    return pipeline_minimax_h3


def originals() -> list[Any]:
    cls = upstream().MiniMaxH3Pipeline
    return [
        cls.__dict__["forward"],
        cls.__dict__["_initial_noise"],
        cls.__dict__["encode_prompt"],
        upstream().prepare_encoder_inputs,
        upstream().minimax_h3_imgvid_cond_noise_aug_rows,
    ]


@pytest.fixture
def fresh_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plugin, "_said", set())


def test_entry_point_is_found_by_vllm_omni(monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm_omni.plugins as omni_plugins

    monkeypatch.setattr(omni_plugins, "omni_plugins_loaded", False)
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    assert "prenoise" in omni_plugins.load_omni_plugins_by_group("vllm_omni.general_plugins")
    omni_plugins.load_omni_general_plugins()
    assert plugin.is_installed()


def test_vllm_plugins_allow_list_excludes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm_omni.plugins as omni_plugins

    monkeypatch.setenv("VLLM_PLUGINS", "someone_else")
    assert omni_plugins.load_omni_plugins_by_group("vllm_omni.general_plugins") == {}


def test_install_twice_is_harmless_and_uninstall_restores_upstream() -> None:
    before = originals()
    plugin.register()
    wrapped = originals()
    plugin.register()
    plugin.install()
    assert originals() == wrapped
    assert all(a is not b for a, b in zip(before, wrapped, strict=True))
    plugin.uninstall()
    assert all(a is b for a, b in zip(before, originals(), strict=True))


def test_a_later_version_with_the_reviewed_code_installs_silently(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fresh_logs: None
) -> None:
    monkeypatch.setattr(plugin, "_vllm_omni_version", lambda: "0.31.0")
    with caplog.at_level(logging.WARNING, logger="prenoise.vllm_omni"):
        plugin.register()
        plugin.register()
    assert plugin.is_installed()
    messages = [r.getMessage() for r in caplog.records if r.name == "prenoise.vllm_omni"]
    assert len(messages) == len(support.current().problems)  # each off path once, if any


def test_env_var_turns_it_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fresh_logs: None
) -> None:
    monkeypatch.setenv(ENABLE_ENV, "0")
    with caplog.at_level(logging.WARNING, logger="prenoise.vllm_omni"):
        plugin.register()
    assert not plugin.is_installed()
    assert "disabled by PRENOISE_VLLM_OMNI=0" in caplog.text


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        (ENABLE_ENV, "off", "PRENOISE_VLLM_OMNI='off': expected one of 0, 1"),
        (
            MISMATCH_ENV,
            "fallback",
            "PRENOISE_VLLM_OMNI_ON_MISMATCH='fallback': expected one of serial, raise",
        ),
        # read by the draws, not the plugin: it used to fail each request at its first draw
        (
            "PRENOISE_NOISE_BACKEND",
            "avx9000",
            "PRENOISE_NOISE_BACKEND='avx9000' is not a known value (accepted: auto, torch, "
            "avx512-fma, avx2-fma, scalar-libm; unset means auto)",
        ),
        (
            "PRENOISE_HUGE_PAGES",
            "yes",
            "PRENOISE_HUGE_PAGES='yes' is not a known value (accepted: 0, 1; unset means 1)",
        ),
    ],
)
def test_a_bad_setting_logs_one_error_and_installs_nothing(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fresh_logs: None,
    name: str,
    value: str,
    why: str,
) -> None:
    """A typo never takes down `vllm serve`: the loader returns, one ERROR line says why."""
    import vllm_omni.plugins as omni_plugins

    monkeypatch.setattr(omni_plugins, "omni_plugins_loaded", False)
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    monkeypatch.setenv(name, value)
    before = originals()
    with caplog.at_level(logging.DEBUG, logger="prenoise"):
        omni_plugins.load_omni_general_plugins()  # what every vLLM-Omni process calls
        plugin.register()
    assert not plugin.is_installed()
    assert all(a is b for a, b in zip(before, originals(), strict=True))
    records = [r for r in caplog.records if r.name.startswith("prenoise")]
    assert [(r.levelname, r.getMessage()) for r in records] == [
        ("ERROR", f"prenoise: {why}; the vLLM-Omni plugin installed nothing")
    ]


def test_a_bad_setting_after_install_runs_upstream_and_says_so_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fresh_logs: None
) -> None:
    plugin.install()
    monkeypatch.setenv(ENABLE_ENV, "on")
    calls: list[Any] = []

    def upstream_forward(pipe: Any, request: Any) -> str:
        calls.append(plugin.current_request())
        return "upstream"

    with caplog.at_level(logging.ERROR, logger="prenoise"):
        results = [plugin._forward(upstream_forward, object(), object()) for _ in range(2)]
    assert results == ["upstream", "upstream"] and calls == [None, None]
    assert caplog.messages == [
        "prenoise: PRENOISE_VLLM_OMNI='on': expected one of 0, 1; requests run upstream's code only"
    ]


def test_settings_defaults() -> None:
    assert PluginSettings.from_env({}) == PluginSettings(
        enabled=True, on_mismatch=MismatchPolicy.FALLBACK, prepare_next_output=False
    )


def test_refuses_to_wrap_another_plugins_patch(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fresh_logs: None
) -> None:
    cls = upstream().MiniMaxH3Pipeline
    theirs = cls.__dict__["_initial_noise"]

    @functools.wraps(theirs)
    def hardware_initial_noise(self: Any, **kwargs: Any) -> Any:
        return theirs(self, **kwargs)

    monkeypatch.setattr(cls, "_initial_noise", hardware_initial_noise)
    with caplog.at_level(logging.WARNING, logger="prenoise.vllm_omni"):
        plugin.install()
    assert not plugin.is_installed()
    assert "already patched by another plugin" in caplog.text


@pytest.mark.parametrize(
    ("task", "extra", "vae_encoder", "reason"),
    [
        ("x2va", {}, True, "task 'x2va'"),
        ("ref2va", {"continuation_prompts": ["a", "b"]}, True, "without continuation mode"),
        ("ref2va", {}, False, "encoder stage"),
    ],
)
def test_ineligible_requests_submit_nothing(
    task: str, extra: dict[str, Any], vae_encoder: bool, reason: str
) -> None:
    pipe = SimpleNamespace(od_config=SimpleNamespace(step_execution=False))
    pipe.load_vae_encoder = vae_encoder
    sampling = SimpleNamespace(extra_args=extra, seed=1, num_outputs_per_prompt=1)
    prepared = SimpleNamespace(media=SimpleNamespace(task=task))
    with RequestPreparation(pipe, sampling, PluginSettings()) as state:
        state.start(prepared)
        assert state.executor.pending == []
    assert state.skipped is not None and reason in state.skipped
