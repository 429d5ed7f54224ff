"""HunyuanVideo, StableAudio and LTX-2: draws beyond the noise, scheduler draws, fall-throughs."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("diffusers")

import torch
from diffusers_tiny import (
    assert_outputs_bitwise_equal,
    assert_same_states,
    both_arms,
    call_kwargs,
    generators,
    global_rng_arms,
)

from prenoise.integrations.diffusers import overlapped_call_with_report, plan_call

LOGGER = "prenoise.integrations.diffusers"


@pytest.fixture
def count_draws() -> Iterator[Callable[[str], list[tuple[int, ...]]]]:
    """`count_draws(module)`: shapes of the `randn_tensor` calls made in that diffusers module."""
    import importlib

    restore: list[tuple[Any, Any]] = []

    def install(name: str) -> list[tuple[int, ...]]:
        module = importlib.import_module(name)
        original = module.randn_tensor
        shapes: list[tuple[int, ...]] = []

        def counting(shape: Any, *args: Any, **kwargs: Any) -> Any:
            shapes.append(tuple(shape))
            return original(shape, *args, **kwargs)

        module.randn_tensor = counting
        restore.append((module, original))
        return shapes

    yield install
    for module, original in reversed(restore):
        module.randn_tensor = original


# -- HunyuanVideo -------------------------------------------------------------------------------


def test_hunyuan_video_noise_shape(tiny: Any) -> None:
    pipe = tiny("hunyuan_video")
    kwargs = {**call_kwargs("hunyuan_video"), "num_frames": 13, "height": 32, "width": 16}
    (draw,) = plan_call(pipe, (), {**kwargs, "generator": generators([0])[0]})
    assert draw.shape == (1, 4, 4, 4, 2) and draw.dtype == torch.float32
    plain, overlapped, report, pg, og = both_arms(pipe, {**kwargs, "output_type": "latent"}, [1])
    assert report.served == 1
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


def test_hunyuan_video_caller_latents_fall_through(tiny: Any) -> None:
    pipe, kwargs = tiny("hunyuan_video"), call_kwargs("hunyuan_video")
    latents = torch.randn((1, 4, 3, 2, 2), generator=torch.Generator().manual_seed(1))
    pg, og = generators([2]), generators([2])
    plain = pipe(generator=pg[0], latents=latents, **kwargs)
    overlapped, report = overlapped_call_with_report(
        pipe, generator=og[0], latents=latents, **kwargs
    )
    assert not report.overlapped and report.reason == "caller-supplied latents"
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


# -- StableAudio --------------------------------------------------------------------------------


def test_stable_audio_scheduler_draws_come_from_the_advanced_generator(
    tiny: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDE DPM-Solver draws on every step after the noise, from the caller's generator
    already advanced by the prepared noise: left to the pipeline."""
    import diffusers.schedulers.scheduling_edm_dpmsolver_multistep as edm

    calls: list[Any] = []
    original = edm.randn_tensor

    def recording(shape: Any, *args: Any, generator: Any = None, **kwargs: Any) -> Any:
        calls.append(generator)
        return original(shape, *args, generator=generator, **kwargs)

    monkeypatch.setattr(edm, "randn_tensor", recording)
    pipe = tiny("stable_audio")
    plain, overlapped, report, pg, og = both_arms(pipe, call_kwargs("stable_audio"), [21])
    # each arm's scheduler drew once per step (2 steps) from that arm's own generator
    assert [id(g) for g in calls] == [id(pg[0])] * 2 + [id(og[0])] * 2
    assert report.planned == ("noise",) and report.served == 1
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


@pytest.mark.parametrize("seeds", [[0], [12345], [3, 4]])
def test_stable_audio_initial_audio_sample_is_prepared(tiny: Any, seeds: list[int]) -> None:
    """One generator, or a list of one per prompt: the VAE sample follows the noise."""
    pipe = tiny("stable_audio")
    prompts = len(seeds)
    waveform = torch.linspace(-1.0, 1.0, 10 * prompts).reshape(prompts, 2, 5)
    kwargs = {
        **call_kwargs("stable_audio", prompts),
        "initial_audio_waveforms": waveform,
        "initial_audio_sampling_rate": pipe.vae.sampling_rate,
    }
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, seeds, as_list=prompts > 1)
    assert report.planned == ("noise", "audio_sample") and report.served == 2
    assert report.left_plan is None
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


def test_stable_audio_initial_audio_with_a_longer_generator_list(tiny: Any) -> None:
    """Two waveforms per prompt: the VAE sample uses the first generator of the list of two, which
    a planned draw cannot express; only the noise is prepared."""
    pipe = tiny("stable_audio")
    kwargs = {
        **call_kwargs("stable_audio"),
        "num_waveforms_per_prompt": 2,
        "initial_audio_waveforms": torch.ones((1, 2, 5)),
        "initial_audio_sampling_rate": pipe.vae.sampling_rate,
    }
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [5, 6], as_list=True)
    assert report.planned == ("noise",) and report.served == 1
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


