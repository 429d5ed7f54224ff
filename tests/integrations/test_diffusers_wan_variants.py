"""Wan video-to-video, VACE and Animate: conditioning inputs, batches, segments, fall-throughs.

Each test compares the plain call and `overlapped_call_with_report` on fresh generators
(`both_arms`: outputs bit for bit, generator states, the global RNG untouched).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("diffusers")

import numpy as np
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
from tiny_wan_variants import frames

from prenoise.integrations.diffusers import plan_call
from prenoise.integrations.diffusers.plan import Unpredictable


def _check(pipe: Any, kwargs: dict[str, Any], seeds: list[int], as_list: bool = False) -> Any:
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, seeds, as_list)
    assert report.overlapped and report.served == len(report.planned)
    assert report.left_plan is None
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    return plain, report


@pytest.fixture
def step_kwargs(tiny: Any) -> Iterator[dict[str, list[dict[str, Any]]]]:
    """Records the keyword arguments of every `scheduler.step` of the pipelines used."""
    seen: dict[str, list[dict[str, Any]]] = {}
    restore: list[Any] = []

    def watch(name: str) -> Any:
        pipe = tiny(name)
        step = pipe.scheduler.step
        calls = seen.setdefault(name, [])

        def recording(*args: Any, **kwargs: Any) -> Any:
            calls.append(kwargs)
            return step(*args, **kwargs)

        pipe.scheduler.step = recording
        restore.append(pipe.scheduler)
        return pipe

    seen["watch"] = watch  # type: ignore[assignment]
    yield seen
    for scheduler in restore:
        del scheduler.step


@pytest.mark.parametrize("name", ["wan_v2v", "wan_vace", "wan_animate"])
def test_the_scheduler_is_stepped_without_the_generator(step_kwargs: Any, name: str) -> None:
    """Per-step noise is not the generator's: each step is called without it (a stochastic
    scheduler would draw from the global RNG), so nothing is looked ahead."""
    pipe = step_kwargs["watch"](name)
    plain, report = _check(pipe, call_kwargs(name), [31])
    assert step_kwargs[name] and all("generator" not in k for k in step_kwargs[name])
    assert report.step_served == 0 and output_tensor(plain).shape[0] == 1


# -- video-to-video -----------------------------------------------------------------------------


def test_wan_v2v_forces_one_video_per_prompt(tiny: Any) -> None:
    """`__call__` sets `num_videos_per_prompt = 1`: the noise has one row per prompt."""
    pipe = tiny("wan_v2v")
    kwargs = {**call_kwargs("wan_v2v"), "num_videos_per_prompt": 2}
    (draw,) = plan_call(pipe, (), {**kwargs, "generator": generators([0])[0]})
    assert draw.shape[0] == 1
    plain, report = _check(pipe, kwargs, [5])
    assert report.planned == ("noise",) and output_tensor(plain).shape[0] == 1


def test_wan_v2v_noise_follows_the_input_video_and_size(tiny: Any) -> None:
    pipe = tiny("wan_v2v")
    kwargs = {**call_kwargs("wan_v2v"), "video": frames(2, 13, 48), "height": 48, "width": 32}
    (draw,) = plan_call(pipe, (), {**kwargs, "generator": generators([0])[0]})
    assert draw.shape == (1, 16, 4, 6, 4) and draw.dtype == torch.float32
    _check(pipe, kwargs, [7])


def test_wan_v2v_tensor_video(tiny: Any) -> None:
    """A `(B, F, C, H, W)` tensor in [0, 1]: F frames per video."""
    pipe = tiny("wan_v2v")
    video = torch.rand(1, 5, 3, 32, 32, generator=generators([3])[0])
    kwargs = {**call_kwargs("wan_v2v"), "video": video}
    (draw,) = plan_call(pipe, (), {**kwargs, "generator": generators([0])[0]})
    assert draw.shape == (1, 16, 2, 4, 4)
    _check(pipe, kwargs, [8])


def test_wan_v2v_list_of_arrays_falls_through(tiny: Any) -> None:
    """A list of `(F, H, W, C)` arrays is a valid input the plan does not count: plain call."""
    pipe = tiny("wan_v2v")
    video = [np.stack([np.asarray(f, dtype=np.float32) / 255 for f in frames(4, 9)])]
    kwargs = {**call_kwargs("wan_v2v"), "video": video}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [9], False)
    assert not report.overlapped and "frame count" in (report.reason or "")
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


# -- VACE ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 12345])
def test_wan_vace_video_and_mask_bitwise(tiny: Any, seed: int) -> None:
    """VACE takes one prompt on one generator (it raises for lists), so the generic batch tests
    do not apply to it: these are its single-generator cases."""
    pipe = tiny("wan_vace")
    plain, overlapped, report, pg, og = both_arms(pipe, call_kwargs("wan_vace"), [seed])
    assert report.overlapped and report.reason is None
    assert report.planned == ("noise",) and report.served == 1
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    assert not torch.equal(pg[0].get_state(), generators([seed])[0].get_state())


@pytest.mark.parametrize(
    ("references", "latent_frames"),
    [
        (None, 3),
        (image(10), 4),
        ([image(10), image(11)], 5),
        ([[image(12), image(13)]], 5),
    ],
)
def test_wan_vace_reference_images_add_frames(
    tiny: Any, references: Any, latent_frames: int
) -> None:
    pipe = tiny("wan_vace")
    kwargs = {**call_kwargs("wan_vace"), "reference_images": references}
    (draw,) = plan_call(pipe, (), {**kwargs, "generator": generators([0])[0]})
    assert draw.shape == (1, 16, latent_frames, 4, 4)
    _check(pipe, kwargs, [14])


def test_wan_vace_without_a_video(tiny: Any) -> None:
    """No conditioning video: the pipeline conditions on zeros of `num_frames` (rounded)."""
    pipe = tiny("wan_vace")
    kwargs = {**call_kwargs("wan_vace"), "video": None, "mask": None, "num_frames": 11}
    (draw,) = plan_call(pipe, (), {**kwargs, "generator": generators([0])[0]})
    assert draw.shape == (1, 16, 3, 4, 4)
    _check(pipe, kwargs, [15])


def test_wan_vace_generator_list_is_left_to_the_pipeline(tiny: Any) -> None:
    pipe = tiny("wan_vace")
    kwargs = {**call_kwargs("wan_vace"), "generator": generators([1])}
    with pytest.raises(Unpredictable, match="generator lists"):
        plan_call(pipe, (), kwargs)
    with pytest.raises(ValueError, match="list of generators"):
        pipe(**kwargs)


# -- Animate ------------------------------------------------------------------------------------


def _animate(frames_count: int, **extra: Any) -> dict[str, Any]:
    kwargs = call_kwargs("wan_animate")
    kwargs.update(pose_video=frames(3, frames_count, 16), face_video=frames(4, frames_count, 16))
    return {**kwargs, **extra}


@pytest.mark.parametrize(("count", "segments"), [(5, 1), (9, 2), (11, 3)])
def test_wan_animate_plans_every_segment(tiny: Any, count: int, segments: int) -> None:
    """Segments of 5 frames overlapping by 1: 11 pose frames are padded to 13, 3 segments."""
    pipe = tiny("wan_animate")
    kwargs = _animate(count)
    draws = plan_call(pipe, (), {**kwargs, "generator": generators([0])[0]})
    assert [d.shape for d in draws] == [(1, 16, 3, 2, 2)] * segments
    plain, report = _check(pipe, kwargs, [16])
    assert report.planned == ("noise", *(f"segment_noise_{i}" for i in range(1, segments)))
    assert output_tensor(plain).shape[1] == count


def test_wan_animate_with_a_callback_plans_the_first_segment(tiny: Any) -> None:
    pipe = tiny("wan_animate")

    def callback(pipe: Any, step: int, timestep: Any, tensors: dict[str, Any]) -> Any:
        return tensors

    kwargs = _animate(9, callback_on_step_end=callback)
    _, report = _check(pipe, kwargs, [17])
    assert report.planned == ("noise",)


@pytest.mark.parametrize("as_list", [False, True])
def test_wan_animate_two_videos_per_prompt(tiny: Any, as_list: bool) -> None:
    pipe = tiny("wan_animate")
    kwargs = _animate(9, num_videos_per_prompt=2)
    plain, report = _check(pipe, kwargs, [18, 19] if as_list else [18], as_list)
    assert report.planned == ("noise", "segment_noise_1")
    assert output_tensor(plain).shape[0] == 2


def test_wan_animate_replace_mode(tiny: Any) -> None:
    from tiny_wan_variants import masks

    pipe = tiny("wan_animate")
    kwargs = _animate(5, mode="replace", background_video=frames(8, 5, 16))
    kwargs["mask_video"] = masks(8, 5, 16)
    _check(pipe, kwargs, [20])
