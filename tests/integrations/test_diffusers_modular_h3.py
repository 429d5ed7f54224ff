"""MiniMax-H3 modular (diffusers 0.40.0-0.42.1) with prenoise enabled: every output bit, the
caller's generator and the global RNG as the plain call leaves them, all three workflows.

Each test runs both arms in this process on one tiny pipeline (`tiny_minimax_h3.py`): the plain
call (the pipeline's own `__call__`), then the same call enabled, from generators in the same
state. "Equal" is `torch.equal` on the integer bit views of every tensor the returned state holds.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

pytest.importorskip(
    "diffusers.modular_pipelines.minimax_h3",
    reason="diffusers' modular MiniMax-H3 is in 0.40.0 and later (its plan: 0.40.0-0.42.1)",
)

import tiny_minimax_h3 as tiny
from diffusers.modular_pipelines import PipelineState

from prenoise.integrations.diffusers import (
    disable,
    enable,
    is_enabled,
    overlapped_call_with_report,
    plan_call,
)
from prenoise.integrations.diffusers.modular import hook
from prenoise.integrations.diffusers.modular import minimax_h3 as h3_plan
from prenoise.integrations.diffusers.patching import patched_modules
from prenoise.integrations.diffusers.plan import Unpredictable
from prenoise.preparation.served import ServedDraws

LOGGER = "prenoise.integrations.diffusers"


@pytest.fixture(scope="module")
def pipe() -> Iterator[Any]:
    pipe = tiny.minimax_h3()
    yield pipe
    disable(pipe)


def _bits(t: torch.Tensor) -> torch.Tensor:
    if t.is_floating_point():
        view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
        return t.contiguous().view(view)
    return t


def state_tensors(state: Any) -> dict[str, torch.Tensor]:
    """Every tensor a returned state (or a dict / tensor output) holds, by name."""
    values = state.values if isinstance(state, PipelineState) else state
    if isinstance(values, torch.Tensor):
        return {"output": values}
    out: dict[str, torch.Tensor] = {}
    for name, value in values.items():
        if isinstance(value, torch.Tensor):
            out[name] = value
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                if isinstance(item, torch.Tensor):
                    out[f"{name}[{i}]"] = item
    return out


def assert_states_equal(a: Any, b: Any) -> None:
    ta, tb = state_tensors(a), state_tensors(b)
    assert ta.keys() == tb.keys()
    assert "videos" in ta or "output" in ta
    for name in ta:
        assert ta[name].dtype == tb[name].dtype and ta[name].shape == tb[name].shape, name
        assert torch.equal(_bits(ta[name]), _bits(tb[name])), f"{name} differs"


def both_arms(
    pipe: Any, make_kwargs: Callable[[], dict[str, Any]], stream: str = "native"
) -> tuple[Any, Any, Any]:
    """(plain output, enabled output, enabled report); asserts the generators and the global RNG
    end alike in both arms."""
    disable(pipe)
    kwargs = make_kwargs()
    torch.manual_seed(1234)
    if stream == "native":
        plain = pipe(**kwargs)
    else:
        from prenoise.integrations.diffusers.streams import plain_in_stream

        plain = plain_in_stream(type(pipe).__call__, stream, pipe, **kwargs)
    plain_rng = torch.get_rng_state()
    enable(pipe, stream=stream)
    kwargs_enabled = make_kwargs()
    torch.manual_seed(1234)
    out, report = overlapped_call_with_report(pipe, **kwargs_enabled)
    assert torch.equal(torch.get_rng_state(), plain_rng), "global RNG"
    gen_a, gen_b = kwargs.get("generator"), kwargs_enabled.get("generator")
    if isinstance(gen_a, torch.Generator):
        assert torch.equal(gen_a.get_state(), gen_b.get_state()), "caller's generator"
    assert not hook.is_installed() and not patched_modules()
    return plain, out, report


REFERENCE_SETS: dict[str, Callable[[], list[Any]]] = {
    "image-64x48": lambda: [tiny.image_reference(64, 48)],
    "two-images": lambda: [tiny.image_reference(48, 80, seed=1), tiny.image_reference(96, 64)],
    "video+audio": lambda: [tiny.video_reference(30, 48, 32, with_audio=True)],
    "image+audio": lambda: [tiny.image_reference(64, 64, seed=2), tiny.audio_reference(2.0)],
    "video-12fps+image": lambda: [
        tiny.video_reference(20, 32, 64, fps=12.0, seed=3),
        tiny.image_reference(32, 32, seed=4),
    ],
}


@pytest.mark.parametrize("seed", [0, 2101])
@pytest.mark.parametrize("references", sorted(REFERENCE_SETS))
def test_ref2va_bitwise(pipe: Any, references: str, seed: int) -> None:
    refs = REFERENCE_SETS[references]
    plain, out, report = both_arms(
        pipe, lambda: tiny.call_kwargs("ref2va", seed=seed, references=refs())
    )
    assert_states_equal(plain, out)
    visual = sum(1 for r in refs() if r.kind != "audio")
    expected = tuple(f"condition.{i}" for i, r in enumerate(refs()) if r.kind != "audio")
    assert len(expected) == visual
    assert report.overlapped and report.planned == (*expected, "video", "audio")
    assert report.served == len(report.planned) and report.left_plan is None


@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("keyframes", ["image", "last_image", "both"])
def test_fl2va_bitwise(pipe: Any, keyframes: str, seed: int) -> None:
    def kwargs() -> dict[str, Any]:
        kw = tiny.call_kwargs("fl2va", seed=seed)
        if keyframes == "last_image":
            kw["last_image"] = kw.pop("image")
        elif keyframes == "both":
            kw["last_image"] = tiny.keyframe(64, 64, seed=1)
        return kw

    plain, out, report = both_arms(pipe, kwargs)
    assert_states_equal(plain, out)
    count = 2 if keyframes == "both" else 1
    labels = tuple(f"keyframe.{i}" for i in range(count))
    assert report.planned == (*labels, "video", "audio") and report.served == count + 2


@pytest.mark.parametrize("seed", [0, 5])
@pytest.mark.parametrize("size", [(32, 32), (64, 32), None])
def test_t2va_bitwise(pipe: Any, size: tuple[int, int] | None, seed: int) -> None:
    height, width = size if size is not None else (None, None)
    plain, out, report = both_arms(
        pipe, lambda: tiny.call_kwargs("t2va", seed=seed, height=height, width=width)
    )
    assert_states_equal(plain, out)
    assert report.planned == ("video", "audio") and report.served == 2


def test_state_and_output_form(pipe: Any) -> None:
    """`pipe(state, output=...)`: the state's generator (deep-copied by the pipeline) is the one
    planned on, and the output is the plain one."""

    def kwargs() -> dict[str, Any]:
        kw = tiny.call_kwargs("ref2va", seed=11)
        state = PipelineState()
        state.set("generator", kw.pop("generator"))
        return {"state": state, "output": "videos", **kw}

    plain, out, report = both_arms(pipe, kwargs)
    assert torch.equal(_bits(plain), _bits(out))
    assert report.overlapped and report.served == 3


def test_workflow_pipeline(pipe: Any) -> None:
    """A pipeline of one workflow (`MiniMaxH3Blocks().get_workflow("ref2va")`) is planned too."""
    ref_pipe = tiny.minimax_h3("ref2va")
    plain, out, report = both_arms(ref_pipe, lambda: tiny.call_kwargs("ref2va", seed=4))
    assert_states_equal(plain, out)
    assert report.served == 3


@pytest.mark.parametrize("given", ["latents", "audio_latents", "both"])
def test_given_latents_shift_the_draws(pipe: Any, given: str) -> None:
    shapes = {
        "latents": (1, int(pipe.vae_latent_channels), 37, 2, 2),
        "audio_latents": (2, int(pipe.audio_latent_channels), 207),
    }
    names = ("latents", "audio_latents") if given == "both" else (given,)

    def kwargs() -> dict[str, Any]:
        noise = torch.Generator().manual_seed(99)
        extra = {n: torch.randn(shapes[n], generator=noise) for n in names}
        return tiny.call_kwargs("fl2va", seed=3, **extra)

    plain, out, report = both_arms(pipe, kwargs)
    assert_states_equal(plain, out)
    expected = ["keyframe.0", "video", "audio"]
    for n in names:
        expected.remove({"latents": "video", "audio_latents": "audio"}[n])
    assert report.planned == tuple(expected) and report.served == len(expected)


@pytest.mark.parametrize("stream", ["x86", "libm"])
def test_named_streams_cover_every_draw(pipe: Any, stream: str) -> None:
    make = lambda: tiny.call_kwargs(  # noqa: E731
        "ref2va", seed=2101, references=REFERENCE_SETS["video+audio"]()
    )
    plain, out, report = both_arms(pipe, make, stream=stream)
    assert_states_equal(plain, out)
    assert report.stream == stream and report.served == 3
    # the plain arm drew every randn_tensor call in the stream (`plain_in_stream`): equal bits
    # mean every served draw is the stream's; libm differs from local torch on every host
    if stream == "libm":
        disable(pipe)
        native = pipe(**make())
        assert not torch.equal(_bits(native.get("videos")), _bits(out.get("videos")))


def test_the_draws_run_on_the_worker(pipe: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    original = ServedDraws._draw

    def recording(self: Any, entry: Any) -> torch.Tensor:
        threads.append(threading.current_thread().name)
        return original(self, entry)

    monkeypatch.setattr(ServedDraws, "_draw", recording)
    plain, out, _ = both_arms(pipe, lambda: tiny.call_kwargs("ref2va", seed=1))
    assert_states_equal(plain, out)
    assert len(threads) == 3 and all(t.startswith("prenoise-diffusers#") for t in threads)
    assert threading.current_thread().name not in threads


def test_a_flipped_bit_in_a_prepared_draw_is_caught(
    pipe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The comparison sees the prepared tensors: corrupting one makes the arms differ."""
    original = ServedDraws._draw

    def flipped(self: Any, entry: Any) -> torch.Tensor:
        tensor = original(self, entry)
        if entry.planned.label == "video":
            tensor.view(torch.int32).view(-1)[0] ^= 1
        return tensor

    monkeypatch.setattr(ServedDraws, "_draw", flipped)
    plain, out, report = both_arms(pipe, lambda: tiny.call_kwargs("t2va", seed=0))
    assert report.served == 2
    with pytest.raises(AssertionError, match="differs"):
        assert_states_equal(plain, out)


