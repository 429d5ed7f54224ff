"""vLLM-Omni's other pipelines in a named noise stream (`pipelines.install_stream_hooks`), and
Wan2.2 T2V's initial latents prepared ahead (`wan_ahead`).

What runs (`pipeline_standins`): Wan2.2 T2V's and Stable Audio's whole upstream `forward`
(stand-in encoders and transformers, real schedulers — Stable Audio's torchsde noise included);
for Wan2.2 I2V, HunyuanVideo-1.5 T2V/I2V and Qwen-Image (-Edit, -Edit-Plus, -Layered) upstream's
`prepare_latents`, and for LTX-2 its latent module functions and the euler_ancestral noise
function, called directly (their whole forward needs their text encoders and VAEs); and every
hooked module's `randn_tensor` as its call sites call it. The references: the same code with no
hooks in this process (native; on this x86 host also the x86 stream) and in a subprocess whose
torch runs its scalar kernels (`ATEN_CPU_CAPABILITY=default`: the libm stream's arithmetic).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pipeline_standins as standins
import pytest
import torch
from scalar_host import ScalarHost

from prenoise.integrations.vllm_omni import digests, pipelines, support, wan_ahead
from prenoise.integrations.vllm_omni.pipeline_targets import DRAW, ENTRY, TARGETS, StreamTarget
from prenoise.integrations.vllm_omni.reviewed import WAN_AHEAD_PATH, WAN_STAGED_FORWARD
from prenoise.integrations.vllm_omni.settings import MISMATCH_ENV, NOISE_STREAM_ENV
from prenoise.noise import streams as noise_streams
from prenoise.noise.stream_mode import draws_in_stream
from prenoise.noise.streams import NoiseStreamError
from prenoise.preparation.prediction import PredictionMismatchError

PIPELINE_OF = {t.key: t.pipeline for t in TARGETS}
WAN_AHEAD = support.current().wan_ahead
"""Wan2.2 T2V's latents are prepared ahead where `Wan22Pipeline.forward` and what the prediction
relies on are reviewed code (0.30.0, 0.31.0rc1, 0.32.0rc1's FULL stage)."""
WAN_STAGED = digests.installed_digest(wan_ahead._FORWARD) in WAN_STAGED_FORWARD
"""The installed forward runs per stage role (0.32.0rc1)."""
NO_AHEAD = {"prepared": 0, "taken": 0, "serial": 0, "served_in_stream": 0}
wan_ahead_reviewed = pytest.mark.skipif(
    not WAN_AHEAD, reason="Wan2.2 T2V's forward is not reviewed code here: not prepared ahead"
)


def bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().contiguous().view(torch.uint8)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


@pytest.fixture(autouse=True)
def hooks_removed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(NOISE_STREAM_ENV, raising=False)
    monkeypatch.delenv(MISMATCH_ENV, raising=False)
    yield
    pipelines.uninstall_stream_hooks()


@pytest.fixture(scope="module")
def upstream_draws() -> dict[str, torch.Tensor]:
    """Upstream's draws in this process, no prenoise (native)."""
    assert not pipelines.installed_targets()
    return standins.draw_all()


@pytest.fixture(scope="module")
def scalar_host_draws(scalar_host: ScalarHost) -> dict[str, torch.Tensor]:
    """Upstream's draws, no prenoise, where torch's CPU arithmetic is the libm stream's (the
    session's `scalar_host` subprocess, scalar_host.py)."""
    return scalar_host.pipelines


def in_stream(stream: str) -> tuple[dict[str, torch.Tensor], dict[str, int], dict[str, int]]:
    """The draws with the hooks installed in `stream`; draws served per pipeline; wan counts."""
    os.environ[NOISE_STREAM_ENV] = stream
    pipelines.install_stream_hooks()
    served, ahead = pipelines.served_counts(), wan_ahead.counts()
    draws = standins.draw_all()
    per_pipeline: dict[str, int] = {}
    for key, count in pipelines.served_counts().items():
        grown = count - served.get(key, 0)
        if grown:
            per_pipeline[PIPELINE_OF[key]] = per_pipeline.get(PIPELINE_OF[key], 0) + grown
    counts = {k: v - ahead[k] for k, v in wan_ahead.counts().items()}
    return draws, per_pipeline, counts


SERVED = {
    "Wan2.2 T2V/TI2V/VACE",
    "Wan2.2 I2V",
    "LTX-2",
    "HunyuanVideo-1.5 T2V",
    "HunyuanVideo-1.5 I2V",
    "Qwen-Image",
    "Qwen-Image-Edit",
    "Qwen-Image-Edit-Plus",
    "Qwen-Image-Layered",
    "Stable Audio",
}
"""The pipelines whose serial draws the stand-ins drive (Wan2.2 T2V's forward is prepared ahead;
its module's `randn_tensor`, called directly, is a serial draw)."""


def test_native_hooks_change_nothing(upstream_draws: dict[str, torch.Tensor]) -> None:
    """native: every hook calls upstream's function; Wan2.2 T2V is still prepared ahead (on the
    worker, local torch) and taken, with the same bits."""
    draws, served, ahead = in_stream("native")
    assert set(draws) == set(upstream_draws)
    for name, tensor in upstream_draws.items():
        assert same_bits(draws[name], tensor), name
    assert served == {}
    if WAN_AHEAD:
        assert ahead == {"prepared": 1, "taken": 1, "serial": 0, "served_in_stream": 0}
    else:
        assert ahead == NO_AHEAD


@pytest.mark.skipif(noise_streams.local_torch_stream() != "x86", reason="local torch is not x86")
def test_x86_stream_is_local_torch_here(upstream_draws: dict[str, torch.Tensor]) -> None:
    draws, served, ahead = in_stream("x86")
    for name, tensor in upstream_draws.items():
        assert same_bits(draws[name], tensor), name
    assert set(served) == SERVED and all(n > 0 for n in served.values())
    if WAN_AHEAD:
        assert ahead == {"prepared": 1, "taken": 1, "serial": 0, "served_in_stream": 2}
    else:
        assert ahead == NO_AHEAD


def test_libm_stream_equals_upstream_on_a_scalar_host(
    upstream_draws: dict[str, torch.Tensor], scalar_host_draws: dict[str, torch.Tensor]
) -> None:
    draws, served, ahead = in_stream("libm")
    assert set(draws) == set(scalar_host_draws)
    for name, tensor in scalar_host_draws.items():
        assert same_bits(draws[name], tensor), name
        if torch.backends.cpu.get_cpu_capability() != "DEFAULT":
            assert not same_bits(draws[name], upstream_draws[name]), name
    assert set(served) == SERVED
    assert served["Stable Audio"] > 10  # initial latents + torchsde's per-step Brownian noise
    assert ahead == (
        {**NO_AHEAD, "prepared": 1, "taken": 1, "served_in_stream": 2} if WAN_AHEAD else NO_AHEAD
    )


# -- refusals and what is left to upstream --------------------------------------------------------


class _CudaGenerator(torch.Generator):
    """A CPU generator that says it is on `cuda:0` (no GPU here): what the hooks look at."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", 0)


def test_a_request_generator_off_the_cpu_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_omni.diffusion.models.hunyuan_video import pipeline_hunyuan_video_1_5 as hunyuan

    pipelines.install_stream_hooks()
    monkeypatch.setenv(NOISE_STREAM_ENV, "x86")
    me = SimpleNamespace(
        num_channels_latents=4, vae_scale_factor_temporal=4, vae_scale_factor_spatial=16
    )
    with pytest.raises(
        NoiseStreamError, match="generator is on cuda:0: set generator_device='cpu'"
    ):
        hunyuan.HunyuanVideo15Pipeline.prepare_latents(
            me, 1, 64, 96, 9, torch.float32, torch.device("cpu"), _CudaGenerator()
        )
    pipe, req = standins.wan_t2v_pipeline(), standins.wan_request(generator=_CudaGenerator())
    with pytest.raises(NoiseStreamError, match="generator_device='cpu'"):
        standins.run_wan(pipe, req)  # not prepared ahead (not a CPU generator): refused serially


def test_upstreams_own_device_generators_are_left_to_upstream(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """LTX-2's euler_ancestral generators are made on the pipeline's device: on a GPU that is
    the device's arithmetic, left to upstream (said once), not refused."""
    from vllm_omni.diffusion.models.ltx2 import ltx2_denoise

    pipelines.install_stream_hooks()
    monkeypatch.setenv(NOISE_STREAM_ENV, "libm")
    sample = torch.zeros(1, 40)
    expected = torch.randn(sample.shape, generator=torch.Generator().manual_seed(5))
    gen = _CudaGenerator()
    gen.manual_seed(5)
    served = pipelines.served_counts()
    with caplog.at_level(logging.INFO, logger="prenoise.vllm_omni"):
        got = ltx2_denoise._randn_like_with_generators(sample, gen)
    assert same_bits(got, expected)  # local torch, as upstream draws it
    assert pipelines.served_counts() == served
    assert "the device's arithmetic, not a CPU stream" in caplog.text


def test_unseeded_and_out_of_scope_draws_are_left_to_upstream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No generator (the global RNG: an unseeded request) and torchsde outside Stable Audio's
    forward (another user of torchsde) run upstream's code in a named stream."""
    from vllm_omni.diffusion.models.qwen_image import pipeline_qwen_image as qwen

    pipelines.install_stream_hooks()
    monkeypatch.setenv(NOISE_STREAM_ENV, "libm")
    served = pipelines.served_counts()
    torch.manual_seed(3)
    expected = torch.randn(2, 40)
    torch.manual_seed(3)
    assert same_bits(qwen.randn_tensor((2, 40), generator=None, dtype=torch.float32), expected)
    from torchsde._brownian import brownian_interval

    got = brownian_interval._randn((2, 40), torch.float32, torch.device("cpu"), 9)
    assert same_bits(got, torch.randn(2, 40, generator=torch.Generator().manual_seed(9)))
    assert pipelines.served_counts() == served


def test_another_plugins_name_makes_its_pipeline_uncovered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A name another plugin replaced is left alone; that pipeline's requests then fail in a
    named stream (never half in it) and run upstream's code in native."""
    from vllm_omni.diffusion.models.qwen_image import pipeline_qwen_image as qwen

    def foreign(*args: Any, **kwargs: Any) -> torch.Tensor:
        return torch.zeros(1)

    monkeypatch.setattr(qwen, "randn_tensor", foreign)
    pipelines.install_stream_hooks()
    assert "Qwen-Image" in pipelines.uncovered_pipelines()
    assert qwen.randn_tensor is foreign
    monkeypatch.setenv(NOISE_STREAM_ENV, "x86")
    with pytest.raises(NoiseStreamError, match="Qwen-Image's noise cannot all be drawn"):
        qwen.QwenImagePipeline.forward(object(), None)
    monkeypatch.setenv(NOISE_STREAM_ENV, "native")
    with pytest.raises(AttributeError):  # upstream's own forward ran (and met a bare object)
        qwen.QwenImagePipeline.forward(object(), SimpleNamespace())


def test_a_pipeline_prenoise_does_not_cover_is_refused_in_a_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Wan2.2 S2V (clip generators on the pipeline's device, a scheduler draw prenoise does not
    hook): a named stream refuses its requests; native runs upstream's forward."""
    standins.import_wan()
    s2v = sys.modules["vllm_omni.diffusion.models.wan2_2.pipeline_wan2_2_s2v"]
    pipelines.install_stream_hooks()
    monkeypatch.setenv(NOISE_STREAM_ENV, "libm")
    with pytest.raises(NoiseStreamError, match="noise is not drawn in noise streams"):
        s2v.Wan22S2VPipeline.forward(object(), None)
    monkeypatch.setenv(NOISE_STREAM_ENV, "native")
    with pytest.raises(AttributeError):  # upstream's own forward ran (and met a bare object)
        s2v.Wan22S2VPipeline.forward(object(), SimpleNamespace())


# -- Wan2.2 T2V prepared ahead ------------------------------------------------------------------


def _wan(req: Any, *, encoder: Any = None, role: Any = None) -> tuple[torch.Tensor, list[bytes]]:
    pipe = standins.wan_t2v_pipeline()
    pipe.text_encoder.on_call = encoder
    if role is not None:
        pipe.stage_role = role
    out = standins.run_wan(pipe, req)
    gens = [sp.generator for sp in req.sampling_params_list if sp.generator is not None]
    return out, [bytes(g.get_state().numpy()) for g in gens]


@wan_ahead_reviewed
def test_wan_batch_taken_and_generators_end_where_upstream_leaves_them(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Two requests of two outputs each (4 draws of 2 generators): taken, same bits, and each
    request generator ends in upstream's state (so later draws from it are unchanged)."""
    expected, states = _wan(standins.wan_request(outputs=2, prompts=2))
    pipelines.install_stream_hooks()
    with caplog.at_level(logging.INFO, logger="prenoise.vllm_omni"):
        got, got_states = _wan(standins.wan_request(outputs=2, prompts=2))
    assert same_bits(got, expected) and got_states == states
    assert "prepared ahead, taken" in caplog.text and wan_ahead.WORKER in caplog.text


@wan_ahead_reviewed
@pytest.mark.parametrize(
    "sizes",
    [
        # 72x104 run as 64x96 (8x12 latent pixels; unrounded 9x13), 12 frames as 13 (4 latent
        # frames; unrounded 3)
        {"height": 72, "width": 104, "num_frames": 12},
        {"height": 64, "width": 96, "num_frames": 8},  # 8 frames run as 9 (3 latent; unrounded 2)
        {"height": None, "width": None, "num_frames": None},  # upstream's 480x832, 81 frames
    ],
)
def test_wan_sizes_upstream_rounds_are_predicted_and_taken(
    sizes: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Height, width and num_frames that forward rounds (0.32.0rc1: `effective_wan_dimensions`,
    called by the prediction; before it: forward's own arithmetic, repeated): the prediction is
    the call upstream makes, so the prepared draw is taken, bitwise upstream's."""
    expected, states = _wan(standins.wan_request(**sizes))
    pipelines.install_stream_hooks()
    before = wan_ahead.counts()
    with caplog.at_level(logging.INFO, logger="prenoise.vllm_omni"):
        got, got_states = _wan(standins.wan_request(**sizes))
    assert same_bits(got, expected) and got_states == states
    assert wan_ahead.counts()["taken"] == before["taken"] + 1, caplog.text
    assert "prepared ahead, taken" in caplog.text


@wan_ahead_reviewed
def test_wan_a_missed_prediction_draws_serially(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A text encoder that advances the request generator (the prediction's generator state no
    longer holds): the prepared tensor is dropped and upstream's serial draw runs, in the
    stream (libm: equal to upstream's whole forward inside `draws_in_stream`); `raise` fails."""

    def encoder_draws(req: Any) -> Any:
        return lambda: torch.rand(3, generator=req.sampling_params_list[0].generator)

    req = standins.wan_request()
    with draws_in_stream("libm"):
        expected, states = _wan(req, encoder=encoder_draws(req))
    pipelines.install_stream_hooks()
    monkeypatch.setenv(NOISE_STREAM_ENV, "libm")
    before = wan_ahead.counts()
    req = standins.wan_request()
    with caplog.at_level(logging.INFO, logger="prenoise.vllm_omni"):
        got, got_states = _wan(req, encoder=encoder_draws(req))
    assert same_bits(got, expected) and got_states == states
    assert wan_ahead.counts()["serial"] == before["serial"] + 1
    assert "differed from the prediction, drawn serially" in caplog.text
    monkeypatch.setenv(MISMATCH_ENV, "raise")
    req = standins.wan_request()
    with pytest.raises(PredictionMismatchError):
        _wan(req, encoder=encoder_draws(req))


@wan_ahead_reviewed
@pytest.mark.parametrize(
    ("why", "req"),
    [
        ("unseeded", lambda: standins.wan_request(seed=None)),
        (
            "the request gives its latents",
            lambda: standins.wan_request(latents=torch.ones(1, 4, 3, 8, 12)),
        ),
    ],
)
def test_wan_not_predicted_runs_upstream(
    why: str, req: Any, caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    expected, _ = _wan(req())
    pipelines.install_stream_hooks()
    torch.manual_seed(0)
    with caplog.at_level(logging.INFO, logger="prenoise.vllm_omni"):
        got, _ = _wan(req())
    assert same_bits(got, expected)
    assert "not prepared ahead, upstream drew them" in caplog.text and why in caplog.text


@pytest.mark.skipif(not WAN_STAGED, reason="Wan2.2's forward has no stage roles here")
@pytest.mark.parametrize("role", ["DENOISE", "DENOISE_DECODE"])
def test_wan_a_disaggregated_stage_runs_upstreams_draw(
    role: str, caplog: pytest.LogCaptureFixture
) -> None:
    """0.32.0rc1's disaggregated generation stages (prompt embeddings delivered by an ENCODE
    stage, where a connector puts them: `additional_information`) are not predicted: upstream's
    forward draws, the same bits and generator states, and the request's log line says why."""
    from vllm_omni.config.stage_config import DiffusionStageRole

    def request() -> Any:
        req = standins.wan_request(outputs=2, prompts=2)
        for i, one in enumerate(req.requests):
            embeds = torch.full((16, standins._TextEncoder.dim), 0.5 + i)
            one.prompt = {**one.prompt, "additional_information": {"prompt_embeds": embeds}}
        return req

    stage = DiffusionStageRole[role]
    expected, states = _wan(request(), role=stage)
    pipelines.install_stream_hooks()
    before = wan_ahead.counts()
    with caplog.at_level(logging.INFO, logger="prenoise.vllm_omni"):
        got, got_states = _wan(request(), role=stage)
    assert same_bits(got, expected) and got_states == states
    assert wan_ahead.counts() == before
    assert (
        f"not prepared ahead, upstream drew them (stage role {stage.value}: a disaggregated "
        "stage takes its inputs from another stage, left to upstream)"
    ) in caplog.text


def test_wan_forward_that_is_not_reviewed_code_runs_upstreams_draw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where what the prediction relies on is not reviewed code (a later release's forward, as
    `support` would find it) nothing is prepared ahead: upstream's forward draws, the same bits
    and generator states (in the stream: libm equal to upstream's whole forward inside
    `draws_in_stream`)."""
    changed = "Wan22Pipeline.forward (…) changed: digest 0123456789ab"
    monkeypatch.setattr(support, "current", lambda: support.Support({WAN_AHEAD_PATH: changed}))
    expected, states = _wan(standins.wan_request(outputs=2, prompts=2))
    with draws_in_stream("libm"):
        in_libm, libm_states = _wan(standins.wan_request())
    pipelines.install_stream_hooks()
    before = wan_ahead.counts()
    got, got_states = _wan(standins.wan_request(outputs=2, prompts=2))
    assert same_bits(got, expected) and got_states == states
    monkeypatch.setenv(NOISE_STREAM_ENV, "libm")
    got, got_states = _wan(standins.wan_request())
    assert same_bits(got, in_libm) and got_states == libm_states
    assert wan_ahead.counts() == before


# -- install, uninstall, modules imported later -------------------------------------------------


def test_uninstall_restores_every_name() -> None:
    standins.import_wan()  # (needs a torchvision stand-in here)
    for module in {t.module for t in TARGETS}:
        importlib.import_module(module)
    before = {t.key: _holder_value(t) for t in TARGETS}
    pipelines.install_stream_hooks()
    pipelines.install_stream_hooks()  # idempotent
    hooked = pipelines.installed_targets()
    assert len(hooked) == len(set(hooked)) == len(TARGETS)  # every module is imported by now
    assert all(_holder_value(t) is not before[t.key] for t in TARGETS)
    pipelines.uninstall_stream_hooks()
    assert all(_holder_value(t) is before[t.key] for t in TARGETS)
    assert pipelines.installed_targets() == []


def _holder_value(target: StreamTarget) -> Any:
    holder: Any = sys.modules[target.module]
    if target.owner is not None:
        holder = vars(holder)[target.owner]
    return vars(holder)[target.name]


def test_a_module_imported_after_install_is_hooked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "prenoise_fakepipe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text(
        textwrap.dedent("""
        import torch
        from diffusers.utils.torch_utils import randn_tensor

        class Pipe:
            def forward(self, generator):
                return randn_tensor((3, 40), generator=generator, dtype=torch.float32)
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    targets = (
        StreamTarget("Fake", "prenoise_fakepipe.mod", "randn_tensor", DRAW, "test draws"),
        StreamTarget(
            "Fake", "prenoise_fakepipe.mod", "forward", ENTRY, "the request", "Pipe", None
        ),
    )
    pipelines.install_stream_hooks(targets=targets)
    assert pipelines.installed_targets() == []
    import prenoise_fakepipe.mod as fake

    assert len(pipelines.installed_targets()) == 2
    assert fake.__spec__ is not None and type(fake.__spec__.loader).__name__ != "_Loader"
    monkeypatch.setenv(NOISE_STREAM_ENV, "libm")
    got = fake.Pipe().forward(torch.Generator().manual_seed(4))
    with draws_in_stream("libm"):
        expected = torch.randn(3, 40, generator=torch.Generator().manual_seed(4))
    assert same_bits(got, expected)
    pipelines.uninstall_stream_hooks()
    assert not any(type(f).__name__ == "AfterImport" for f in sys.meta_path)
    monkeypatch.delitem(sys.modules, "prenoise_fakepipe.mod")
    monkeypatch.delitem(sys.modules, "prenoise_fakepipe")


def test_a_module_whose_draws_changed_makes_its_pipeline_uncovered(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Wan2.2 T2V's module with a drawing function that is not the reviewed code (as a later
    release might add): said once, a named stream refuses its requests (a new draw could escape
    the hooks), native runs upstream's forward (nothing prepared ahead), same bits."""
    from prenoise.integrations.vllm_omni import digests

    wan = "vllm_omni.diffusion.models.wan2_2.pipeline_wan2_2"
    problem = f"the functions that draw in {wan} (Wan22Pipeline.prepare_latents) are not ..."
    real = digests.draw_sites_problem
    monkeypatch.setattr(
        digests, "draw_sites_problem", lambda module: problem if module == wan else real(module)
    )
    expected, states = _wan(standins.wan_request())
    with caplog.at_level(logging.WARNING, logger="prenoise.vllm_omni"):
        pipelines.install_stream_hooks()
        standins.import_wan()
    assert pipelines.uncovered_pipelines()["Wan2.2 T2V/TI2V/VACE"] == problem
    assert [r.getMessage() for r in caplog.records if wan in r.getMessage()] == [
        f"prenoise: {problem}; Wan2.2 T2V/TI2V/VACE: with a non-native "
        "PRENOISE_VLLM_OMNI_NOISE_STREAM their requests fail rather than mix streams, native "
        "runs upstream's code (nothing prepared ahead)"
    ]
    before = wan_ahead.counts()
    got, got_states = _wan(standins.wan_request())
    assert same_bits(got, expected) and got_states == states
    assert wan_ahead.counts() == before
    monkeypatch.setenv(NOISE_STREAM_ENV, "x86")
    with pytest.raises(NoiseStreamError, match=r"be drawn in that stream \(the functions"):
        _wan(standins.wan_request())
