"""`PRENOISE_SGLANG_NOISE_STREAM` for Wan, HunyuanVideo and LTX-2 (`latents_streams`): every draw
those pipelines make for a request, drawn in the named stream (SGLang 0.5.23's real stages and
configs on the CPU, no checkpoint; the harness of the latents tests).

Under `libm` each drawn tensor equals prenoise's own `libm` draw of the same calls (upstream's
code run with the plugin off inside `draws_in_stream("libm")`) and differs from the native one;
under `x86` (this host's arithmetic) it equals the plugin off, bit for bit. Generator end states
are compared with the tensors; the global RNG must be left untouched.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from _latents_harness import load_env, make_req, recorded, run, same, server_args

from prenoise.integrations.sglang import latents_ahead, latents_streams, plugin, reviewed, support
from prenoise.noise import streams as noise_streams
from prenoise.noise.stream_mode import draws_in_stream
from prenoise.noise.streams import NoiseStreamError

STREAM_ENV = "PRENOISE_SGLANG_NOISE_STREAM"
_SIZE = {"Wan": (64, 96, 9), "HunyuanVideo": (64, 96, 9), "LTX2Pipeline": (512, 768, 121),
         "LTX2TwoStagePipeline": (128, 192, 9),
         "LTX2TwoStageHQPipeline": (1024, 1536, 121)}  # fmt: skip
"""Small shapes; LTX-2 draws bfloat16, where a libm draw differs from the native one in about
one value in 2**16 (the rounding hides the last-bit differences): a large shape on two kinds."""
_KIND = {"Wan": "Wan", "HunyuanVideo": "HunyuanVideo", "LTX2Pipeline": "LTX-2",
         "LTX2TwoStagePipeline": "LTX-2 two-stage",
         "LTX2TwoStageHQPipeline": "LTX-2 two-stage HQ"}  # fmt: skip


@pytest.fixture(scope="module")
def env(h3: Any) -> SimpleNamespace:
    return load_env(h3)


def _arm(env: Any, name: str, seed: int, **sampling: Any) -> Callable[[], dict[str, Any]]:
    """One request of pipeline `name` through its latent stages (the harness's `run`)."""
    if name in ("Wan", "HunyuanVideo"):
        cls = env.WanPipeline if name == "Wan" else env.HunyuanVideoPipeline
        config = env.WanConfig() if name == "Wan" else env.HunyuanConfig()
        sa = server_args(config, f"{cls.__name__}")
        dtype = torch.float32 if name == "Wan" else torch.float16
        stage = env.LatentStage(scheduler=SimpleNamespace(init_noise_sigma=1.0), transformer=None)
        between: tuple[Any, ...] = ()
    else:
        cls = getattr(env, name)
        sa = server_args(env.LTX2Config(), name)
        dtype = torch.bfloat16
        stage = env.LTX2LatentStage(scheduler=SimpleNamespace(init_noise_sigma=1.0))
        between = (env.LTX2HalveStage(),) if "TwoStage" in name else ()
        sampling = {"params_cls": env.LTX2SamplingParams, "generator_device": None, **sampling}

    def arm() -> dict[str, Any]:
        req = make_req(env, seed, *_SIZE[name], **sampling)
        return run(env, cls, stage, sa, [req], text_dtype=dtype, between=between)

    return arm


def _noise(fields: dict[str, Any]) -> list[str]:
    return [k for k in fields if k.startswith("[0].") and "latents[" in k]


@pytest.mark.parametrize("name", sorted(_KIND))
def test_named_streams_cover_the_initial_noise(
    env: Any, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Each stream: prenoise's draw of upstream's calls in that stream (libm: not the native
    bits here; x86: on an x86 host, the plugin off's bits), drawn ahead on the worker and
    served; generator end states equal; the global RNG untouched."""
    arm = _arm(env, name, 11)
    start = torch.get_rng_state()
    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    native = arm()
    refs = {}
    for stream in ("libm", "x86"):
        with draws_in_stream(stream):
            refs[stream] = arm()
    if noise_streams.local_torch_stream() == "x86":  # this host's arithmetic: native's bits
        assert same(native, refs["x86"]) == []
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    for stream, expected in refs.items():
        monkeypatch.setenv(STREAM_ENV, stream)
        with recorded() as seen:
            on = arm()
        assert same(expected, on) == [], stream
        assert torch.equal(torch.get_rng_state(), start), stream
        planned = len(_noise(on))
        assert planned >= 1 and seen.serves == [(_KIND[name], planned, planned)], stream
        main = threading.current_thread().name
        assert all(t.startswith(latents_ahead.WORKER) and t != main for _l, t in seen.draws)
    differ = same(refs["x86"], refs["libm"])  # the noise (only), each tensor at a large shape
    if name == "LTX2TwoStagePipeline":  # small: the bfloat16 rounding may hide every difference
        assert set(differ) <= set(_noise(native))
    else:
        assert differ == _noise(native)


def test_unserved_initial_draw_is_still_in_the_stream(
    env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan missed (the generator drawn from after it was made): upstream's own serial draw
    runs, inside the stream's mode: prenoise's libm bits, not local torch's."""

    def drawn_before(batch: Any) -> None:
        torch.randn(3, generator=batch.generator[0])

    name = "LTX2Pipeline"
    cls, sa = env.LTX2Pipeline, server_args(env.LTX2Config(), name)
    stage = env.LTX2LatentStage(scheduler=SimpleNamespace(init_noise_sigma=1.0))

    def arm() -> dict[str, Any]:
        req = make_req(env, 4, 64, 96, 9, params_cls=env.LTX2SamplingParams,
                       generator_device=None)  # fmt: skip
        return run(env, cls, stage, sa, [req], text_dtype=torch.bfloat16,
                   before_latents=drawn_before)  # fmt: skip

    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    with draws_in_stream("libm"):
        ref = arm()
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    monkeypatch.setenv(STREAM_ENV, "libm")
    with recorded() as seen:
        on = arm()
    assert same(ref, on) == []
    assert seen.serves == [("LTX-2", 0, 2)]


# -- the stage sites (stochastic steps, stage-2 renoise, res2s) -------------------------------


def _stage_modules() -> SimpleNamespace:
    from sglang.multimodal_gen.runtime.models.schedulers.scheduling_flow_match_euler_discrete import (  # noqa: E501
        FlowMatchEulerDiscreteScheduler,
    )
    from sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.ltx_2.denoising import (  # noqa: E501
        LTX2DenoisingStage,
    )
    from sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.ltx_2.denoising_av import (  # noqa: E501
        LTX2RefinementStage,
    )

    return SimpleNamespace(
        Scheduler=FlowMatchEulerDiscreteScheduler,
        Denoising=LTX2DenoisingStage,
        Refinement=LTX2RefinementStage,
    )


def _site_draws(mods: Any) -> dict[str, Any]:
    """Every stage draw site called as upstream's stages call it, on fresh CPU generators;
    the tensors and the generators' end states."""
    out: dict[str, Any] = {}
    ref = torch.zeros(2, 6, 8)  # stage 2's latents are float32 (bfloat16 hides differences)
    gens = [torch.Generator().manual_seed(5), torch.Generator().manual_seed(6)]
    batch = SimpleNamespace(generator=gens, seeds=[5], extra={
        "ltx2_stage1_packed_video_shape": (1, 12, 8),
        "ltx2_stage1_packed_audio_shape": (1, 5, 8),
    })  # fmt: skip
    out["randn_like"] = mods.Denoising._randn_like_with_batch_generators(ref, batch)
    res2s = torch.Generator().manual_seed(77)
    out["res2s"] = mods.Denoising._ltx2_res2s_new_noise(ref.float(), res2s)
    renoise = mods.Refinement._build_stage2_renoise_generator(batch, ref[:1])
    out["renoise"] = mods.Refinement._ltx2_renoise_like(ref[:1], renoise)
    scheduler = mods.Scheduler(stochastic_sampling=True)
    step = torch.Generator().manual_seed(9)
    sample = torch.ones(1, 4, 3, 5)
    out["transition"] = scheduler._transition(
        model_output=torch.full_like(sample, 0.5), sample=sample,
        current_sigma=torch.tensor(0.8), next_sigma=torch.tensor(0.6),
        dt=torch.tensor(-0.2), generator=step, step_index=0, timestep=800,
    )  # fmt: skip
    for key, g in {"gen0": gens[0], "gen1": gens[1], "res2s_gen": res2s,
                   "renoise_gen": renoise, "step_gen": step}.items():  # fmt: skip
        out[key] = g.get_state()
    return out


def _equal(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [k for k in a if not (a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
                                 and torch.equal(a[k], b[k]))]  # fmt: skip


def test_stage_sites_drawn_in_the_stream(monkeypatch: pytest.MonkeyPatch, h3: Any) -> None:
    """The wrapped sites (the flow-match stochastic step, LTX-2's step / renoise noise on the
    request generators, the res2s SDE noise, the LTX-2.3 stage-2 renoise generator with its burn
    draws): libm equals prenoise's libm draw of the same calls and differs from native; x86 is
    native bit for bit; generator end states equal; the global RNG untouched."""
    mods = _stage_modules()
    for target in (mods.Denoising._randn_like_with_batch_generators,
                   mods.Refinement._build_stage2_renoise_generator,
                   mods.Scheduler._transition):  # fmt: skip
        assert getattr(target, "__wrapped__", None) is not None  # hooked by SGLang's loader
    start = torch.get_rng_state()
    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    native = _site_draws(mods)
    refs = {}
    for stream in ("libm", "x86"):
        with draws_in_stream(stream):
            refs[stream] = _site_draws(mods)
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    for stream, ref in refs.items():
        monkeypatch.setenv(STREAM_ENV, stream)
        assert _equal(ref, _site_draws(mods)) == [], stream
    if noise_streams.local_torch_stream() == "x86":
        assert _equal(native, refs["x86"]) == []
    # res2s draws float64 on this platform, where the libm and x86 arithmetic agree (its mode
    # is shown entered by the device test below)
    assert _equal(refs["x86"], refs["libm"]) == ["randn_like", "renoise", "transition"]
    assert torch.equal(torch.get_rng_state(), start)


def test_a_draw_on_a_device_fails_naming_the_site(monkeypatch: pytest.MonkeyPatch, h3: Any) -> None:
    """A site's draw the stream cannot serve (simulated: the latents on the `meta` device, where
    upstream makes the res2s generator on a GPU) raises `NoiseStreamError` naming the site and
    the native stream; never a native draw."""
    mods = _stage_modules()
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    monkeypatch.setenv(STREAM_ENV, "libm")
    with pytest.raises(NoiseStreamError, match=r"_ltx2_res2s_new_noise \(the res2s") as info:
        mods.Denoising._ltx2_res2s_new_noise(torch.empty(2, 3, device="meta"), torch.Generator())
    assert "use the native stream" in str(info.value)
    monkeypatch.setenv(STREAM_ENV, "native")  # native: torch's own call, untouched
    assert mods.Denoising._ltx2_res2s_new_noise(torch.zeros(2, 3), torch.Generator()).shape == (
        2, 3)  # fmt: skip


# -- refusals --------------------------------------------------------------------------------


class _DeviceGenerator:
    """Stands in for a CUDA generator (none can be made on this CPU-only torch)."""

    device = torch.device("cuda")


@pytest.mark.parametrize("name", ["Wan", "LTX2TwoStagePipeline"])
def test_device_generators_fail_saying_what_to_change(
    env: Any, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Wan's / HunyuanVideo's default `generator_device` (the GPU), simulated: the request fails
    once input validation made its generators, before anything is drawn, telling the user to
    pass generator_device='cpu' or use the native stream."""
    import sglang.multimodal_gen.runtime.pipelines_core.stages.input_validation as validation

    class Torch:  # upstream's `torch.Generator(device).manual_seed(seed)` makes device ones
        def __getattr__(self, name: str) -> Any:
            return getattr(torch, name)

        class Generator(_DeviceGenerator):
            def __init__(self, _device: Any) -> None:
                pass

            def manual_seed(self, _seed: int) -> Any:
                return self

    monkeypatch.setattr(validation, "torch", Torch())
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    monkeypatch.setenv(STREAM_ENV, "x86")
    with recorded() as seen, pytest.raises(NoiseStreamError, match="generator_device='cpu'"):
        _arm(env, name, 3)()
    assert seen.draws == [] and seen.serves == []


def test_pipelines_not_covered_are_still_refused(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A subclass of a covered pipeline (its stages may differ) and any other pipeline fail
    under a named stream; so do a Wan progressive-resolution request, a rollout request and a
    scheduler that was not audited. Under `native` each of them runs."""
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    sa = server_args(env.WanConfig(), "WanPipeline")
    ran: list[str] = []

    def original(pipeline: Any, *_a: Any, **_k: Any) -> str:
        ran.append(type(pipeline).__name__)
        return "ran"

    class SubWan(env.WanPipeline):  # type: ignore[name-defined,misc]
        pass

    wan_with_scheduler = object.__new__(env.WanPipeline)
    wan_with_scheduler.modules = {"scheduler": SimpleNamespace()}
    plain = object.__new__(env.WanPipeline)
    cases = [
        (object.__new__(SubWan), {}, "covers MiniMax-H3, and exactly WanPipeline"),
        (
            object.__new__(
                type(
                    "Other",
                    (env.LTX2Pipeline.__mro__[1],),
                    {"create_pipeline_stages": lambda *_: None},
                )
            ),
            {},
            "covers MiniMax-H3",
        ),
        (wan_with_scheduler, {}, "scheduler SimpleNamespace is not one"),
        (plain, {"progressive_mode": "dct"}, "progressive_mode='dct'"),
        (plain, {"rollout": True}, "a rollout request"),
    ]
    for pipeline, sampling, message in cases:
        req = make_req(env, 1, 64, 96, 9, **sampling)
        monkeypatch.setenv(STREAM_ENV, "libm")
        with pytest.raises(NoiseStreamError, match=message):
            plugin.around_forward(original, pipeline, req, sa)
        monkeypatch.setenv(STREAM_ENV, "native")
        assert plugin.around_forward(original, pipeline, req, sa) == "ran"
    assert len(ran) == len(cases)


def test_the_pipelines_own_schedulers_are_accepted(
    env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The schedulers upstream gives these pipelines (Wan's `FlowUniPCMultistepScheduler`,
    HunyuanVideo's `FlowMatchEulerDiscreteScheduler`, LTX-2's `LTX2FlowMatchScheduler`) pass the
    entry check: their requests run in a stream."""
    from sglang.multimodal_gen.runtime.models.schedulers.scheduling_flow_unipc_multistep import (
        FlowUniPCMultistepScheduler,
    )
    from sglang.multimodal_gen.runtime.pipelines.ltx_2_pipeline import LTX2FlowMatchScheduler

    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    monkeypatch.setenv(STREAM_ENV, "libm")
    sa = server_args(env.WanConfig(), "WanPipeline")
    for cls, scheduler in ((env.WanPipeline, FlowUniPCMultistepScheduler()),
                           (env.HunyuanVideoPipeline, _stage_modules().Scheduler()),
                           (env.LTX2Pipeline, LTX2FlowMatchScheduler())):  # fmt: skip
        pipeline = object.__new__(cls)
        pipeline.modules = {"scheduler": scheduler}
        req = make_req(env, 1, 64, 96, 9)
        assert plugin.around_forward(lambda *_a, **_k: "ran", pipeline, req, sa) == "ran"


def test_changed_stream_code_refuses_that_pipelines_requests(
    env: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """`LTX2RefinementStage` changed: the two-stage stream path is off (named once by
    `register`), two-stage requests under a stream fail (never mixed); the one-stage LTX-2
    stream and the native two-stage path still run; doctor's streams row says so."""
    from prenoise.integrations.sglang import status

    key = next(k for k in reviewed.REVIEWED if k.endswith(":LTX2RefinementStage"))
    path = reviewed.LTX2_TWO_STAGE_STREAMS_PATH
    monkeypatch.setitem(reviewed.REVIEWED, key, {"000000000000": ("0.5.23",)})
    monkeypatch.setattr(plugin, "_said", set())
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    monkeypatch.setenv(STREAM_ENV, "libm")
    registered: list[str] = []
    monkeypatch.setattr(env.h3.plugins.HookRegistry, "register",
                        classmethod(lambda _c, target, *_a: registered.append(target)))  # fmt: skip
    support.reset()
    try:
        with caplog.at_level(logging.INFO, logger="prenoise.sglang"):
            plugin.register()
            plugin.register()
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and path in warnings[0] and "LTX2RefinementStage" in warnings[0]
        assert "requests fail" in warnings[0]
        row = dict(status.sglang_status({STREAM_ENV: "libm"}).rows())["noise streams"]
        assert "refused here (changed code): LTX2TwoStagePipeline" in row
        with pytest.raises(NoiseStreamError, match="LTX2RefinementStage"):
            _arm(env, "LTX2TwoStagePipeline", 2)()
        assert "[0].latents[0]" in _arm(env, "LTX2Pipeline", 2)()
        monkeypatch.setenv(STREAM_ENV, "native")
        assert "[0].latents[0]" in _arm(env, "LTX2TwoStagePipeline", 2)()
    finally:
        monkeypatch.undo()
        support.reset()
    assert support.current().runs(path)


def test_doctor_names_the_covered_pipelines(h3: Any) -> None:
    from prenoise.integrations.sglang import status

    row = dict(status.sglang_status({}).rows())["noise streams"]
    assert row.startswith("x86/libm cover MiniMax-H3 (and its subclasses), WanPipeline, ")
    assert "LTX2TwoStageHQPipeline" in row and "refused here" not in row
    assert set(latents_streams.SITE_HOOKS) <= set(reviewed.PATHS)