def test_an_encoded_shape_unlike_the_prediction_falls_back(
    pipe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prediction is checked against the encoded condition latents before any draw."""
    real = h3_plan._video_latent_frames
    monkeypatch.setattr(h3_plan, "_video_latent_frames", lambda pipe, n: real(pipe, n) + 5)
    plain, out, report = both_arms(
        pipe, lambda: tiny.call_kwargs("ref2va", seed=3, references=REFERENCE_SETS["video+audio"]())
    )
    assert_states_equal(plain, out)
    assert report.overlapped and report.served == 0
    c = int(pipe.vae_latent_channels)
    assert report.left_plan == (
        f"encoded condition shapes [(1, {c}, 7, 2, 4)] differ from the predicted "
        f"[(1, {c}, 12, 2, 4)]"
    )


def test_an_encoder_that_raises(
    patched_upstream: None, pipe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The original exception reaches the caller; the pending draws are cancelled, the running
    one joined, the generator untouched and nothing left installed."""
    from diffusers.modular_pipelines.minimax_h3 import encoders

    from prenoise.preparation.executor import PreparationExecutor

    started, release = threading.Event(), threading.Event()
    ran: list[str] = []
    original = ServedDraws._draw

    def slow(self: Any, entry: Any) -> torch.Tensor:
        ran.append(entry.planned.label)
        started.set()
        assert release.wait(10)
        return original(self, entry)

    def broken(self: Any, components: Any, state: Any) -> Any:
        self.get_block_state(state)  # the block starts: the plan is submitted
        assert started.wait(10)
        raise RuntimeError("encoder out of memory")

    shutdown = PreparationExecutor._shutdown

    def shutdown_then_release(self: PreparationExecutor) -> list[str]:
        # the running draw finishes only after the shutdown cancelled the pending ones
        threading.Timer(0.3, release.set).start()
        return shutdown(self)

    monkeypatch.setattr(ServedDraws, "_draw", slow)
    monkeypatch.setattr(encoders.MiniMaxH3Ref2VAReferenceEncoderStep, "__call__", broken)
    monkeypatch.setattr(PreparationExecutor, "_shutdown", shutdown_then_release)
    enable(pipe)
    kwargs = tiny.call_kwargs("ref2va", seed=5)
    before = kwargs["generator"].get_state()
    with pytest.raises(RuntimeError, match="encoder out of memory") as caught:
        pipe(**kwargs)
    notes = getattr(caught.value, "__notes__", [])
    assert notes == ["prenoise: cancelled pending preparation ['1:video', '2:audio']"]
    assert ran == ["condition.0"]
    assert torch.equal(kwargs["generator"].get_state(), before)
    assert not any(t.name.startswith("prenoise-diffusers#") for t in threading.enumerate())
    assert not hook.is_installed() and not patched_modules()


def test_a_generator_the_encoders_also_draw_from(
    patched_upstream: None, pipe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block that draws from the request's generator after the plan: the prepared draws no
    longer start where the generator is, so every draw is the plain one."""
    from diffusers.modular_pipelines.minimax_h3 import encoders

    original = encoders.MiniMaxH3Ref2VAReferenceEncoderStep.__call__

    def drawing(self: Any, components: Any, state: Any) -> Any:
        torch.randn(3, generator=state.get("generator"))
        return original(self, components, state)

    monkeypatch.setattr(encoders.MiniMaxH3Ref2VAReferenceEncoderStep, "__call__", drawing)
    plain, out, report = both_arms(pipe, lambda: tiny.call_kwargs("ref2va", seed=8))
    assert_states_equal(plain, out)
    assert report.overlapped and report.served == 0
    assert report.left_plan is not None and "something else drew from it" in report.left_plan


@pytest.mark.parametrize(
    ("generator", "key"),
    [
        (lambda: None, "generator is None"),
        (lambda: torch.manual_seed(0), "generator is torch's default cpu generator"),
    ],
)
def test_unpredictable_generators_run_plain(
    pipe: Any, generator: Callable[[], Any], key: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger=LOGGER):
        plain, out, report = both_arms(
            pipe, lambda: tiny.call_kwargs("fl2va", seed=0, generator=generator())
        )
    assert_states_equal(plain, out)
    assert not report.overlapped and report.reason is not None and key in report.reason
    assert any(key in r.getMessage() for r in caplog.records)


def test_a_call_that_raises_plain_raises_alike(pipe: Any) -> None:
    """Two generators for one request: diffusers' own error, unchanged, in both arms."""
    kwargs = lambda: tiny.call_kwargs(  # noqa: E731
        "t2va", generator=[torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)]
    )
    disable(pipe)
    with pytest.raises(IndexError) as plain:
        pipe(**kwargs())
    enable(pipe)
    with pytest.raises(IndexError) as enabled:
        pipe(**kwargs())
    assert str(plain.value) == str(enabled.value)
    assert not hook.is_installed() and not patched_modules()


def test_enable_is_the_classic_contract(pipe: Any) -> None:
    assert enable(pipe) is pipe and is_enabled(pipe)
    assert type(pipe).__name__ == "MiniMaxH3ModularPipeline"
    with pytest.raises(Unpredictable, match="planned during the call"):
        plan_call(pipe, (), tiny.call_kwargs("t2va"))
    assert disable(pipe) is pipe and not is_enabled(pipe)


def test_deepcopy_keeps_it_enabled(pipe: Any) -> None:
    enable(pipe)
    try:
        twin = copy.deepcopy(pipe)
        assert is_enabled(twin)
    finally:
        disable(pipe)


def test_an_unknown_modular_class_runs_plain(caplog: pytest.LogCaptureFixture) -> None:
    from diffusers.modular_pipelines.minimax_h3 import MiniMaxH3ModularPipeline

    class Custom(MiniMaxH3ModularPipeline):
        pass

    pipe = tiny.minimax_h3("t2va")
    pipe.__class__ = Custom
    with caplog.at_level("WARNING", logger=LOGGER):
        out, report = overlapped_call_with_report(pipe, **tiny.call_kwargs("t2va"))
    assert not report.overlapped and report.reason is not None
    assert report.reason.startswith("no noise plan for ")
    assert out.get("videos") is not None


def _reference(kind: str, width: int, height: int, frames: int, fps: float, seed: int) -> Any:
    if kind == "image":
        return tiny.image_reference(width, height, seed=seed)
    if kind == "audio":
        return tiny.audio_reference(frames / 24.0, seed=seed)
    return tiny.video_reference(frames, width, height, fps=fps, with_audio=kind == "av", seed=seed)


def test_ref2va_prediction_property(pipe: Any) -> None:
    """Random reference sets: every predicted draw is served (the prediction equals what
    diffusers encodes) and the outputs are the plain call's bit for bit."""
    from hypothesis import HealthCheck, assume, given, settings
    from hypothesis import strategies as st

    side = st.sampled_from([16, 24, 32, 48, 64, 80])
    reference = st.tuples(
        st.sampled_from(["image", "video", "av", "audio"]),
        side,
        side,
        st.integers(1, 45),
        st.sampled_from([12.0, 24.0, 25.0, 30.0]),
    )

    @settings(
        max_examples=16,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(st.lists(reference, min_size=1, max_size=3), st.integers(0, 2**31 - 1))
    def check(specs: list[tuple[str, int, int, int, float]], seed: int) -> None:
        # diffusers refuses a video shorter than 13 frames at 24 fps (it reads 2 fps pairs)
        assume(all(k in ("image", "audio") or n * 24 / fps >= 13 for k, _, _, n, fps in specs))
        if all(kind == "audio" for kind, *_ in specs):
            specs = [("image", 32, 32, 13, 24.0), *specs]
        for w, h in ((w, h) for _, w, h, *_ in specs):
            if w > 4 * h or h > 4 * w:
                return
        make = lambda: tiny.call_kwargs(  # noqa: E731
            "ref2va",
            seed=seed,
            references=[_reference(*spec, seed=i) for i, spec in enumerate(specs)],
        )
        plain, out, report = both_arms(pipe, make)
        assert_states_equal(plain, out)
        assert report.served == len(report.planned), report

    check()


def test_concurrent_calls_keep_their_own_draws(pipe: Any) -> None:
    """Two enabled calls at once on two threads (two pipelines): each call's hook and replay
    queue see only its own blocks and draws (context variables), both outputs plain-equal."""
    other = tiny.minimax_h3()
    disable(pipe)
    expected = {
        seed: pipe(
            **tiny.call_kwargs("ref2va", seed=seed, references=REFERENCE_SETS["two-images"]())
        )
        for seed in (21, 22)
    }
    enable(pipe)
    enable(other)
    results: dict[int, Any] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def run(target: Any, seed: int) -> None:
        try:
            start.wait(10)
            kwargs = tiny.call_kwargs(
                "ref2va", seed=seed, references=REFERENCE_SETS["two-images"]()
            )
            results[seed] = overlapped_call_with_report(target, **kwargs)
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [
        threading.Thread(target=run, args=(pipe, 21)),
        threading.Thread(target=run, args=(other, 22)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    for seed, (out, report) in results.items():
        assert_states_equal(expected[seed], out)
        assert report.served == 4, report
    assert not hook.is_installed() and not patched_modules()
    disable(other)


def test_debug_rng_checks_prenoise_draws_not_the_pipelines(
    patched_upstream: None, pipe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PRENOISE_DEBUG_RNG=1: a block's own global-RNG draw is the pipeline's business (the call
    runs overlapped, plain-equal); a prepared draw that drew the global RNG would raise."""
    from diffusers.modular_pipelines.minimax_h3 import encoders

    from prenoise.integrations.diffusers import rng_probe
    from prenoise.verify.rng_guard import GlobalRNGChangedError

    original = encoders.MiniMaxH3Ref2VAReferenceEncoderStep.__call__

    def global_draw(self: Any, components: Any, state: Any) -> Any:
        torch.rand(2)  # the pipeline's own use of the global RNG
        return original(self, components, state)

    monkeypatch.setattr(encoders.MiniMaxH3Ref2VAReferenceEncoderStep, "__call__", global_draw)
    monkeypatch.setenv("PRENOISE_DEBUG_RNG", "1")
    plain, out, report = both_arms(pipe, lambda: tiny.call_kwargs("ref2va", seed=12))
    assert_states_equal(plain, out)
    assert report.served == 3

    real = rng_probe.run_draw
    monkeypatch.setattr(rng_probe, "run_draw", lambda *a, **k: (torch.rand(1), real(*a, **k))[1])
    with pytest.raises(GlobalRNGChangedError, match=r"prepared draw condition\.0"):
        pipe(**tiny.call_kwargs("ref2va", seed=12))
