"""EasyAnimate: per-step flow-match noise, several videos per prompt, the inpaint pipeline's own
draws around the planned noise, and the control pipeline, which no call can run."""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("diffusers")

from diffusers_tiny import (
    assert_bitwise_equal,
    assert_outputs_bitwise_equal,
    assert_same_states,
    both_arms,
    call_kwargs,
    generators,
    output_tensor,
)


def test_stochastic_flow_match_steps_are_served_ahead(tiny: Any) -> None:
    """Flow-match Euler with `stochastic_sampling` draws the whole latent at every step from the
    generator `prepare_extra_step_kwargs` hands it, after the planned noise."""
    pipe = tiny("easyanimate_stochastic")
    assert pipe.scheduler.config.stochastic_sampling
    kwargs = {**call_kwargs("easyanimate_stochastic"), "num_inference_steps": 4}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [31], False)
    assert report.overlapped and report.planned == ("noise",) and report.served == 1
    # all four, the first one included (the flow-match scheduler draws at every step)
    assert report.step_served == 4 and report.step_first_ahead
    assert report.step_left is None and report.step_unused == 0
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    # four per-step draws of the latent's size after the noise: the generator is far past it
    noise_only = generators([31])[0]
    torch.randn((1, 4, 2, 4, 4), generator=noise_only)
    assert not torch.equal(pg[0].get_state(), noise_only.get_state())


@pytest.mark.parametrize("steps", [1, 4])
def test_flow_match_lcm_steps_are_served_ahead(steps: int) -> None:
    """`FlowMatchLCMScheduler` draws a float32 latent at every step (the prediction upcast),
    on the generator the pipeline hands it; the latents here are float32 too."""
    import tiny_easyanimate
    from diffusers import FlowMatchLCMScheduler

    pipe = tiny_easyanimate.easyanimate(scheduler=FlowMatchLCMScheduler())
    kwargs = {**call_kwargs("easyanimate"), "num_inference_steps": steps}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [33], False)
    assert report.planned == ("noise",) and report.served == 1
    assert report.step_served == steps and report.step_first_ahead
    assert report.step_left is None and report.step_unused == 0
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


@pytest.mark.parametrize("scheduler", ["stochastic_euler", "lcm"])
@pytest.mark.parametrize("stream", ["x86", "libm"])
def test_flow_match_step_draws_in_a_named_stream(stream: str, scheduler: str) -> None:
    """In a stream, the per-step draws prepared ahead (the first one included) equal the
    stream's own draws made serially on the request thread (the look-ahead off), for the two
    flow-match schedulers the CogVideoX suite cannot run."""
    import tiny_easyanimate
    from diffusers import FlowMatchEulerDiscreteScheduler, FlowMatchLCMScheduler

    from prenoise.integrations.diffusers import disable, enable, overlapped_call_with_report

    made = (
        FlowMatchEulerDiscreteScheduler(stochastic_sampling=True)
        if scheduler == "stochastic_euler"
        else FlowMatchLCMScheduler()
    )
    pipe = tiny_easyanimate.easyanimate(scheduler=made)
    kwargs = {**call_kwargs("easyanimate"), "num_inference_steps": 4}
    try:
        enable(pipe, stream=stream, steps_ahead=0)
        serial = output_tensor(pipe(generator=generators([34])[0], **kwargs))
        enable(pipe, stream=stream)
        ahead, report = overlapped_call_with_report(pipe, generator=generators([34])[0], **kwargs)
    finally:
        disable(pipe)
    assert report.stream == stream and report.step_served == 4 and report.step_first_ahead
    assert torch.equal(output_tensor(ahead).view(torch.uint8), serial.view(torch.uint8))
    from prenoise.noise import streams as noise_streams

    if stream == noise_streams.local_torch_stream():  # x86 on an x86 host: local torch's bits
        native = output_tensor(pipe(generator=generators([34])[0], **kwargs))
        assert torch.equal(native.view(torch.uint8), serial.view(torch.uint8))


def test_deterministic_flow_match_makes_no_step_draws(tiny: Any) -> None:
    pipe = tiny("easyanimate")
    plain, overlapped, report, pg, og = both_arms(pipe, call_kwargs("easyanimate"), [32], False)
    assert report.served == 1 and report.step_served == 0 and report.step_left is None
    assert_outputs_bitwise_equal(plain, overlapped)
    # the noise is all the generator gave: (1, 4, (5-1)//4+1, 32//8, 32//8) float32
    noise_only = generators([32])[0]
    torch.randn((1, 4, 2, 4, 4), generator=noise_only)
    assert_same_states(pg, og)
    assert torch.equal(pg[0].get_state(), noise_only.get_state())


