"""Sana-Video (`SanaVideoPipeline`, `SanaImageToVideoPipeline`) beyond the generic bitwise tests:
per-step scheduler noise (both pipelines hand the generator to `scheduler.step`), resolution
binning, several videos per prompt, and the calls that run plain."""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("diffusers")

from diffusers_tiny import (
    assert_outputs_bitwise_equal,
    assert_same_states,
    both_arms,
    call_kwargs,
    generators,
    output_tensor,
)
from tiny_sana_video import sana_video

from prenoise.integrations.diffusers import overlapped_call_with_report
from prenoise.integrations.diffusers.call import plan_call
from prenoise.integrations.diffusers.plan import Unpredictable


def _arms(pipe: Any, kwargs: dict[str, Any], seeds: list[int], as_list: bool = False) -> Any:
    """Both arms, asserted bitwise equal (outputs and generator states); returns the report."""
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, seeds, as_list)
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    return plain, report


def _step_draws_made(report: Any) -> int:
    """Per-step draws the look-ahead saw: the served ones, plus the first one when it was drawn
    plainly."""
    return int(report.step_served) + (0 if getattr(report, "step_first_ahead", False) else 1)


# -- per-step noise -----------------------------------------------------------------------------


@pytest.mark.parametrize("steps", [1, 4])
def test_dpm_solver_sde_draws_every_step_from_the_callers_generator(tiny: Any, steps: int) -> None:
    """DPM-Solver++ in SDE mode: one draw of the latents' shape per step, after the noise."""
    pipe = tiny("sana_video_sde")
    kwargs = {**call_kwargs("sana_video_sde"), "num_inference_steps": steps}
    _, report = _arms(pipe, kwargs, [21])
    assert report.overlapped and report.planned == ("noise",) and report.served == 1
    assert _step_draws_made(report) == steps and report.step_left is None


def test_the_default_dpm_solver_draws_only_the_noise(tiny: Any) -> None:
    pipe = tiny("sana_video")
    kwargs = {**call_kwargs("sana_video"), "num_inference_steps": 3}
    plain, report = _arms(pipe, kwargs, [22])
    assert report.served == 1 and report.step_served == 0
    assert output_tensor(plain).shape == (1, 9, 3, 32, 32)


def test_i2v_stochastic_flow_match_steps_all_but_the_first_frame(tiny: Any) -> None:
    """Flow-match Euler with `stochastic_sampling`: each step draws for the latent frames after
    the conditioning one, from the caller's generator."""
    import diffusers.schedulers.scheduling_flow_match_euler_discrete as flow

    pipe = tiny("sana_video_i2v_sde")
    kwargs = {**call_kwargs("sana_video_i2v_sde"), "num_inference_steps": 4}
    shapes: list[tuple[int, ...]] = []
    original = flow.randn_tensor

    def recording(shape: Any, *args: Any, **kw: Any) -> torch.Tensor:
        shapes.append(tuple(shape))
        return original(shape, *args, **kw)

    flow.randn_tensor = recording
    try:
        pipe(generator=generators([23])[0], **kwargs)
    finally:
        flow.randn_tensor = original
    # (B, C, F' - 1, h, w) with F' = 3 latent frames: the first one is the image's
    assert shapes == [(1, 16, 2, 4, 4)] * 4
    _, report = _arms(pipe, kwargs, [23])
    assert report.planned == ("noise",) and report.served == 1
    assert _step_draws_made(report) == 4 and report.step_left is None
    assert shapes[:4] == [(1, 16, 2, 4, 4)] * 4


def test_i2v_generator_list_with_the_stochastic_scheduler(tiny: Any) -> None:
    """Two prompts on two generators: the noise is prepared per row, the per-step draws (one
    per sample) are left to the pipeline."""
    pipe = tiny("sana_video_i2v_sde")
    kwargs = call_kwargs("sana_video_i2v_sde", 2)
    plain, report = _arms(pipe, kwargs, [3, 4], as_list=True)
    assert report.served == 1 and report.step_served == 0
    assert output_tensor(plain).shape[0] == 2


# -- shapes -------------------------------------------------------------------------------------


def test_resolution_binning_maps_the_size_to_the_480p_bin(tiny: Any) -> None:
    """100×180 falls in the 0.57 bin (480×832): latents (1, 16, 1, 60, 104)."""
    import diffusers.pipelines.sana_video.pipeline_sana_video as module

    pipe = tiny("sana_video")
    kwargs = {
        **call_kwargs("sana_video"),
        "use_resolution_binning": True,
        "height": 100,
        "width": 180,
        "frames": 1,
        "output_type": "latent",
    }
    plain, report = _arms(pipe, kwargs, [24])
    assert report.served == 1
    assert output_tensor(plain).shape == (1, 16, 1, 60, 104)
    (draw,) = plan_call(pipe, (), {**kwargs, "generator": generators([0])[0]})
    assert draw.shape == (1, 16, 1, 60, 104) and draw.dtype == torch.float32
    assert module.ASPECT_RATIO_480_BIN["0.57"] == [480.0, 832.0]


