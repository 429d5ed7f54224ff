"""HunyuanVideo-1.5 (`HunyuanVideo15Pipeline`, `HunyuanVideo15ImageToVideoPipeline`) beyond the
generic bitwise tests: the sizes the pipelines derive (defaults, image buckets), several videos
per prompt, the ByT5 glyph branch, a stochastic scheduler (stepped without the generator: its
draws come from the global RNG and stay the pipeline's), and the calls that run plain."""

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
    image,
    output_tensor,
)

from prenoise.integrations.diffusers import overlapped_call_with_report
from prenoise.integrations.diffusers.call import plan_call
from prenoise.integrations.diffusers.plan import Unpredictable


def _arms(pipe: Any, kwargs: dict[str, Any], seeds: list[int], as_list: bool = False) -> Any:
    """Both arms, asserted bitwise equal (outputs and generator states); returns the report."""
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, seeds, as_list)
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    return plain, report


def _planned_shape(pipe: Any, kwargs: dict[str, Any]) -> tuple[int, ...]:
    (draw,) = plan_call(pipe, (), {**kwargs, "generator": generators([0])[0]})
    return draw.shape


# -- sizes --------------------------------------------------------------------------------------


def test_default_size_comes_from_the_target_size(tiny: Any) -> None:
    """No height and width: the 16:9 bucket of the transformer's `target_size` (16 px, /4 VAE:
    a 12×20 px bucket here, latents 3×5)."""
    pipe = tiny("hunyuan_video15")
    kwargs = {**call_kwargs("hunyuan_video15"), "height": None, "width": None}
    kwargs["output_type"] = "latent"
    plain, report = _arms(pipe, kwargs, [31])
    assert report.served == 1
    assert output_tensor(plain).shape == _planned_shape(pipe, kwargs) == (1, 4, 3, 3, 5)


def test_i2v_size_comes_from_the_image_bucket(tiny: Any) -> None:
    """A 24×16 (w×h) image (h/w 0.67) is bucketed to the target size's 16×12 px (0.75, the
    nearest bucket not wider than the image); the 16×16 call image to 16×16."""
    pipe = tiny("hunyuan_video15_i2v")
    wide = image(3, 24).crop((0, 0, 24, 16))
    kwargs = {**call_kwargs("hunyuan_video15_i2v"), "image": wide, "output_type": "latent"}
    plain, report = _arms(pipe, kwargs, [32])
    assert report.served == 1
    assert output_tensor(plain).shape == _planned_shape(pipe, kwargs) == (1, 4, 3, 3, 4)
    square = {**kwargs, "image": image(3, 16)}
    assert _planned_shape(pipe, square) == (1, 4, 3, 4, 4)


def test_frames_are_not_rounded(tiny: Any) -> None:
    """`num_frames=4` on the /2 VAE: (4 - 1) // 2 + 1 = 2 latent frames."""
    pipe = tiny("hunyuan_video15")
    kwargs = {**call_kwargs("hunyuan_video15"), "num_frames": 4, "output_type": "latent"}
    plain, report = _arms(pipe, kwargs, [33])
    assert report.served == 1 and output_tensor(plain).shape == (1, 4, 2, 4, 4)


@pytest.mark.parametrize("as_list", [False, True])
def test_i2v_several_videos_per_prompt(tiny: Any, as_list: bool) -> None:
    pipe = tiny("hunyuan_video15_i2v")
    kwargs = {**call_kwargs("hunyuan_video15_i2v"), "num_videos_per_prompt": 2}
    kwargs["output_type"] = "latent"  # the VAE decodes one video at a time (tiny_hunyuan_video15)
    plain, report = _arms(pipe, kwargs, [5, 6] if as_list else [5], as_list)
    assert report.served == 1 and output_tensor(plain).shape[0] == 2


def test_t2v_several_videos_per_prompt_fails_alike(tiny: Any) -> None:
    """The text-to-video pipeline sizes its zero image embeddings by the prompt count, not by
    the videos (diffusers 0.40.0-0.42.1): with `num_videos_per_prompt=2` the transformer raises
    after the noise draw, in both arms, and the generators end alike."""
    pipe = tiny("hunyuan_video15")
    kwargs = {**call_kwargs("hunyuan_video15"), "num_videos_per_prompt": 2}
    kwargs["output_type"] = "latent"
    pg, og = generators([34]), generators([34])
    with pytest.raises(RuntimeError) as plain_error:
        pipe(generator=pg[0], **kwargs)
    with pytest.raises(RuntimeError) as overlapped_error:
        overlapped_call_with_report(pipe, generator=og[0], **kwargs)
    assert str(plain_error.value) == str(overlapped_error.value)
    assert_same_states(pg, og)
    assert not torch.equal(pg[0].get_state(), generators([34])[0].get_state())


