"""SkyReels-V2: text / image-to-video and diffusion forcing (long videos, `addnoise_condition`).

Each test compares the plain call and `overlapped_call_with_report` on fresh generators
(`both_arms`: outputs bit for bit, generator states, the global RNG untouched), except the
`addnoise_condition` ones, whose pipelines draw from the global RNG themselves.
"""

from __future__ import annotations

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
    image,
    output_tensor,
)

from prenoise.integrations.diffusers import overlapped_call_with_report, plan_call

NAMES = [
    "skyreels_v2",
    "skyreels_v2_i2v",
    "skyreels_v2_df",
    "skyreels_v2_df_i2v",
    "skyreels_v2_df_v2v",
]
LONG = {
    "num_frames": 17,
    "base_num_frames": 9,
    "overlap_history": 5,
}  # 5 latent frames, 3 per chunk


def _check(pipe: Any, kwargs: dict[str, Any], seeds: list[int], as_list: bool = False) -> Any:
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, seeds, as_list)
    assert report.overlapped and report.served == len(report.planned)
    assert report.left_plan is None
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    return plain, report


def _shapes(pipe: Any, kwargs: dict[str, Any]) -> list[tuple[int, ...]]:
    return [d.shape for d in plan_call(pipe, (), {**kwargs, "generator": generators([0])[0]})]


@pytest.mark.parametrize("name", NAMES)
def test_the_scheduler_is_stepped_without_the_generator(
    patched_upstream: None, tiny: Any, name: str
) -> None:
    """UniPC (the released scheduler) draws nothing, and it is not given the generator."""
    pipe = tiny(name)
    seen: list[dict[str, Any]] = []
    # diffusion forcing deep-copies the scheduler per latent frame: record on the class
    cls = type(pipe.scheduler)
    original = cls.step

    def recording(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs)
        return original(self, *args, **kwargs)

    cls.step = recording
    try:
        _, report = _check(pipe, call_kwargs(name), [3])
    finally:
        cls.step = original
    assert seen and all("generator" not in k for k in seen)
    assert report.step_served == 0


@pytest.mark.parametrize("as_list", [False, True])
@pytest.mark.parametrize("name", ["skyreels_v2", "skyreels_v2_df", "skyreels_v2_df_i2v"])
def test_two_videos_per_prompt(tiny: Any, name: str, as_list: bool) -> None:
    pipe = tiny(name)
    kwargs = {**call_kwargs(name), "num_videos_per_prompt": 2}
    plain, report = _check(pipe, kwargs, [5, 6] if as_list else [5], as_list)
    assert report.planned == ("noise",) and output_tensor(plain).shape[0] == 2


def test_i2v_with_two_videos_per_prompt_fails_in_diffusers(tiny: Any) -> None:
    """A diffusers bug: `image_embeds` are repeated per prompt, not per video, so the transformer
    fails. Both arms raise alike, and the overlapped one leaves the generator as the plain one."""
    pipe = tiny("skyreels_v2_i2v")
    kwargs = {**call_kwargs("skyreels_v2_i2v"), "num_videos_per_prompt": 2}
    pg, og = generators([4]), generators([4])
    with pytest.raises(RuntimeError, match="Sizes of tensors"):
        pipe(generator=pg[0], **kwargs)
    with pytest.raises(RuntimeError, match="Sizes of tensors"):
        overlapped_call_with_report(pipe, generator=og[0], **kwargs)
    assert_same_states(pg, og)


def test_noise_shapes(tiny: Any) -> None:
    size = {"height": 48, "width": 32, "num_frames": 14}  # 14 frames round down to 13
    assert _shapes(tiny("skyreels_v2"), {**call_kwargs("skyreels_v2"), **size}) == [
        (1, 16, 4, 6, 4)
    ]
    assert _shapes(tiny("skyreels_v2_i2v"), {**call_kwargs("skyreels_v2_i2v"), **size}) == [
        (1, 16, 4, 6, 4)
    ]
    _check(tiny("skyreels_v2_i2v"), {**call_kwargs("skyreels_v2_i2v"), **size}, [7])


@pytest.mark.parametrize("name", ["skyreels_v2_df", "skyreels_v2_df_i2v", "skyreels_v2_df_v2v"])
def test_long_video_plans_every_iteration(tiny: Any, name: str) -> None:
    """17 frames in chunks of 9 overlapping by 5: three iterations of 3 latent frames each, the
    later ones drawn after the previous iteration's denoising loop."""
    pipe = tiny(name)
    kwargs = {**call_kwargs(name), **LONG}
    assert _shapes(pipe, kwargs) == [(1, 16, 3, 4, 4)] * 3
    _, report = _check(pipe, kwargs, [8])
    assert report.planned == ("noise", "chunk_noise_1", "chunk_noise_2")


