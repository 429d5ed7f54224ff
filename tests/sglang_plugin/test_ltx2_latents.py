"""LTX-2 initial video and audio noise, plugin on vs off, through upstream's real
`InputValidationStage` and `LTX2AVLatentPreparationStage` (SGLang 0.5.23, the real
`LTX2PipelineConfig`, whose `generator_device` is `"cpu"`: the request below names none; no
checkpoint; a stand-in text encoder and connector between them).

Compared bit for bit (integer views): every tensor field of the request after the latent stage
(what the denoising stage receives: video and audio latents, latent ids), its shape fields and
the stage's `extra` entries, the generators' final states, and the global RNG state.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from _latents_harness import both_arms, changed_digest, load_env, make_req, run, same, server_args

from prenoise.integrations.sglang import latents_ahead, reviewed, support

LTX2 = reviewed.LTX2_LATENTS_PATH


@pytest.fixture(scope="module")
def env(h3: Any) -> SimpleNamespace:
    return load_env(h3)


def _stage(env: Any) -> Any:
    return env.LTX2LatentStage(scheduler=SimpleNamespace(init_noise_sigma=1.0))


def _ltx2(env: Any, variant: str = "ltx_2") -> tuple[type, Any]:
    config = env.LTX2Config()
    config.vae_config.arch_config.ltx_variant = variant
    return env.LTX2Pipeline, server_args(config, "LTX2Pipeline")


def _req(env: Any, seed: int, size: tuple[int, int, int], **sampling: Any) -> Any:
    params = {"params_cls": env.LTX2SamplingParams, "generator_device": None, **sampling}
    return make_req(env, seed, *size, **params)  # generator_device: the pipeline config's


def test_hooks_registered_by_sglangs_loader(env: Any) -> None:
    assert getattr(env.LTX2LatentStage.forward, "__wrapped__", None) is not None
    assert getattr(env.InputValidationStage.forward, "__wrapped__", None) is not None
    assert support.current().runs(LTX2)


@pytest.mark.parametrize(
    ("variant", "size", "seeds"),
    [
        ("ltx_2", (64, 96, 9), (0, 7, 2**63 - 1)),
        ("ltx_2", (512, 768, 121), (42,)),
        ("ltx_2_3", (64, 96, 17), (3, 99)),
    ],
)
def test_on_equals_off(
    env: Any, monkeypatch: pytest.MonkeyPatch, variant: str, size: Any, seeds: Any
) -> None:
    """Video then audio noise from the request's CPU generator (bfloat16: the connectors'
    precision), LTX-2 and LTX-2.3 (packed token space): upstream's bits and generator state;
    both draws ran on prenoise's worker and were served."""
    cls, sa = _ltx2(env, variant)
    for seed in seeds:

        def arm(seed: int = seed) -> dict[str, Any]:
            req = _req(env, seed, size)
            return run(env, cls, _stage(env), sa, [req], text_dtype=torch.bfloat16)

        off, on, seen, rng_untouched = both_arms(monkeypatch, arm)
        assert off["[0].latents[0]"][1] == torch.bfloat16 and "[0].audio_latents[0]" in off
        assert same(off, on) == [], seed
        labels = ["initial_video_latents.0@0", "initial_audio_latents.0@0"]
        assert [label for label, _t in seen.draws] == labels
        assert all(t.startswith(latents_ahead.WORKER) for _l, t in seen.draws)
        assert seen.serves == [("LTX-2", 2, 2)]
        assert rng_untouched


def test_two_outputs_and_no_audio(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two outputs in one batch (video rows on generators 0, 1, then audio rows on 0, 1), and
    a request without audio (the video draw only)."""
    cls, sa = _ltx2(env)
    for outputs, audio, planned in ((2, True, 4), (1, False, 1)):

        def arm(outputs: int = outputs, audio: bool = audio) -> dict[str, Any]:
            req = _req(env, 31, (64, 96, 9), num_outputs_per_prompt=outputs)
            req.generate_audio = audio  # the Req's own field (the stage reads it)
            return run(env, cls, _stage(env), sa, [req], text_dtype=torch.bfloat16)

        off, on, seen, rng_untouched = both_arms(monkeypatch, arm)
        assert same(off, on) == [] and rng_untouched
        assert seen.serves == [("LTX-2", planned, planned)]


def _frames_changed(batch: Any) -> None:
    batch.num_frames = 17  # e.g. the duration head: another video and audio length


def _reseeded(batch: Any) -> None:
    batch.generator[0].manual_seed(32)


def _fp32_text(batch: Any) -> None:
    batch.prompt_embeds = [batch.prompt_embeds[0].float()]


def _audio_drawn_by_other(batch: Any) -> None:
    batch.audio_latents = torch.zeros(1, 4, 8)  # the audio is given: only the video is drawn


@pytest.mark.parametrize(
    ("change", "served"),
    [(_frames_changed, 0), (_reseeded, 0), (_fp32_text, 0), (_audio_drawn_by_other, 1)],
)
def test_prediction_missed_falls_back(
    env: Any, monkeypatch: pytest.MonkeyPatch, change: Any, served: int
) -> None:
    """After the draws were planned the request changes: what no longer matches is drawn by
    upstream, bit for bit (breaking the key or state check fails this test)."""
    cls, sa = _ltx2(env)

    def arm() -> dict[str, Any]:
        req = _req(env, 30, (64, 96, 9))
        return run(env, cls, _stage(env), sa, [req], text_dtype=torch.bfloat16,
                   before_latents=change)  # fmt: skip

    off, on, seen, rng_untouched = both_arms(monkeypatch, arm)
    assert same(off, on) == [] and rng_untouched  # upstream's bits ...
    assert seen.serves == [("LTX-2", served, 2)]  # ... though planned, not (all) used
    assert len(seen.draws) <= 2  # a draw still pending when the plan ended is cancelled


def test_changed_digest_turns_the_path_off(
    env: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A changed LTX-2 function (shared by the one- and two-stage paths): one WARNING per path
    naming it; the other paths stay on; LTX-2 requests pass straight to upstream."""
    key = next(k for k in reviewed.REVIEWED if k.endswith(".prepare_audio_latent_shape"))
    with changed_digest(env, monkeypatch, caplog, key) as (warnings, infos):
        two_stage = reviewed.LTX2_TWO_STAGE_LATENTS_PATH
        assert [w.split(": off")[0] for w in warnings] == [
            f"prenoise: sglang: {LTX2}",
            f"prenoise: sglang: {two_stage}",
        ], warnings
        assert all("LTX2PipelineConfig.prepare_audio_latent_shape" in w for w in warnings)
        (on_line,) = infos
        assert f"{LTX2}: off" in on_line and f"{two_stage}: off" in on_line
        assert f"{reviewed.STANDARD_LATENTS_PATH}: on" in on_line
        cls, sa = _ltx2(env)

        def arm() -> dict[str, Any]:
            req = _req(env, 33, (64, 96, 9))
            return run(env, cls, _stage(env), sa, [req], text_dtype=torch.bfloat16)

        off, on, seen, rng_untouched = both_arms(monkeypatch, arm)
        assert seen.draws == [] and seen.serves == []
        assert same(off, on) == [] and rng_untouched
    assert support.current().runs(LTX2)
