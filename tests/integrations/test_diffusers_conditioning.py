"""Conditioning / video-input LTX, LTX-2 and CogVideoX pipelines: their posterior samples,
condition noises and per-step draws, bitwise against the plain call."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")

from diffusers_tiny import (
    assert_outputs_bitwise_equal,
    assert_same_states,
    both_arms,
    call_kwargs,
    image,
    output_tensor,
)
from tiny_conditioning import frames


def _check(plain: Any, overlapped: Any, pg: Any, og: Any) -> None:
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


def _steps_served(report: Any, draws: int) -> bool:
    """`report` served all `draws` per-step draws ahead but the first, unless that was too."""
    return bool(report.step_served == draws - (0 if report.step_first_ahead else 1))


# -- CogVideoX video-to-video ----------------------------------------------------------------


@pytest.mark.parametrize("steps", [2, 5])
def test_cogvideox_v2v_dpm_steps_come_from_the_advanced_generator(tiny: Any, steps: int) -> None:
    """strength 1: every timestep runs; the DPM scheduler draws once on the first and last
    step and twice on every other, after the posterior sample and the noise."""
    pipe = tiny("cogvideox_v2v")
    kwargs = {**call_kwargs("cogvideox_v2v"), "num_inference_steps": steps, "strength": 1.0}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [21], False)
    _check(plain, overlapped, pg, og)
    assert report.planned == ("video_sample_0", "noise") and report.served == 2
    assert report.step_left is None and report.step_unused == 0
    assert _steps_served(report, 2 * steps - 2)


def test_cogvideox_v2v_strength_shortens_the_loop(tiny: Any) -> None:
    """strength < 1 skips the first timesteps: fewer per-step draws than the scheduler's
    timesteps say; the unused prepared ones are discarded and the states still agree."""
    pipe = tiny("cogvideox_v2v")
    kwargs = {**call_kwargs("cogvideox_v2v"), "num_inference_steps": 6, "strength": 0.5}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [22], False)
    _check(plain, overlapped, pg, og)
    assert report.served == 2
    assert _steps_served(report, 1 + 2 + 1)  # 3 of the 6 timesteps run
    assert report.step_unused > 0 and "ended before" in (report.step_left or "")


def test_cogvideox_v2v_generator_list_samples_each_video_from_its_row(tiny: Any) -> None:
    pipe = tiny("cogvideox_v2v")
    plain, overlapped, report, pg, og = both_arms(
        pipe, call_kwargs("cogvideox_v2v", 2), [3, 4], True
    )
    assert report.planned == ("video_sample_0", "video_sample_1", "noise")
    assert report.served == 3 and output_tensor(plain).shape[0] == 2
    _check(plain, overlapped, pg, og)


def test_cogvideox_v2v_tensor_videos_on_one_generator(tiny: Any) -> None:
    """A 5-D `(B, F, C, H, W)` tensor: one posterior sample per video, all from the one
    generator, then the noise."""
    pipe = tiny("cogvideox_v2v")
    video = torch.rand(2, 9, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    kwargs = {**call_kwargs("cogvideox_v2v", 2), "video": video}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [5], False)
    assert report.planned == ("video_sample_0", "video_sample_1", "noise")
    assert report.served == 3
    _check(plain, overlapped, pg, og)


def test_cogvideox_v2v_unknown_video_form_falls_through(tiny: Any) -> None:
    """A list of 4-D NumPy videos is valid input, but its frame count is not read: plain."""
    pipe = tiny("cogvideox_v2v")
    video = [np.random.RandomState(0).rand(9, 32, 32, 3).astype(np.float32)]
    kwargs = {**call_kwargs("cogvideox_v2v"), "video": video}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [6], False)
    assert not report.overlapped and "frames" in (report.reason or "")
    _check(plain, overlapped, pg, og)


# -- CogVideoX Fun control -------------------------------------------------------------------


def test_cogvideox_fun_control_with_ddim_eta(tiny: Any) -> None:
    """The control video is encoded in mode (no draw); DDIM with `eta > 0` draws every step."""
    pipe = tiny("cogvideox_fun_control")
    kwargs = {**call_kwargs("cogvideox_fun_control"), "num_inference_steps": 4, "eta": 0.5}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [13], False)
    _check(plain, overlapped, pg, og)
    assert report.planned == ("noise",) and report.served == 1
    assert report.step_left is None and _steps_served(report, 4)


# -- LTX-2 image-to-video --------------------------------------------------------------------


def test_ltx2_i2v_latent_output_has_no_decode_noise(tiny: Any) -> None:
    pipe = tiny("ltx2_i2v")
    kwargs = {**call_kwargs("ltx2_i2v"), "output_type": "latent"}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [7], False)
    assert report.planned == ("noise", "audio_noise") and report.served == 2
    _check(plain, overlapped, pg, og)


def test_ltx2_i2v_with_a_callback_plans_up_to_the_loop(tiny: Any) -> None:
    def callback(pipe: Any, step: int, timestep: Any, tensors: dict[str, Any]) -> Any:
        return tensors

    pipe = tiny("ltx2_i2v")
    kwargs = {**call_kwargs("ltx2_i2v"), "callback_on_step_end": callback}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [8], False)
    assert report.planned == ("noise", "audio_noise") and report.served == 2
    _check(plain, overlapped, pg, og)


def test_ltx2_i2v_caller_audio_latents_are_noised(tiny: Any) -> None:
    """Caller `audio_latents` still draw (`_create_noised_state`), in their packed shape."""
    pipe = tiny("ltx2_i2v")
    audio = torch.randn(1, 2, 5, 2, generator=torch.Generator().manual_seed(1))
    kwargs = {**call_kwargs("ltx2_i2v"), "audio_latents": audio, "noise_scale": 0.5}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [9], False)
    assert report.planned == ("noise", "audio_noise", "decode_noise") and report.served == 3
    _check(plain, overlapped, pg, og)


# -- LTX condition ---------------------------------------------------------------------------


def test_ltx_condition_per_step_noise_is_left_to_the_pipeline(tiny: Any) -> None:
    """`image_cond_noise_scale > 0` draws at every step in the pipeline (not the scheduler):
    the plan stops before those, so the decode noise after them is not planned either. The
    per-step look-ahead takes them (same shape every step, as it expects of a flow-matching
    scheduler's timesteps) and ends at the decode noise."""
    pipe = tiny("ltx_condition")
    kwargs = {**call_kwargs("ltx_condition"), "num_inference_steps": 4}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [10], False)
    assert report.planned == ("noise", "condition_sample_0") and report.served == 2
    _check(plain, overlapped, pg, og)
    assert _steps_served(report, 4) and "[1, 8, 3, 8, 8]" in (report.step_left or "")


