"""LTX-2's two-stage pipelines (`LTX2TwoStagePipeline`, `LTX2TwoStageHQPipeline`): their stage-1
video and audio noise, plugin on vs off, through upstream's real `InputValidationStage`,
`LTX2HalveResolutionStage` and `LTX2AVLatentPreparationStage` (SGLang 0.5.23, the real
`LTX2PipelineConfig`: CPU generators by default; no checkpoint; a stand-in text encoder and
connector after input validation).

The pipelines themselves cannot be constructed here: the constructor loads the checkpoint's
modules (`model_index.json`: transformer, text encoder, VAEs, ...) and
`LTX2TwoStagePipeline.initialize_pipeline` requires a spatial-upsampler and a distilled-LoRA
checkpoint; stage 2 (`LTX2UpsampleStage`, `LTX2RefinementStage`) runs the upsampler and the
transformer. The tests use the pipeline class (its exact type decides the path) with the stages
above in upstream's order, which is what stage 1's noise depends on, and check the prediction
on the stage list upstream's own `create_pipeline_stages` builds on a pipeline without weights.

Compared bit for bit (integer views): every tensor field of the request after the latent stage
(what the denoising stage receives), its shape fields and `extra` entries, the generators'
final states, and the global RNG state.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from _latents_harness import (
    both_arms,
    changed_digest,
    load_env,
    make_req,
    recorded,
    run,
    same,
    server_args,
)

from prenoise.integrations.sglang import latents_ahead, plugin, reviewed, status, support

TWO_STAGE = reviewed.LTX2_TWO_STAGE_LATENTS_PATH
KINDS = {"LTX2TwoStagePipeline": "LTX-2 two-stage", "LTX2TwoStageHQPipeline": "LTX-2 two-stage HQ"}


@pytest.fixture(scope="module")
def env(h3: Any) -> SimpleNamespace:
    return load_env(h3)


def _stage(env: Any) -> Any:
    return env.LTX2LatentStage(scheduler=SimpleNamespace(init_noise_sigma=1.0))


def _pipeline(env: Any, name: str, variant: str = "ltx_2") -> tuple[type, Any]:
    config = env.LTX2Config()
    config.vae_config.arch_config.ltx_variant = variant
    return getattr(env, name), server_args(config, name)


def _run(env: Any, cls: type, sa: Any, seed: int, size: Any, **kw: Any) -> dict[str, Any]:
    """One request through the pipeline class's stage-1 stages (`halve=False`: a one-stage
    pipeline's, without the halving); `audio=False`: a request without audio."""
    sampling, audio, halve = kw.pop("sampling", {}), kw.pop("audio", True), kw.pop("halve", True)
    req = make_req(env, seed, *size, params_cls=env.LTX2SamplingParams,
                   generator_device=None, **sampling)  # fmt: skip
    req.generate_audio = audio  # the Req's own field (the latent stage reads it)
    between = (env.LTX2HalveStage(),) if halve else ()
    return run(env, cls, _stage(env), sa, [req], text_dtype=torch.bfloat16,
               between=between, **kw)  # fmt: skip