@pytest.mark.parametrize("as_list", [False, True])
def test_stable_audio_cosine_scheduler_seeds_from_initial_seed(tiny: Any, as_list: bool) -> None:
    """The released scheduler seeds its Brownian tree from `initial_seed()` of the same generator
    objects; prepared draws do not change it, so nothing needs planning."""
    pytest.importorskip("torchsde")
    pipe = tiny("stable_audio_cosine")
    seeds, prompts = ([7, 8], 2) if as_list else ([7], 1)
    plain, overlapped, report, pg, og = both_arms(
        pipe, call_kwargs("stable_audio", prompts), seeds, as_list
    )
    assert report.planned == ("noise",) and report.served == 1
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


def test_stable_audio_generator_none_falls_through(
    tiny: Any, caplog: pytest.LogCaptureFixture
) -> None:
    pipe, kwargs = tiny("stable_audio"), call_kwargs("stable_audio")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        plain, overlapped, report, after_plain, after_overlapped = global_rng_arms(pipe, kwargs)
    assert not report.overlapped and "generator is None" in str(report.reason)
    assert any("StableAudioPipeline" in r.getMessage() for r in caplog.records)
    assert_outputs_bitwise_equal(plain, overlapped)
    assert torch.equal(after_plain, after_overlapped)


# -- LTX-2 --------------------------------------------------------------------------------------


def test_ltx2_draw_shapes(tiny: Any) -> None:
    pipe = tiny("ltx2")
    kwargs = {**call_kwargs("ltx2"), "num_frames": 17, "frame_rate": 24.0, "height": 64}
    video, audio, decode = plan_call(pipe, (), {**kwargs, "generator": generators([0])[0]})
    assert video.shape == (1, 4, 9, 32, 16) and video.dtype == torch.float32
    # round(17 / 24 s · 16000 / 160 / 4 per s) = round(17.7) latent audio frames, 8 / 4 mel bins
    assert audio.shape == (1, 2, 18, 2) and audio.dtype == torch.float32
    assert decode.shape == video.shape and decode.dtype == pipe.text_encoder.dtype


@pytest.mark.parametrize("variant", ["latent", "callback"])
def test_ltx2_without_a_certain_decode_noise(tiny: Any, variant: str) -> None:
    """A latent output skips the decode noise; a step callback may touch the generator before it:
    only the video and audio noise are prepared either way."""
    pipe = tiny("ltx2")
    kwargs = call_kwargs("ltx2")
    if variant == "latent":
        kwargs["output_type"] = "latent"
    else:
        kwargs["callback_on_step_end"] = lambda pipe, i, t, tensors: tensors
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [7])
    assert report.planned == ("noise", "audio_noise") and report.served == 2
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


def test_ltx2_caller_audio_latents_still_draw(tiny: Any) -> None:
    """With `audio_latents` the pipeline noises them (`_create_noised_state`): that draw, of the
    packed latents' shape and dtype, is prepared like the fresh audio noise."""
    pipe = tiny("ltx2")
    kwargs = call_kwargs("ltx2")
    first = pipe(generator=generators([3])[0], **{**kwargs, "output_type": "latent"})
    kwargs.update(audio_latents=first.audio, noise_scale=0.5)  # audio latents (1, 2, 5, 2)
    _, audio, _ = plan_call(pipe, (), {**kwargs, "generator": generators([0])[0]})
    assert audio.shape == (1, 5, 4) and audio.dtype == torch.float32
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [4])
    assert report.planned == ("noise", "audio_noise", "decode_noise") and report.served == 3
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


def test_ltx2_auto_duration_falls_through(tiny: Any, caplog: pytest.LogCaptureFixture) -> None:
    pipe = tiny("ltx2_duration_head")
    kwargs = {**call_kwargs("ltx2"), "num_frames": None, "output_type": "latent"}
    kwargs.update(min_seconds=0.2, max_seconds=0.4)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [5])
    assert not report.overlapped and "duration head" in str(report.reason)
    assert any("LTX2Pipeline" in r.getMessage() for r in caplog.records)
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


def test_ltx2_explicit_num_frames_with_a_duration_head_is_prepared(tiny: Any) -> None:
    pipe = tiny("ltx2_duration_head")
    plain, overlapped, report, pg, og = both_arms(pipe, call_kwargs("ltx2"), [6])
    assert report.served == 3
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


def test_ltx2_prompt_enhancement_falls_through(
    tiny: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The enhancer reseeds the global RNG from the generator's `initial_seed()` and samples a new
    prompt (stubbed here as the real one seeds, without a Gemma processor)."""
    pipe = tiny("ltx2")

    def enhance_prompt(prompt: str, generator: Any = None, **kwargs: Any) -> list[str]:
        torch.manual_seed(generator.initial_seed())
        words = prompt.split()
        return [" ".join(words[i] for i in torch.randperm(len(words)).tolist())]

    monkeypatch.setattr(pipe, "enhance_prompt", enhance_prompt)
    kwargs = {**call_kwargs("ltx2"), "enable_prompt_enhancement": True, "system_prompt": "x"}
    pg, og = generators([9]), generators([9])
    with torch.random.fork_rng(devices=[]):
        plain = pipe(generator=pg[0], **kwargs)
        after_plain = torch.get_rng_state()
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            overlapped, report = overlapped_call_with_report(pipe, generator=og[0], **kwargs)
        after_overlapped = torch.get_rng_state()
    assert not report.overlapped and "prompt enhancement" in str(report.reason)
    assert any("prompt enhancement" in r.getMessage() for r in caplog.records)
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    assert torch.equal(after_plain, after_overlapped)