@pytest.mark.parametrize("as_list", [False, True])
def test_several_videos_per_prompt(tiny: Any, as_list: bool) -> None:
    pipe = tiny("sana_video")
    kwargs = {**call_kwargs("sana_video"), "num_videos_per_prompt": 2}
    plain, report = _arms(pipe, kwargs, [5, 6] if as_list else [5], as_list)
    assert report.served == 1 and output_tensor(plain).shape[0] == 2


def test_frames_are_not_rounded(tiny: Any) -> None:
    """`frames=6`: (6 - 1) // 4 + 1 = 2 latent frames, as `prepare_latents` computes them."""
    pipe = tiny("sana_video")
    kwargs = {**call_kwargs("sana_video"), "frames": 6, "output_type": "latent"}
    plain, report = _arms(pipe, kwargs, [7])
    assert report.served == 1 and output_tensor(plain).shape == (1, 16, 2, 4, 4)


def test_prompt_embeds_instead_of_a_prompt(tiny: Any) -> None:
    pipe = tiny("sana_video")
    with torch.no_grad():
        embeds, mask, negative, negative_mask = pipe.encode_prompt(
            ["a cat", "a dog"],
            True,
            negative_prompt="bad",
            max_sequence_length=16,
            complex_human_instruction=[],
        )
    kwargs = {**call_kwargs("sana_video"), "prompt": None, "negative_prompt": None}
    kwargs["prompt_embeds"] = embeds
    kwargs.update(
        prompt_attention_mask=mask,
        negative_prompt_embeds=negative,
        negative_prompt_attention_mask=negative_mask,
        output_type="latent",
    )
    plain, report = _arms(pipe, kwargs, [8, 9], as_list=True)
    assert report.served == 1 and output_tensor(plain).shape[0] == 2


def test_i2v_several_videos_per_prompt_fails_alike() -> None:
    """`SanaImageToVideoPipeline` sizes its conditioning mask by the prompt count, not by the
    videos (diffusers 0.40.0-0.42.1): with `num_videos_per_prompt=2` the transformer raises after
    the noise draw, in both arms, and the generators end alike."""
    pipe = sana_video(image_to_video=True, scheduler="flow")
    kwargs = {**call_kwargs("sana_video_i2v"), "num_videos_per_prompt": 2}
    pg, og = generators([10]), generators([10])
    with pytest.raises(RuntimeError) as plain_error:
        pipe(generator=pg[0], **kwargs)
    with pytest.raises(RuntimeError) as overlapped_error:
        overlapped_call_with_report(pipe, generator=og[0], **kwargs)
    assert str(plain_error.value) == str(overlapped_error.value)
    assert_same_states(pg, og)
    assert not torch.equal(pg[0].get_state(), generators([10])[0].get_state())


# -- calls that run plain -----------------------------------------------------------------------


def test_binning_with_an_unbinned_sample_size_is_unpredictable() -> None:
    """Only sample sizes 30 and 22 have bins; the pipeline raises on any other, so the plan
    does not guess."""
    pipe = sana_video(sample_size=8)
    kwargs = {**call_kwargs("sana_video"), "use_resolution_binning": True}
    with pytest.raises(Unpredictable) as info:
        plan_call(pipe, (), {**kwargs, "generator": generators([0])[0]})
    assert info.value.key == "sana-video-bins"
    pg, og = generators([11]), generators([11])
    with pytest.raises(ValueError, match="Invalid sample size"):
        pipe(generator=pg[0], **kwargs)
    with pytest.raises(ValueError, match="Invalid sample size"):
        overlapped_call_with_report(pipe, generator=og[0], **kwargs)
    assert_same_states(pg, og)


def test_caller_latents_run_plain(tiny: Any) -> None:
    pipe = tiny("sana_video_sde")
    latents = torch.randn(1, 16, 3, 4, 4, generator=generators([99])[0])
    kwargs = {**call_kwargs("sana_video_sde"), "latents": latents}
    _, report = _arms(pipe, kwargs, [12])
    assert not report.overlapped and report.reason == "caller-supplied latents"


def test_the_noise_is_float32_whatever_the_transformer_dtype() -> None:
    """A bfloat16 transformer: the noise is still drawn in float32 (and the latents stay so)."""
    pipe = sana_video(scheduler="sde")
    pipe.transformer.to(torch.bfloat16)
    kwargs = {**call_kwargs("sana_video_sde"), "output_type": "latent"}
    plain, report = _arms(pipe, kwargs, [13])
    assert report.served == 1 and _step_draws_made(report) == 2
    (draw,) = plan_call(pipe, (), {**kwargs, "generator": generators([0])[0]})
    assert draw.dtype == torch.float32 == output_tensor(plain).dtype
