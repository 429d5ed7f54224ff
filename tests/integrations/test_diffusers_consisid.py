"""ConsisID: the reference image's posterior samples before the noise, the prompt dtype after the
CFG concatenation, the DPM scheduler's per-step draws, and a call that falls through."""

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
    image,
    output_tensor,
)


@pytest.mark.parametrize("steps", [1, 4])
def test_dpm_scheduler_steps_are_served_ahead(tiny: Any, steps: int) -> None:
    """The released CogVideoX DPM scheduler draws once on the first and last step and twice on
    every other, from the caller's generator after the noise."""
    pipe = tiny("consisid")
    kwargs = {**call_kwargs("consisid"), "num_inference_steps": steps}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [17], False)
    assert report.planned == ("image_sample_0", "noise") and report.served == 2
    drawn = 1 if steps == 1 else 2 * steps - 2
    assert report.step_served == drawn - (0 if report.step_first_ahead else 1)
    assert report.step_left is None and report.step_unused == 0
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


def test_the_sample_and_the_noise_are_all_the_generator_gives_without_step_draws(
    tiny: Any,
) -> None:
    """With DDIM (eta 0: no per-step draw) the generator ends right after the planned draws:
    the image posterior sample `(1, 4, 1, 2, 2)`, then the noise `(1, 2, 4, 2, 2)`."""
    import tiny_consisid
    from diffusers import DDIMScheduler

    pipe = tiny_consisid.consisid(DDIMScheduler())
    plain, overlapped, report, pg, og = both_arms(pipe, call_kwargs("consisid"), [18], False)
    assert report.served == 2 and report.step_served == 0
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    expected = generators([18])[0]
    torch.randn((1, 4, 1, 2, 2), generator=expected)
    torch.randn((1, 2, 4, 2, 2), generator=expected)
    assert torch.equal(pg[0].get_state(), expected.get_state())


def test_two_images_on_one_generator_are_sampled_in_order(tiny: Any) -> None:
    pipe = tiny("consisid")
    kwargs = {**call_kwargs("consisid", 2), "output_type": "latent"}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [19], False)
    assert report.planned == ("image_sample_0", "image_sample_1", "noise")
    assert report.served == 3
    assert output_tensor(plain).shape == (2, 2, 4, 2, 2)
    assert_bitwise_equal(output_tensor(plain), output_tensor(overlapped))
    assert_same_states(pg, og)


def test_generator_list_samples_per_row(tiny: Any) -> None:
    pipe = tiny("consisid")
    kwargs = {**call_kwargs("consisid", 2), "output_type": "latent"}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [20, 21], True)
    assert report.planned == ("image_sample_0", "image_sample_1", "noise")
    assert report.served == 3
    assert_bitwise_equal(output_tensor(plain), output_tensor(overlapped))
    assert_same_states(pg, og)


def test_caller_half_prompt_embeds_are_promoted_by_the_cfg_concatenation(tiny: Any) -> None:
    """float16 `prompt_embeds` with a float32 encoder's negative embeddings: `torch.cat` gives
    float32, the dtype of the noise (and of the image the VAE encodes)."""
    pipe = tiny("consisid")
    embeds, _ = pipe.encode_prompt(
        "a cat dance on the moon", do_classifier_free_guidance=False, max_sequence_length=16
    )
    kwargs = call_kwargs("consisid")
    del kwargs["prompt"]
    kwargs["prompt_embeds"] = embeds.to(torch.float16)
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [22], False)
    assert report.overlapped and report.served == 2 and report.left_plan is None
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


def test_an_image_list_of_tensors_falls_through(tiny: Any) -> None:
    """The plan cannot tell how many images a list of tensors holds: the plain call runs."""
    import numpy as np

    pipe = tiny("consisid")
    pixels = torch.from_numpy(np.asarray(image(0, 16), dtype="float32") / 255.0)
    kwargs = {**call_kwargs("consisid"), "image": [pixels.permute(2, 0, 1)]}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [23], False)
    assert not report.overlapped and report.served == 0
    assert report.reason is not None and "cannot tell how many images" in report.reason
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