def test_long_video_with_a_callback_plans_the_first_iteration(tiny: Any) -> None:
    pipe = tiny("skyreels_v2_df")

    def callback(pipe: Any, step: int, timestep: Any, tensors: dict[str, Any]) -> Any:
        return tensors

    kwargs = {**call_kwargs("skyreels_v2_df"), **LONG, "callback_on_step_end": callback}
    _, report = _check(pipe, kwargs, [9])
    assert report.planned == ("noise",)


def test_long_video_generator_list(tiny: Any) -> None:
    pipe = tiny("skyreels_v2_df")
    kwargs = {**call_kwargs("skyreels_v2_df", 2), **LONG}
    plain, report = _check(pipe, kwargs, [10, 11], as_list=True)
    assert report.served == 3 and output_tensor(plain).shape[0] == 2


def test_df_v2v_extends_the_input_video(tiny: Any) -> None:
    """The input video's last `overlap_history` frames are the prefix; `num_frames` more are
    generated. `num_videos_per_prompt` is forced to 1 by the pipeline."""
    pipe = tiny("skyreels_v2_df_v2v")
    kwargs = {**call_kwargs("skyreels_v2_df_v2v"), "num_videos_per_prompt": 2}
    assert _shapes(pipe, kwargs) == [(1, 16, 3, 4, 4)]
    plain, _ = _check(pipe, kwargs, [12])
    assert output_tensor(plain).shape[:2] == (1, 5 + 9)


def _global_and_private_arms(pipe: Any, kwargs: dict[str, Any], seed: int) -> None:
    """Both arms on private generators, each after `torch.manual_seed(99)` (the pipeline's
    `torch.randn_like` draws from the global RNG): outputs, generator and global RNG states."""
    states = []
    outputs = []
    gens = generators([seed]), generators([seed])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(99)
        outputs.append(pipe(generator=gens[0][0], **kwargs))
        states.append(torch.get_rng_state())
        torch.manual_seed(99)
        overlapped, report = overlapped_call_with_report(pipe, generator=gens[1][0], **kwargs)
        outputs.append(overlapped)
        states.append(torch.get_rng_state())
    assert report.overlapped and report.served == len(report.planned) == 3
    assert_outputs_bitwise_equal(*outputs)
    assert_same_states(*gens)
    assert torch.equal(states[0], states[1])
    with torch.random.fork_rng(devices=[]):
        assert not torch.equal(states[0], torch.manual_seed(99).get_state()), "no global draw"


@pytest.mark.parametrize("name", ["skyreels_v2_df", "skyreels_v2_df_v2v"])
def test_addnoise_condition_draws_from_the_global_rng_not_the_generator(
    tiny: Any, name: str
) -> None:
    """`addnoise_condition > 0` noises the prefix frames with `torch.randn_like` (no generator):
    the caller's generator holds only the planned draws, and the global RNG moves alike."""
    pipe = tiny(name)
    kwargs = {**call_kwargs(name), **LONG, "addnoise_condition": 20}
    _global_and_private_arms(pipe, kwargs, 13)


def test_caller_latents_fall_through(tiny: Any) -> None:
    pipe = tiny("skyreels_v2")
    latents = torch.randn(1, 16, 3, 4, 4, generator=generators([1])[0])
    kwargs = {**call_kwargs("skyreels_v2"), "latents": latents}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [14], False)
    assert not report.overlapped and report.reason == "caller-supplied latents"
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


def test_df_v2v_without_overlap_history_is_not_planned(tiny: Any) -> None:
    from prenoise.integrations.diffusers.plan import Unpredictable

    pipe = tiny("skyreels_v2_df_v2v")
    kwargs = {**call_kwargs("skyreels_v2_df_v2v"), "overlap_history": None}
    with pytest.raises(Unpredictable, match="overlap_history"):
        plan_call(pipe, (), {**kwargs, "generator": generators([0])[0]})


def test_i2v_generator_list_with_one_image(tiny: Any) -> None:
    pipe = tiny("skyreels_v2_i2v")
    kwargs = {**call_kwargs("skyreels_v2_i2v", 2), "image": image(15)}
    plain, report = _check(pipe, kwargs, [16, 17], as_list=True)
    assert output_tensor(plain).shape[0] == 2 and report.planned == ("noise",)
