"""MiniMax-H3 initial noise, plugin on vs off, through upstream's real stages (SGLang 0.5.23).

A request runs: the plugin's `forward` hook (around a stand-in for the pipeline's stage list)
-> `MiniMaxH3LatentPreparationStage` -> `MiniMaxH3TimestepPreparationStage` ->
`MiniMaxH3DenoisingStage` with a tiny fake DiT. Compared bit for bit (integer views): every
tensor the Denoising stage receives (the batch's latents and every tensor in `batch.extra`),
every input the DiT gets at each step, the stage's outputs, and the global RNG state.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
import torch
from _h3_harness import make_request, recorded_draws, run, same

from prenoise.integrations.sglang import plugin, reviewed, support


def both_arms(
    h3: Any, monkeypatch: pytest.MonkeyPatch, seed: int, short_edge: int, duration: float
) -> tuple[dict[str, Any], dict[str, Any], list[Any], tuple[torch.Tensor, ...]]:
    start = torch.get_rng_state()
    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    off = run(h3, make_request(h3, seed, short_edge, duration))
    rng_off = torch.get_rng_state()
    torch.set_rng_state(start)
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    with recorded_draws() as seen:
        on = run(h3, make_request(h3, seed, short_edge, duration))
    rng_on = torch.get_rng_state()
    return off, on, seen, (start, rng_off, rng_on)


def test_plugin_loaded_by_sglangs_loader(h3: Any) -> None:
    """The entry point ran and its hooks wrap upstream's functions (`apply_plugin_hooks`)."""
    forward = h3.ComposedPipelineBase.forward
    prepare = h3.LatentStage._prepare_denoise_state_from_plan
    assert getattr(forward, "__wrapped__", None) is not None
    assert getattr(prepare, "__wrapped__", None) is not None
    registered = {t for t, hooks in h3.plugins.HookRegistry._hooks.items()
                  for _type, hook, _src in hooks if hook.__module__ == plugin.__name__}  # fmt: skip
    hooks = plugin.HOOKS + plugin.CONDITION_HOOKS + plugin.ROLLOUT_HOOKS + plugin.STREAM_HOOKS
    assert registered == {target for target, _hook in hooks}
    assert support.current().h3_initial and support.current().release == "0.5.23"


@pytest.mark.parametrize(
    ("short_edge", "duration", "seeds"),
    [(64, 4.0, (0, 7, 2**63 - 1)), (128, 5.0, (42, 123456789))],
)
def test_t2va_plugin_on_equals_off(
    h3: Any, monkeypatch: pytest.MonkeyPatch, short_edge: int, duration: float, seeds: Any
) -> None:
    for seed in seeds:
        arms = both_arms(h3, monkeypatch, seed, short_edge, duration)
        off, on, seen, (start, rng_off, rng_on) = arms
        assert len(off) > 10 and any(k.startswith("dit[") for k in off)
        assert same(off, on) == [], seed
        # both draws were prepared, on prenoise's worker, with the request's torch seed
        assert [label for label, *_ in seen] == ["initial_video_noise", "initial_audio_noise"]
        assert all(s == seed % 2**64 and t.startswith("prenoise-sglang") for _l, s, t, _p in seen)
        assert all(t != threading.current_thread().name for _l, _s, t, _p in seen)
        # the Denoising stage received the very tensors drawn on the worker (served, not redrawn)
        assert on["served_ptrs"] == [p for *_, p in seen]
        assert torch.equal(rng_on, rng_off) and torch.equal(rng_on, start)


def test_plan_changed_after_entry_runs_upstreams_draw(
    h3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stage's plan has another seed than the one at entry: the key check refuses the
    prepared draws and upstream draws the stage plan's noise (breaking the key check fails
    this test: the prepared noise of seed 5 would reach the DiT)."""
    import msgspec

    def reseed(batch: Any) -> None:
        plan = batch.extra["minimax_h3_resolved_plan"]
        batch.extra["minimax_h3_resolved_plan"] = msgspec.structs.replace(plan, seed=6)

    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    off = run(h3, make_request(h3, 5, 64, 4.0), before_latents=reseed)
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    with recorded_draws() as seen:
        on = run(h3, make_request(h3, 5, 64, 4.0), before_latents=reseed)
    assert {s for _l, s, _t, _p in seen} == {5}  # prepared for the entry plan's seed ...
    assert same(off, on) == []  # ... and not used


def test_encoder_failure_propagates_and_joins(h3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")

    class EncoderError(RuntimeError):
        pass

    def fail(_batch: Any) -> None:
        raise EncoderError("text encoder failed")

    with recorded_draws(), pytest.raises(EncoderError, match="text encoder failed"):
        run(h3, make_request(h3, 9, 128, 15.0), before_latents=fail)
    alive = [t.name for t in threading.enumerate() if t.name.startswith("prenoise-sglang")]
    assert alive == []


def test_changed_digest_runs_upstream_with_one_line(
    h3: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    key = next(k for k in reviewed.REVIEWED if k.endswith(":MiniMaxH3LatentPreparationStage"))
    monkeypatch.setitem(reviewed.REVIEWED, key, {"000000000000": ("0.5.23",)})
    monkeypatch.setattr(plugin, "_said", set())
    support.reset()
    try:
        hooks_before = {t: list(h) for t, h in h3.plugins.HookRegistry._hooks.items()}
        with caplog.at_level(logging.INFO, logger="prenoise.sglang"):
            plugin.register()
            plugin.register()
        lines = [r for r in caplog.records if r.name == "prenoise.sglang"]
        assert len(lines) == 1 and lines[0].levelno == logging.WARNING
        assert "MiniMaxH3LatentPreparationStage" in lines[0].getMessage()
        assert "upstream's code runs untouched" in lines[0].getMessage()
        assert {t: list(h) for t, h in h3.plugins.HookRegistry._hooks.items()} == hooks_before
        # the hooks already applied in this process pass every call to upstream
        monkeypatch.setenv(plugin.ENABLE_ENV, "0")
        off = run(h3, make_request(h3, 11, 64, 4.0))
        monkeypatch.setenv(plugin.ENABLE_ENV, "1")
        with recorded_draws() as seen:
            on = run(h3, make_request(h3, 11, 64, 4.0))
        assert seen == [] and same(off, on) == []
    finally:
        monkeypatch.undo()
        support.reset()
    assert support.current().h3_initial


def test_disabled_and_bad_setting_register_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(plugin, "_said", set())
    for value, level in (("0", logging.INFO), ("off", logging.ERROR)):
        monkeypatch.setenv(plugin.ENABLE_ENV, value)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="prenoise.sglang"):
            plugin.register()
        (line,) = [r for r in caplog.records if r.name == "prenoise.sglang"]
        assert line.levelno == level and plugin.ENABLE_ENV in line.getMessage()
