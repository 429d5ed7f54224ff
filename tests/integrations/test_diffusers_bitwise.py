"""Overlapped calls equal plain calls bit for bit, generator states included, per pipeline."""

from __future__ import annotations

from typing import Any

import pytest

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

PIPELINES = [
    "animatediff_v2v_controlnet",
    "animatediff_sparsectrl",
    "cogvideox_v2v",
    "cogvideox_fun_control",
    "ltx2_i2v",
    "ltx_condition",
    "ltx2_condition",
    "easyanimate",
    "easyanimate_inpaint",
    "consisid",
    "sana_video",
    "sana_video_i2v",
    "hunyuan_video15",
    "hunyuan_video15_i2v",
    "wan_v2v",
    "wan_animate",
    "skyreels_v2",
    "skyreels_v2_i2v",
    "skyreels_v2_df",
    "skyreels_v2_df_i2v",
    "skyreels_v2_df_v2v",
    "animatediff",
    "animatediff_v2v",
    "animatediff_sdxl",
    "animatediff_controlnet",
    "wan21",
    "wan22_ti2v",
    "wan_i2v",
    "flux",
    "ltx",
    "ltx_i2v",
    "cogvideox",
    "cogvideox_i2v",
    "hunyuan_video",
    "stable_audio",
    "ltx2",
    "latte",
    "mochi",
    "allegro",
]
PER_PROMPT = {
    "flux": "num_images_per_prompt",
    "stable_audio": "num_waveforms_per_prompt",
    "latte": "num_images_per_prompt",
}
EXPECTED_DRAWS = {
    "animatediff_v2v_controlnet": ("video_sample_0_0", "video_sample_0_1", "noise"),
    "animatediff_sparsectrl": ("noise",),
    "cogvideox_v2v": ("video_sample_0", "noise"),
    "cogvideox_fun_control": ("noise",),
    "ltx2_i2v": ("noise", "audio_noise", "decode_noise"),
    "ltx_condition": ("noise", "condition_sample_0"),
    "ltx2_condition": ("noise", "audio_noise", "decode_noise"),
    "easyanimate": ("noise",),
    "easyanimate_inpaint": ("noise",),
    "consisid": ("image_sample_0", "noise"),
    "sana_video": ("noise",),
    "sana_video_i2v": ("noise",),
    "hunyuan_video15": ("noise",),
    "hunyuan_video15_i2v": ("noise",),
    "wan_v2v": ("noise",),
    "wan_animate": ("noise",),
    "skyreels_v2": ("noise",),
    "skyreels_v2_i2v": ("noise",),
    "skyreels_v2_df": ("noise",),
    "skyreels_v2_df_i2v": ("noise",),
    "skyreels_v2_df_v2v": ("noise",),
    "animatediff": ("noise",),
    "animatediff_v2v": ("video_sample_0_0", "video_sample_0_1", "noise"),
    "animatediff_sdxl": ("noise",),
    "animatediff_controlnet": ("noise",),
    "wan21": ("noise",),
    "wan22_ti2v": ("noise",),
    "wan_i2v": ("noise",),
    "flux": ("noise",),
    "ltx": ("noise", "decode_noise"),
    "ltx_i2v": ("image_sample_0", "noise"),
    "cogvideox": ("noise",),
    "cogvideox_i2v": ("image_sample_0", "noise"),
    "hunyuan_video": ("noise",),
    "stable_audio": ("noise",),
    "ltx2": ("noise", "audio_noise", "decode_noise"),
    "latte": ("noise",),
    "mochi": ("noise",),
    "allegro": ("noise",),
}


@pytest.mark.parametrize("seed", [0, 12345])
@pytest.mark.parametrize("name", PIPELINES)
def test_single_generator_bitwise(tiny: Any, name: str, seed: int) -> None:
    pipe = tiny(name)
    plain, overlapped, report, pg, og = both_arms(pipe, call_kwargs(name), [seed], False)
    assert report.overlapped and report.reason is None
    assert report.planned == EXPECTED_DRAWS[name]
    assert report.served == len(report.planned) and report.left_plan is None
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    # The generator really advanced (the draws came from it, not from somewhere else).
    assert not bool((pg[0].get_state() == generators([seed])[0].get_state()).all())


@pytest.mark.parametrize("name", PIPELINES)
def test_batch_with_generator_list(tiny: Any, name: str) -> None:
    pipe = tiny(name)
    kwargs = call_kwargs(name, 2)
    if name == "ltx_i2v":  # its decode noise is `torch.randn(generator=<list>)`: a diffusers bug
        kwargs["output_type"] = "latent"
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [3, 4], True)
    assert report.overlapped and report.served == len(report.planned)
    assert output_tensor(plain).shape[0] == 2
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


@pytest.mark.parametrize("as_list", [False, True])
@pytest.mark.parametrize("name", ["wan21", "flux", "ltx", "stable_audio", "ltx2", "latte", "mochi"])
def test_several_outputs_per_prompt(tiny: Any, name: str, as_list: bool) -> None:
    pipe = tiny(name)
    kwargs = {**call_kwargs(name), PER_PROMPT.get(name, "num_videos_per_prompt"): 2}
    if name in ("ltx", "ltx2"):  # they repeat `decode_timestep` per prompt, not per video: a bug
        kwargs["output_type"] = "latent"
    seeds = [5, 6] if as_list else [5]
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, seeds, as_list)
    assert report.overlapped and report.served == len(report.planned)
    assert output_tensor(plain).shape[0] == 2
    assert_bitwise_equal(output_tensor(plain), output_tensor(overlapped))
    assert_same_states(pg, og)


def test_ltx_without_decode_noise(tiny: Any) -> None:
    """A latent output skips the decode noise: only the first draw is planned."""
    pipe = tiny("ltx")
    kwargs = {**call_kwargs("ltx"), "output_type": "latent"}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [7], False)
    assert report.planned == ("noise",) and report.served == 1
    assert_bitwise_equal(output_tensor(plain), output_tensor(overlapped))
    assert_same_states(pg, og)


def test_ltx_i2v_generator_list_samples_per_row(tiny: Any) -> None:
    pipe = tiny("ltx_i2v")
    kwargs = {**call_kwargs("ltx_i2v", 2), "output_type": "latent"}
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, [8, 9], True)
    assert report.planned == ("image_sample_0", "image_sample_1", "noise")
    assert report.served == 3
    assert_bitwise_equal(output_tensor(plain), output_tensor(overlapped))
    assert_same_states(pg, og)


def test_cogvideox_scheduler_draws_come_from_the_advanced_generator(tiny: Any) -> None:
    """The DPM scheduler draws on every step after the noise: those draws are not prepared but
    made by the pipeline on the caller's generator, already advanced by the prepared noise."""
    import diffusers.schedulers.scheduling_dpm_cogvideox as dpm

    pipe = tiny("cogvideox")
    calls: list[Any] = []
    original = dpm.randn_tensor

    def counting(shape: Any, generator: Any = None, *args: Any, **kwargs: Any) -> Any:
        calls.append(generator)
        return original(shape, generator, *args, **kwargs)

    dpm.randn_tensor = counting
    try:
        plain, overlapped, report, pg, og = both_arms(pipe, call_kwargs("cogvideox"), [21], False)
    finally:
        dpm.randn_tensor = original
    # each arm's scheduler drew once per step (2 steps) from that arm's own generator
    assert [id(g) for g in calls] == [id(pg[0])] * 2 + [id(og[0])] * 2
    assert report.served == 1
    assert_bitwise_equal(output_tensor(plain), output_tensor(overlapped))
    assert_same_states(pg, og)
