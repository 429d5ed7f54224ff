"""Wan and HunyuanVideo initial noise (CPU generator), plugin on vs off, through upstream's real
`InputValidationStage` and shared `LatentPreparationStage` (SGLang 0.5.23, the real pipeline
configs, no checkpoint; a stand-in text encoder between them).

Compared bit for bit (integer views): every tensor field of the request after the latent stage
(what the denoising stage receives: latents, latent ids), its shape fields, the generators'
final states, and the global RNG state.
"""

from __future__ import annotations

import copy
import logging
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from _latents_harness import both_arms, load_env, make_req, recorded, run, same, server_args

from prenoise.integrations.sglang import latents_ahead, plugin, reviewed, support

STANDARD = reviewed.STANDARD_LATENTS_PATH


@pytest.fixture(scope="module")
def env(h3: Any) -> SimpleNamespace:
    return load_env(h3)


def _stage(env: Any) -> Any:
    return env.LatentStage(scheduler=SimpleNamespace(init_noise_sigma=1.0), transformer=None)


def _wan(env: Any) -> tuple[type, Any]:
    return env.WanPipeline, server_args(env.WanConfig(), "WanPipeline")


def _hunyuan(env: Any) -> tuple[type, Any]:
    return env.HunyuanVideoPipeline, server_args(env.HunyuanConfig(), "HunyuanVideoPipeline")


def test_hooks_registered_by_sglangs_loader(env: Any) -> None:
    """The entry point registered the draw-site and input-validation hooks (applied by
    `apply_plugin_hooks`), and the path runs on the installed 0.5.23."""
    assert getattr(env.InputValidationStage.forward, "__wrapped__", None) is not None
    assert getattr(env.LatentStage.forward, "__wrapped__", None) is not None
    assert getattr(env.LatentStage._prepare_grouped_latents, "__wrapped__", None) is not None
    assert support.current().runs(STANDARD)


@pytest.mark.parametrize(
    ("which", "size", "seeds"),
    [
        ("wan", (64, 96, 9), (0, 7, 2**63 - 1)),
        ("wan", (480, 832, 81), (42,)),
        ("hunyuan", (64, 96, 9), (5, 123456789)),
        ("hunyuan", (96, 160, 33), (11,)),
    ],
)
def test_on_equals_off(
    env: Any, monkeypatch: pytest.MonkeyPatch, which: str, size: Any, seeds: Any
) -> None:
    """One request: the latents (float32 for Wan, float16 for HunyuanVideo: its text encoder's
    precision), the generators' end state and the global RNG are upstream's, bit for bit; the
    draw ran on prenoise's worker and was served (not redrawn)."""
    cls, sa = _wan(env) if which == "wan" else _hunyuan(env)
    dtype = torch.float32 if which == "wan" else torch.float16
    for seed in seeds:

        def arm(seed: int = seed) -> dict[str, Any]:
            return run(env, cls, _stage(env), sa, [make_req(env, seed, *size)], text_dtype=dtype)

        off, on, seen, rng_untouched = both_arms(monkeypatch, arm)
        assert "[0].latents[0]" in off and off["[0].latents[0]"][1] == dtype
        assert same(off, on) == [], seed
        assert [label for label, _t in seen.draws] == ["initial_latents.0@0"]
        assert all(t.startswith(latents_ahead.WORKER) for _l, t in seen.draws)
        assert seen.serves == [("Wan" if which == "wan" else "HunyuanVideo", 1, 1)]
        assert rng_untouched