@pytest.mark.parametrize("as_list", [False, True])
def test_several_videos_per_prompt(tiny: Any, as_list: bool) -> None:
    pipe = tiny("easyanimate")
    kwargs = {**call_kwargs("easyanimate"), "num_images_per_prompt": 2}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [5, 6] if as_list else [5], as_list)
    assert report.overlapped and report.served == 1
    assert output_tensor(plain).shape[0] == 2
    assert_bitwise_equal(output_tensor(plain), output_tensor(overlapped))
    assert_same_states(pg, og)


def test_height_and_width_are_rounded_down_to_16(tiny: Any) -> None:
    pipe = tiny("easyanimate")
    kwargs = {**call_kwargs("easyanimate"), "height": 47, "width": 40, "output_type": "latent"}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [7], False)
    assert report.served == 1
    assert output_tensor(plain).shape == (1, 4, 2, 4, 4)  # 47 -> 32, 40 -> 32
    assert_bitwise_equal(output_tensor(plain), output_tensor(overlapped))
    assert_same_states(pg, og)


def test_inpaint_masked_video_noise_follows_the_served_noise(
    patched_upstream: None, tiny: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`add_noise_to_reference_video` draws with `torch.randn(generator=generator)` after the
    noise: in both arms it finds the generator just past the noise, drawn on the request
    thread."""
    import diffusers.pipelines.easyanimate.pipeline_easyanimate_inpaint as inpaint

    pipe = tiny("easyanimate_inpaint")
    assert pipe.transformer.config.add_noise_in_inpaint_model
    seen: list[torch.Tensor] = []
    original = inpaint.add_noise_to_reference_video

    def recording(image: Any, ratio: Any = None, generator: Any = None) -> Any:
        seen.append(generator.get_state())
        return original(image, ratio=ratio, generator=generator)

    monkeypatch.setattr(inpaint, "add_noise_to_reference_video", recording)
    plain, overlapped, report, pg, og = both_arms(
        pipe, call_kwargs("easyanimate_inpaint"), [41], False
    )
    assert report.overlapped and report.planned == ("noise",) and report.served == 1
    assert report.left_plan is None
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    noise_only = generators([41])[0]
    torch.randn((1, 4, 2, 4, 4), generator=noise_only)
    assert len(seen) == 2 and all(torch.equal(s, noise_only.get_state()) for s in seen)
    assert not torch.equal(pg[0].get_state(), noise_only.get_state())  # the raw draw followed


def test_inpaint_step_draws_come_after_the_raw_masked_video_draw() -> None:
    """Stochastic flow-match steps on the inpaint pipeline: the look-ahead starts at the first
    step, after `add_noise_to_reference_video` drew on the request thread.

    The first per-step draw prepared right after the noise was drawn from the generator's
    state before that raw draw, so the state check rejects it (unless the worker read the
    state only after the raw draw) and the plain first draw runs; the rest are served."""
    import tiny_easyanimate
    from diffusers import FlowMatchEulerDiscreteScheduler

    scheduler = FlowMatchEulerDiscreteScheduler(stochastic_sampling=True)
    pipe = tiny_easyanimate.easyanimate("inpaint", scheduler=scheduler)
    kwargs = {**call_kwargs("easyanimate_inpaint"), "num_inference_steps": 3}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [42], False)
    assert report.served == 1 and report.left_plan is None
    assert report.step_served == (3 if report.step_first_ahead else 2)
    assert report.step_left is None and report.step_unused == 0
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


def test_inpaint_without_video_takes_the_prompt_batch_and_num_frames(tiny: Any) -> None:
    pipe = tiny("easyanimate_inpaint")
    kwargs = {**call_kwargs("easyanimate_inpaint", 2), "num_frames": 9, "output_type": "latent"}
    del kwargs["video"], kwargs["mask_video"]
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [1, 2], True)
    assert report.overlapped and report.served == 1
    assert output_tensor(plain).shape == (2, 4, 3, 4, 4)
    assert_bitwise_equal(output_tensor(plain), output_tensor(overlapped))
    assert_same_states(pg, og)


def test_inpaint_video_to_video_samples_the_posterior_from_the_global_rng(tiny: Any) -> None:
    """With `strength < 1` the video's VAE posterior is sampled before the noise, from the global
    RNG (`.sample()` without a generator): the planned noise on the caller's generator is still
    served, and both arms leave both RNGs alike."""
    from prenoise.integrations.diffusers import overlapped_call_with_report

    pipe = tiny("easyanimate_inpaint")
    kwargs = {**call_kwargs("easyanimate_inpaint"), "strength": 0.6, "num_inference_steps": 3}
    pg, og = generators([43]), generators([43])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        plain = pipe(generator=pg[0], **kwargs)
        global_after_plain = torch.get_rng_state()
        torch.manual_seed(5)
        overlapped, report = overlapped_call_with_report(pipe, generator=og[0], **kwargs)
        global_after_overlapped = torch.get_rng_state()
        torch.manual_seed(5)
        global_untouched = torch.get_rng_state()
    assert report.overlapped and report.served == 1 and report.left_plan is None
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    assert torch.equal(global_after_plain, global_after_overlapped)
    assert not torch.equal(global_after_plain, global_untouched)  # the posterior sample drew


def test_inpaint_generator_list_with_a_masked_video_raises_in_both_arms(tiny: Any) -> None:
    """diffusers passes the generator list to `torch.randn` in `add_noise_to_reference_video`:
    the plain call raises after the noise, and so does the overlapped one, generators alike."""
    from prenoise.integrations.diffusers import overlapped_call_with_report

    pipe = tiny("easyanimate_inpaint")
    kwargs = call_kwargs("easyanimate_inpaint", 2)
    kwargs["mask_video"][:, :, 0] = 0.0  # keep the first frame: the masked-video path
    pg, og = generators([1, 2]), generators([1, 2])
    with pytest.raises(TypeError, match="randn"):
        pipe(generator=pg, **kwargs)
    with pytest.raises(TypeError, match="randn"):
        overlapped_call_with_report(pipe, generator=og, **kwargs)
    assert_same_states(pg, og)
    assert not torch.equal(pg[0].get_state(), generators([1])[0].get_state())  # noise drawn


def test_control_pipeline_has_no_plan_and_no_call_runs(tiny: Any) -> None:
    """`EasyAnimateControlPipeline.__call__` passes `text_encoder_index=0` to its own
    `encode_prompt`, which has no such parameter (diffusers 0.40.0-0.42.1): every call raises
    before any draw, so it has no plan and falls through to that same error."""
    from prenoise.integrations.diffusers import Unpredictable, overlapped_call_with_report
    from prenoise.integrations.diffusers.call import plan_call

    pipe = tiny("easyanimate_control")
    kwargs = call_kwargs("easyanimate_control")
    pg, og = generators([3]), generators([3])
    with pytest.raises(Unpredictable, match="no noise plan") as why:
        plan_call(pipe, (), {"generator": og[0], **kwargs})
    assert why.value.key == "class"
    with pytest.raises(TypeError, match="text_encoder_index"):
        pipe(generator=pg[0], **kwargs)
    with pytest.raises(TypeError, match="text_encoder_index"):
        overlapped_call_with_report(pipe, generator=og[0], **kwargs)
    assert_same_states(pg, og)
    assert torch.equal(pg[0].get_state(), generators([3])[0].get_state())  # nothing drawn


def test_a_generator_count_off_the_batch_falls_through(tiny: Any) -> None:
    """Three generators for two videos: the plan refuses, and the plain call's own error is
    what the caller gets, with the generators untouched."""
    from prenoise.integrations.diffusers import Unpredictable, overlapped_call_with_report
    from prenoise.integrations.diffusers.call import plan_call

    pipe = tiny("easyanimate")
    kwargs = {**call_kwargs("easyanimate"), "num_images_per_prompt": 2}
    pg, og = generators([8, 9, 10]), generators([8, 9, 10])
    with pytest.raises(Unpredictable, match="3 generators") as why:
        plan_call(pipe, (), {"generator": og, **kwargs})
    assert why.value.key == "generator-count"
    with pytest.raises(ValueError, match="list of generators"):
        pipe(generator=pg, **kwargs)
    with pytest.raises(ValueError, match="list of generators"):
        overlapped_call_with_report(pipe, generator=og, **kwargs)
    assert_same_states(pg, og)
    assert_same_states(og, generators([8, 9, 10]))