def test_ltx_condition_without_per_step_noise_plans_the_decode_noise(tiny: Any) -> None:
    pipe = tiny("ltx_condition")
    kwargs = {**call_kwargs("ltx_condition"), "image_cond_noise_scale": 0.0}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [11], False)
    assert report.planned == ("noise", "condition_sample_0", "decode_noise")
    assert report.served == 3
    _check(plain, overlapped, pg, og)


def test_ltx_condition_keyframe_video_draws_its_noise(tiny: Any) -> None:
    """An image at frame 0 and a video at frame 4: each posterior sample, then the noise of the
    off-first-frame video's first two latent frames (the 9-frame video is trimmed to 5)."""
    from diffusers.pipelines.ltx.pipeline_ltx_condition import LTXVideoCondition

    pipe = tiny("ltx_condition")
    conditions = [
        LTXVideoCondition(image=image(3), frame_index=0),
        LTXVideoCondition(video=frames(1), frame_index=4, strength=0.5),
    ]
    kwargs = {**call_kwargs("ltx_condition"), "image": None, "conditions": conditions}
    kwargs["image_cond_noise_scale"] = 0.0
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [12], False)
    assert report.planned == (
        "noise",
        "condition_sample_0",
        "condition_sample_1",
        "condition_noise_1",
        "decode_noise",
    )
    assert report.served == 5
    _check(plain, overlapped, pg, og)


def test_ltx_condition_generator_list_plans_only_the_noise(tiny: Any) -> None:
    """Each batch-1 posterior is sampled with the whole list (its first generator only)."""
    pipe = tiny("ltx_condition")
    kwargs = {**call_kwargs("ltx_condition", 2), "image_cond_noise_scale": 0.0}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [13, 14], True)
    assert report.planned == ("noise",) and report.served == 1
    _check(plain, overlapped, pg, og)


def test_ltx_condition_without_conditions_is_ltx(tiny: Any) -> None:
    pipe = tiny("ltx_condition")
    kwargs = {**call_kwargs("ltx_condition"), "image": None}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [15], False)
    assert report.planned == ("noise", "decode_noise") and report.served == 2
    _check(plain, overlapped, pg, og)


# -- LTX-2 condition -------------------------------------------------------------------------


def test_ltx2_condition_keyframes_lengthen_the_packed_noise(tiny: Any) -> None:
    """Conditions at latent index 1 (a 5-frame video, trimmed to 3 frames: 2 latent frames)
    and -1 (one image, index 2) add their tokens to the packed noise; index 5 is skipped."""
    from diffusers.pipelines.ltx2.pipeline_ltx2_condition import LTX2VideoCondition

    pipe = tiny("ltx2_condition")
    conditions = [
        LTX2VideoCondition(frames=image(1), index=0, crf=0),
        LTX2VideoCondition(frames=frames(2, 5), index=1, strength=0.5, crf=0),
        LTX2VideoCondition(frames=image(3), index=-1, strength=0.8, crf=0),
        LTX2VideoCondition(frames=image(4), index=5, crf=0),
    ]
    kwargs = {**call_kwargs("ltx2_condition"), "conditions": conditions}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [16], False)
    assert report.overlapped and report.served == 3, report
    _check(plain, overlapped, pg, og)


def test_ltx2_condition_caller_audio_latents_fall_through(tiny: Any) -> None:
    pipe = tiny("ltx2_condition")
    audio = torch.randn(1, 2, 5, 2, generator=torch.Generator().manual_seed(2))
    kwargs = {**call_kwargs("ltx2_condition"), "audio_latents": audio}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [17], False)
    assert not report.overlapped and "audio_latents" in (report.reason or "")
    _check(plain, overlapped, pg, og)