def test_batch_of_generators(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request of 3 outputs not expanded (one batch, 3 generators): randn_tensor draws one
    row per generator; each row is a planned draw, all served, all upstream's bits."""
    cls, sa = _wan(env)

    def arm() -> dict[str, Any]:
        req = make_req(env, 3, 64, 96, 9, num_outputs_per_prompt=3)
        return run(env, cls, _stage(env), sa, [req], text_dtype=torch.float32)

    off, on, seen, rng_untouched = both_arms(monkeypatch, arm)
    assert off["[0].latents[0]"][0][0] == 3 and "[0].generator[2].state" in off
    assert same(off, on) == [] and rng_untouched
    assert [label for label, _t in seen.draws] == [f"initial_latents.{i}@0" for i in range(3)]
    assert seen.serves == [("Wan", 3, 3)]


def test_group_of_outputs(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The outputs of one prompt expanded by upstream and run as a group (`forward_batch`,
    `_prepare_grouped_latents`: one draw per request on its own generator)."""
    cls, sa = _wan(env)

    def arm() -> dict[str, Any]:
        reqs = env.expand(make_req(env, 20, 64, 96, 9, num_outputs_per_prompt=3))
        return run(env, cls, _stage(env), sa, reqs, text_dtype=torch.float32, grouped=True)

    off, on, seen, rng_untouched = both_arms(monkeypatch, arm)
    assert {f"[{i}].latents[0]" for i in range(3)} <= set(off)
    assert same(off, on) == [] and rng_untouched
    assert sorted(label for label, _t in seen.draws) == [f"initial_latents.0@{i}" for i in range(3)]
    assert seen.serves == [("Wan", 1, 1)] * 3


def _height_changed(batch: Any) -> None:
    batch.height = 80  # after the prediction: another latent shape


def _reseeded(batch: Any) -> None:
    batch.generator[0].manual_seed(8)  # the same generator, another state


def _other_generator(batch: Any) -> None:
    batch.generator = [torch.Generator("cpu").manual_seed(9)]  # not the planned generator


def _drawn_before(batch: Any) -> None:
    torch.rand(3, generator=batch.generator[0])  # something else draws from it first


def _bf16_text(batch: Any) -> None:
    batch.prompt_embeds = [batch.prompt_embeds[0].to(torch.bfloat16)]  # another latent dtype


@pytest.mark.parametrize(
    "change", [_height_changed, _reseeded, _other_generator, _drawn_before, _bf16_text]
)
def test_prediction_missed_falls_back(
    env: Any, monkeypatch: pytest.MonkeyPatch, change: Any
) -> None:
    """After the draw was planned, the request changes (another shape, seed / generator state,
    generator, or latent dtype): nothing prepared is served and upstream's draw runs, bit for
    bit (breaking the key or state check fails this test)."""
    cls, sa = _wan(env)

    def arm() -> dict[str, Any]:
        req = make_req(env, 4, 64, 96, 9)
        return run(env, cls, _stage(env), sa, [req], text_dtype=torch.float32,
                   before_latents=change)  # fmt: skip

    off, on, seen, rng_untouched = both_arms(monkeypatch, arm)
    assert same(off, on) == [] and rng_untouched  # upstream's bits ...
    assert seen.serves == [("Wan", 0, 1)]  # ... though planned, not used
    assert len(seen.draws) <= 1  # a draw still pending when the plan ended is cancelled


def test_given_latents_and_foreign_generators_left_alone(
    env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that gives its latents draws nothing; a generator that is not a plain CPU
    `torch.Generator` (a subclass: its state cannot be proven equal) is never prepared. A CUDA
    generator cannot be made on this CPU-only torch: it is refused before the same check
    (`latents_ahead._generators`: not on the CPU), so upstream's draw runs untouched."""
    cls, sa = _wan(env)

    class Subclassed(torch.Generator):
        pass

    original = env.InputValidationStage._generate_seeds

    def subclassed_seeds(stage: Any, batch: Any, server_args: Any) -> None:
        original(stage, batch, server_args)
        batch.generator = [Subclassed("cpu").manual_seed(s) for s in batch.seeds]

    def given() -> dict[str, Any]:
        req = make_req(env, 6, 64, 96, 9)
        req.latents = torch.ones(1, 16, 3, 8, 12)
        return run(env, cls, _stage(env), sa, [req], text_dtype=torch.float32)

    def subclassed() -> dict[str, Any]:
        with monkeypatch.context() as m:
            m.setattr(env.InputValidationStage, "_generate_seeds", subclassed_seeds)
            req = make_req(env, 6, 64, 96, 9)
            return run(env, cls, _stage(env), sa, [req], text_dtype=torch.float32)

    for arm in (given, subclassed):
        off, on, seen, rng_untouched = both_arms(monkeypatch, arm)
        assert seen.draws == [] and seen.serves == []
        assert same(off, on) == [] and rng_untouched
        assert "[0].latents[0]" in off


def test_changed_digest_turns_the_path_off(
    env: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A changed function of this path only: one WARNING naming it; the MiniMax-H3 and LTX-2
    paths stay on; requests pass straight to upstream (nothing drawn ahead, same bits)."""
    key = next(k for k in reviewed.REVIEWED if k.endswith(":PipelineConfig.prepare_latent_shape"))
    monkeypatch.setitem(reviewed.REVIEWED, key, {"000000000000": ("0.5.23",)})
    monkeypatch.setattr(plugin, "_said", set())
    registry = env.h3.plugins.HookRegistry
    hooks_before = copy.copy(registry._hooks)
    lists_before = {t: list(h) for t, h in registry._hooks.items()}
    support.reset()
    try:
        with caplog.at_level(logging.INFO, logger="prenoise.sglang"):
            plugin.register()
            plugin.register()
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        message = warnings[0].getMessage()
        assert STANDARD in message and "PipelineConfig.prepare_latent_shape" in message
        assert "upstream's code runs untouched" in message
        (on_line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
        assert f"{STANDARD}: off" in on_line and f"{reviewed.LTX2_LATENTS_PATH}: on" in on_line
        assert support.current().h3_initial and support.current().runs(reviewed.LTX2_LATENTS_PATH)
        cls, sa = _wan(env)

        def arm() -> dict[str, Any]:
            req = make_req(env, 12, 64, 96, 9)
            return run(env, cls, _stage(env), sa, [req], text_dtype=torch.float32)

        off, on, seen, rng_untouched = both_arms(monkeypatch, arm)
        assert seen.draws == [] and seen.serves == []
        assert same(off, on) == [] and rng_untouched
    finally:
        registry._hooks.clear()
        registry._hooks.update(hooks_before)
        for target, hooks in lists_before.items():
            registry._hooks[target] = hooks
        monkeypatch.undo()
        support.reset()
    assert support.current().runs(STANDARD)


def test_encoder_failure_propagates_and_joins(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The text encoder raises after the draw was submitted: the original exception propagates
    and no worker outlives the request."""
    import threading

    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    cls, sa = _wan(env)

    def fail(_batch: Any) -> None:
        raise RuntimeError("text encoder failed")

    with recorded(), pytest.raises(RuntimeError, match="text encoder failed"):
        run(env, cls, _stage(env), sa, [make_req(env, 1, 480, 832, 81)],
            text_dtype=torch.float32, before_latents=fail)  # fmt: skip
    alive = [t.name for t in threading.enumerate() if t.name.startswith(latents_ahead.WORKER)]
    assert alive == []


def test_a_named_stream_refuses_a_subclass(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`PRENOISE_SGLANG_NOISE_STREAM` covers exactly `WanPipeline` (`test_latents_streams`): a
    request of a subclass (its stages may draw elsewhere) fails with `NoiseStreamError` naming
    the variable before anything is drawn, never silently native; under `native` it runs and is
    upstream's."""
    from prenoise.noise.streams import NoiseStreamError

    class SubWan(env.WanPipeline):  # type: ignore[name-defined,misc]
        pass

    _cls, sa = _wan(env)
    monkeypatch.setenv("PRENOISE_SGLANG_NOISE_STREAM", "libm")
    stage = _stage(env)
    with pytest.raises(NoiseStreamError, match="PRENOISE_SGLANG_NOISE_STREAM=libm covers"):
        run(env, SubWan, stage, sa, [make_req(env, 1, 64, 96, 9)], text_dtype=torch.float32)
    monkeypatch.setenv("PRENOISE_SGLANG_NOISE_STREAM", "native")
    fields = run(env, SubWan, stage, sa, [make_req(env, 1, 64, 96, 9)], text_dtype=torch.float32)
    assert "[0].latents[0]" in fields