@pytest.mark.parametrize("name", sorted(KINDS))
@pytest.mark.parametrize(
    ("variant", "size", "seeds"),
    [
        ("ltx_2", (128, 192, 9), (0, 2**63 - 1)),
        ("ltx_2", (1024, 1536, 121), (42,)),
        ("ltx_2_3", (128, 192, 17), (3,)),
    ],
)
def test_stage1_on_equals_off(
    env: Any, monkeypatch: pytest.MonkeyPatch, name: str, variant: str, size: Any, seeds: Any
) -> None:
    """Stage 1's video then audio noise at the halved resolution (LTX-2, and LTX-2.3 packed with
    the two-stage latent dtype): upstream's bits and generator states, both draws made on
    prenoise's worker thread and served; the global RNG untouched."""
    cls, sa = _pipeline(env, name, variant)
    one_stage, one_sa = _pipeline(env, "LTX2Pipeline", variant)
    for seed in seeds:
        off, on, seen, rng_untouched = both_arms(
            monkeypatch, lambda seed=seed: _run(env, cls, sa, seed, size)
        )
        assert off["[0].latents[0]"][1] == torch.bfloat16 and "[0].audio_latents[0]" in off
        half = (size[0] // 2, size[1] // 2, size[2])  # stage 1: the one-stage draws at half size
        monkeypatch.setenv(plugin.ENABLE_ENV, "0")
        alone = _run(env, one_stage, one_sa, seed, half, halve=False)
        noise = ("[0].latents[0]", "[0].audio_latents[0]")
        assert same({k: off[k] for k in noise}, {k: alone[k] for k in noise}) == []
        assert same(off, on) == [], seed
        labels = ["initial_video_latents.0@0", "initial_audio_latents.0@0"]
        assert [label for label, _t in seen.draws] == labels
        request_thread = threading.current_thread().name
        assert all(t.startswith(latents_ahead.WORKER) and t != request_thread
                   for _l, t in seen.draws)  # fmt: skip
        assert seen.serves == [(KINDS[name], 2, 2)]
        assert rng_untouched


def test_two_outputs_and_no_audio(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two outputs (video rows on generators 0, 1, then audio rows), and no audio."""
    cls, sa = _pipeline(env, "LTX2TwoStagePipeline")
    for outputs, audio, planned in ((2, True, 4), (1, False, 1)):

        def arm(outputs: int = outputs, audio: bool = audio) -> dict[str, Any]:
            return _run(env, cls, sa, 31, (128, 192, 9), audio=audio,
                        sampling={"num_outputs_per_prompt": outputs})  # fmt: skip

        off, on, seen, rng_untouched = both_arms(monkeypatch, arm)
        assert same(off, on) == [] and rng_untouched
        assert seen.serves == [("LTX-2 two-stage", planned, planned)]


def _full_resolution(batch: Any) -> None:
    batch.height, batch.width = batch.height * 2, batch.width * 2  # the halving undone


def _reseeded(batch: Any) -> None:
    batch.generator[0].manual_seed(32)


def _drawn_before(batch: Any) -> None:
    torch.randn(3, generator=batch.generator[0])  # a stage between drew from the generator


def _fp32_text(batch: Any) -> None:
    batch.prompt_embeds = [batch.prompt_embeds[0].float()]


@pytest.mark.parametrize("change", [_full_resolution, _reseeded, _drawn_before, _fp32_text])
def test_prediction_missed_falls_back(
    env: Any, monkeypatch: pytest.MonkeyPatch, change: Any
) -> None:
    """After the plan the request changes (another shape, generator state or dtype): upstream
    draws, bit for bit; nothing prepared is served (breaking the key or the generator-state
    check fails this test)."""
    cls, sa = _pipeline(env, "LTX2TwoStageHQPipeline")
    off, on, seen, rng_untouched = both_arms(
        monkeypatch, lambda: _run(env, cls, sa, 30, (128, 192, 9), before_latents=change)
    )
    assert same(off, on) == [] and rng_untouched
    assert seen.serves == [("LTX-2 two-stage HQ", 0, 2)]


def test_a_resolution_upstream_refuses(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A resolution the halving stage refuses: nothing is planned, upstream's own error
    propagates, and no worker outlives the request."""
    cls, sa = _pipeline(env, "LTX2TwoStagePipeline")
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    with recorded() as seen, pytest.raises(ValueError, match="divisible by 64"):
        _run(env, cls, sa, 5, (96, 160, 9))
    assert seen.draws == [] and seen.serves == []
    alive = [t.name for t in threading.enumerate() if t.name.startswith(latents_ahead.WORKER)]
    assert alive == []


def test_a_named_stream_draws_them_ahead(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`PRENOISE_SGLANG_NOISE_STREAM=x86` covers the two-stage pipelines
    (`test_latents_streams`): on this x86 host, upstream's bits, still drawn ahead and served."""
    cls, sa = _pipeline(env, "LTX2TwoStagePipeline")
    off, _on, _seen, _rng = both_arms(monkeypatch, lambda: _run(env, cls, sa, 5, (128, 192, 9)))
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    monkeypatch.setenv("PRENOISE_SGLANG_NOISE_STREAM", "x86")
    with recorded() as seen:
        streamed = _run(env, cls, sa, 5, (128, 192, 9))
    assert same(off, streamed) == []
    assert seen.serves == [("LTX-2 two-stage", 2, 2)]


def test_changed_digest_turns_only_this_path_off(
    env: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """`LTX2HalveResolutionStage` changed: one WARNING naming it, doctor's row for this path says
    off and names it, the one-stage LTX-2 path stays on, and two-stage requests pass straight
    to upstream (nothing drawn ahead, upstream's bits)."""
    key = next(k for k in reviewed.REVIEWED if k.endswith(":LTX2HalveResolutionStage"))
    assert key in reviewed.PATHS[TWO_STAGE]
    assert key not in reviewed.PATHS[reviewed.LTX2_LATENTS_PATH]
    with changed_digest(env, monkeypatch, caplog, key) as (warnings, infos):
        assert len(warnings) == 1, warnings
        assert TWO_STAGE in warnings[0] and "LTX2HalveResolutionStage" in warnings[0]
        (on_line,) = infos
        assert f"{TWO_STAGE}: off" in on_line
        assert f"{reviewed.LTX2_LATENTS_PATH}: on" in on_line
        rows = dict(status.sglang_status({}).rows())
        assert rows[TWO_STAGE].startswith("off, upstream's code runs: LTX2HalveResolutionStage")
        assert rows[reviewed.LTX2_LATENTS_PATH] == "on (the reviewed code)"
        cls, sa = _pipeline(env, "LTX2TwoStagePipeline")
        off, on, seen, rng_untouched = both_arms(
            monkeypatch, lambda: _run(env, cls, sa, 33, (128, 192, 9))
        )
        assert seen.draws == [] and seen.serves == []
        assert same(off, on) == [] and rng_untouched
    assert support.current().runs(TWO_STAGE)
    assert dict(status.sglang_status({}).rows())[TWO_STAGE] == "on (the reviewed code)"


def _built(env: Any, cls: type, sa: Any) -> Any:
    """`cls` with the stage list upstream's own `create_pipeline_stages` makes (no weights: every
    module None but a stand-in scheduler)."""
    from sglang.multimodal_gen.runtime.disaggregation.roles import RoleType

    pipeline = object.__new__(cls)
    pipeline._disagg_role = RoleType.MONOLITHIC
    pipeline.modules = {"scheduler": SimpleNamespace(init_noise_sigma=1.0)}
    pipeline._stages, pipeline._stage_name_mapping = [], {}
    pipeline.server_args = sa
    pipeline.create_pipeline_stages(sa)
    return pipeline


@pytest.mark.parametrize("name", ["LTX2Pipeline", *sorted(KINDS)])
def test_prediction_on_upstreams_own_stage_list(env: Any, name: str) -> None:
    """On the stage list upstream's own `create_pipeline_stages` builds (the halving stage after
    the front stages, before stage 1's latent stage; stage 2 after it), the predicted stage-1
    draws are at half the resolution for the two-stage pipelines only: 128x192 -> latent 2x3."""
    from prenoise.integrations.sglang import ltx2_latents

    cls, sa = _pipeline(env, name)
    pipeline = _built(env, cls, sa)
    names = [type(s).__name__ for s in pipeline.stages]
    latent = names.index("LTX2AVLatentPreparationStage")
    assert names.count("LTX2AVLatentPreparationStage") == 1
    assert ("LTX2HalveResolutionStage" in names[:latent]) == (name != "LTX2Pipeline")
    assert ("LTX2RefinementStage" in names[latent:]) == (name != "LTX2Pipeline")
    req = make_req(env, 7, 128, 192, 9, params_cls=env.LTX2SamplingParams, generator_device=None)
    batch = pipeline.stages[0](req, sa)
    batch.prompt_embeds = [torch.zeros(1, 4, 8, dtype=torch.bfloat16)]
    video, audio = ltx2_latents.predict(pipeline, batch, sa)
    assert video.shape == ((1, 128, 2, 4, 6) if name == "LTX2Pipeline" else (1, 128, 2, 2, 3))
    assert audio.shape == (1, 8, 9, 16) and video.dtype == audio.dtype == torch.bfloat16
    assert (batch.height, batch.width) == (128, 192)  # the request itself is left as it was