def test_quoted_glyph_text_runs_the_byt5_encoder(tiny: Any) -> None:
    pipe = tiny("hunyuan_video15")
    kwargs = {**call_kwargs("hunyuan_video15"), "prompt": 'a cat "on the moon"'}
    _, report = _arms(pipe, kwargs, [35])
    assert report.served == 1


def test_without_guidance(tiny: Any) -> None:
    """A guider with scale 1 runs one transformer pass per step and no negative encoding."""
    from diffusers.guiders import ClassifierFreeGuidance

    pipe = tiny("hunyuan_video15")
    original = pipe.guider
    pipe.guider = ClassifierFreeGuidance(guidance_scale=1.0)
    try:
        _, report = _arms(pipe, call_kwargs("hunyuan_video15"), [36])
    finally:
        pipe.guider = original
    assert report.served == 1


# -- the scheduler ------------------------------------------------------------------------------


def test_stochastic_flow_match_draws_from_the_global_rng(tiny: Any) -> None:
    """`scheduler.step` gets no generator: `stochastic_sampling` draws each step from the global
    CPU RNG on the request thread. Only the noise is prepared; the global RNG, the output and
    the generator end exactly as in the plain call."""
    pipe = tiny("hunyuan_video15_stochastic")
    kwargs = {**call_kwargs("hunyuan_video15_stochastic"), "num_inference_steps": 3}
    pg, og = generators([37]), generators([37])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        start = torch.get_rng_state()
        plain = pipe(generator=pg[0], **kwargs)
        after_plain = torch.get_rng_state()
        torch.manual_seed(5)
        overlapped, report = overlapped_call_with_report(pipe, generator=og[0], **kwargs)
        after_overlapped = torch.get_rng_state()
    assert report.overlapped and report.served == 1 and report.step_served == 0
    assert not torch.equal(start, after_plain)  # the scheduler really drew from it
    assert torch.equal(after_plain, after_overlapped)
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)


# -- calls that run plain -----------------------------------------------------------------------


def test_only_a_height_is_unpredictable(tiny: Any) -> None:
    pipe = tiny("hunyuan_video15")
    kwargs = {**call_kwargs("hunyuan_video15"), "width": None}
    with pytest.raises(Unpredictable) as info:
        plan_call(pipe, (), {**kwargs, "generator": generators([0])[0]})
    assert info.value.key == "size-half-given"
    pg, og = generators([38]), generators([38])
    with pytest.raises(ValueError, match="width"):
        pipe(generator=pg[0], **kwargs)
    with pytest.raises(ValueError, match="width"):
        overlapped_call_with_report(pipe, generator=og[0], **kwargs)
    assert_same_states(pg, og)


def test_i2v_tensor_image_is_unpredictable(tiny: Any) -> None:
    pipe = tiny("hunyuan_video15_i2v")
    kwargs = {**call_kwargs("hunyuan_video15_i2v"), "image": torch.zeros(3, 16, 16)}
    with pytest.raises(Unpredictable) as info:
        plan_call(pipe, (), {**kwargs, "generator": generators([0])[0]})
    assert info.value.key == "image-type"


def test_the_global_rng_runs_plain(tiny: Any) -> None:
    pipe = tiny("hunyuan_video15")
    _, report = overlapped_call_with_report(pipe, **call_kwargs("hunyuan_video15"))
    assert not report.overlapped and "generator is None" in str(report.reason)


def test_the_noise_is_drawn_in_the_transformer_dtype() -> None:
    """A bfloat16 transformer: the noise (and the latents) are bfloat16."""
    from tiny_hunyuan_video15 import hunyuan_video15

    pipe = hunyuan_video15()
    pipe.transformer.to(torch.bfloat16)
    kwargs = {**call_kwargs("hunyuan_video15"), "output_type": "latent"}
    plain, report = _arms(pipe, kwargs, [39])
    assert report.served == 1
    (draw,) = plan_call(pipe, (), {**kwargs, "generator": generators([0])[0]})
    assert draw.dtype == torch.bfloat16 == output_tensor(plain).dtype
