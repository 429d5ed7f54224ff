"""AnimateDiff (`AnimateDiffPipeline`, `AnimateDiffVideoToVideoPipeline`) beyond the generic
bitwise tests: per-step scheduler noise, the forced `num_videos_per_prompt`, the dtype rules,
FreeNoise / FreeInit, IP-adapter embeddings and the video inputs of video-to-video."""

from __future__ import annotations

from collections.abc import Iterator
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
from tiny_animatediff import animatediff, video

from prenoise.integrations.diffusers.call import plan_call
from prenoise.integrations.diffusers.pipelines.animatediff import video_layout
from prenoise.integrations.diffusers.plan import Unpredictable


def _arms(pipe: Any, kwargs: dict[str, Any], seeds: list[int], as_list: bool = False) -> Any:
    """Both arms, asserted bitwise equal (outputs and generator states); returns the report."""
    plain, overlapped, report, pg, og = both_arms(pipe, kwargs, seeds, as_list)
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(pg, og)
    return plain, report


def _step_draws_made(report: Any) -> int:
    """Per-step draws of the call seen by the look-ahead: the served ones, plus the first one
    when it was drawn plainly."""
    return int(report.step_served) + (0 if getattr(report, "step_first_ahead", False) else 1)


@pytest.fixture
def t2v(tiny: Any) -> Iterator[Any]:
    pipe = tiny("animatediff")
    original = pipe.scheduler
    yield pipe
    pipe.scheduler = original


# -- per-step noise -----------------------------------------------------------------------------


@pytest.mark.parametrize("steps", [1, 3])
def test_ddim_eta_draws_every_step_ahead(t2v: Any, steps: int) -> None:
    kwargs = {**call_kwargs("animatediff"), "num_inference_steps": steps}
    _, report = _arms(t2v, kwargs, [12])
    assert report.overlapped and report.planned == ("noise",) and report.served == 1
    assert _step_draws_made(report) == steps and report.step_left is None


def test_euler_ancestral_draws_every_step_ahead(t2v: Any) -> None:
    from diffusers import EulerAncestralDiscreteScheduler

    t2v.scheduler = EulerAncestralDiscreteScheduler.from_config(t2v.scheduler.config)
    kwargs = {**call_kwargs("animatediff"), "num_inference_steps": 5, "eta": 0.0}
    _, report = _arms(t2v, kwargs, [13])
    assert report.served == 1
    assert _step_draws_made(report) == 5 and report.step_left is None
    assert report.step_served >= 4


def test_ddim_without_eta_draws_only_the_noise(t2v: Any) -> None:
    kwargs = {**call_kwargs("animatediff"), "eta": 0.0}
    _, report = _arms(t2v, kwargs, [14])
    assert report.served == 1 and report.step_served == 0


def test_v2v_per_step_draws_follow_the_samples(tiny: Any) -> None:
    """Video-to-video runs only the last `strength` of the timesteps: 2 of 4 steps draw."""
    pipe = tiny("animatediff_v2v")
    _, report = _arms(pipe, call_kwargs("animatediff_v2v"), [15])
    assert report.served == len(report.planned) == 3
    assert _step_draws_made(report) == 2


# -- batch, per-prompt, generator lists --------------------------------------------------------


@pytest.mark.parametrize("name", ["animatediff", "animatediff_v2v"])
def test_num_videos_per_prompt_is_forced_to_one(tiny: Any, name: str) -> None:
    pipe = tiny(name)
    kwargs = {**call_kwargs(name), "num_videos_per_prompt": 2}
    plain, report = _arms(pipe, kwargs, [16])
    assert output_tensor(plain).shape[0] == 1
    assert report.served == len(report.planned)
    assert plan_call(pipe, (), {**kwargs, "generator": generators([1])[0]})[-1].shape[0] == 1


def test_v2v_two_videos_on_one_generator(tiny: Any) -> None:
    pipe = tiny("animatediff_v2v")
    plain, report = _arms(pipe, call_kwargs("animatediff_v2v", 2), [17])
    assert report.planned == (
        "video_sample_0_0",
        "video_sample_0_1",
        "video_sample_1_0",
        "video_sample_1_1",
        "noise",
    )
    assert report.served == 5 and output_tensor(plain).shape[0] == 2


def test_v2v_generator_list_samples_each_video_from_its_generator(tiny: Any) -> None:
    pipe = tiny("animatediff_v2v")
    kwargs = call_kwargs("animatediff_v2v", 2)
    gens = generators([1, 2])
    planned = plan_call(pipe, (), {**kwargs, "generator": gens})
    assert [p.generators for p in planned[:-1]] == [(gens[0],)] * 2 + [(gens[1],)] * 2
    assert planned[-1].generators == tuple(gens) and planned[-1].shape == (2, 3, 4, 8, 8)
    _, report = _arms(pipe, kwargs, [18, 19], as_list=True)
    assert report.served == 5


@pytest.mark.parametrize("chunk", [1, 3, 16])
def test_v2v_one_sample_per_decode_chunk(tiny: Any, chunk: int) -> None:
    pipe = tiny("animatediff_v2v")
    kwargs = {**call_kwargs("animatediff_v2v"), "decode_chunk_size": chunk}
    planned = plan_call(pipe, (), {**kwargs, "generator": generators([1])[0]})
    frames = [p.shape[0] for p in planned[:-1]]
    assert sum(frames) == 3 and all(f <= chunk for f in frames)
    assert len(frames) == -(-3 // chunk)
    _, report = _arms(pipe, kwargs, [20])
    assert report.served == len(planned)


def test_v2v_tensor_video(tiny: Any) -> None:
    pipe = tiny("animatediff_v2v")
    frames = torch.rand((3, 3, 16, 16), generator=torch.Generator().manual_seed(0))
    kwargs = {**call_kwargs("animatediff_v2v"), "video": frames}
    _, report = _arms(pipe, kwargs, [21])
    assert report.served == 3


def test_video_layout() -> None:
    assert video_layout(video()) == (1, 3)
    assert video_layout([video(0), video(1)]) == (2, 3)
    assert video_layout(torch.zeros(5, 3, 8, 8)) == (1, 5)
    assert video_layout(torch.zeros(2, 5, 3, 8, 8)) == (2, 5)
    assert video_layout([torch.zeros(5, 3, 8, 8)] * 3) == (3, 5)
    with pytest.raises(Unpredictable):
        video_layout([video(0), video(1)[:2]])  # frame counts differ
    with pytest.raises(Unpredictable):
        video_layout("video.mp4")


# -- dtype rules ---------------------------------------------------------------------------------


def test_noise_in_the_unet_dtype_without_a_text_encoder() -> None:
    """Without a text encoder `encode_prompt` casts the caller's float32 embeddings to the
    UNet's dtype, and the noise is drawn in it."""
    pipe = animatediff(dtype=torch.bfloat16)
    pipe.text_encoder = None
    embeds = torch.randn((1, 7, 16), generator=torch.Generator().manual_seed(0))
    kwargs = {**call_kwargs("animatediff"), "output_type": "latent", "eta": 0.0}
    kwargs.update(prompt=None, negative_prompt=None, prompt_embeds=embeds)
    kwargs["negative_prompt_embeds"] = -embeds
    planned = plan_call(pipe, (), {**kwargs, "generator": generators([1])[0]})
    assert [p.dtype for p in planned] == [torch.bfloat16]
    plain, report = _arms(pipe, kwargs, [22])
    assert report.served == 1 and output_tensor(plain).dtype == torch.bfloat16


@pytest.mark.parametrize("force_upcast", [True, False])
def test_v2v_sample_and_noise_dtypes(force_upcast: bool) -> None:
    """The posterior is sampled in float32 when the VAE upcasts, else in its dtype; the noise
    in the pipeline's dtype."""
    pipe = animatediff(video_to_video=True, dtype=torch.bfloat16, force_upcast=force_upcast)
    kwargs = {**call_kwargs("animatediff_v2v"), "output_type": "latent", "eta": 0.0}
    planned = plan_call(pipe, (), {**kwargs, "generator": generators([1])[0]})
    sample = torch.float32 if force_upcast else torch.bfloat16
    assert [p.dtype for p in planned] == [sample, sample, torch.bfloat16]
    _, report = _arms(pipe, kwargs, [23])
    assert report.served == 3 and report.left_plan is None


# -- FreeNoise, FreeInit, IP-adapter --------------------------------------------------------------


@pytest.mark.parametrize("noise_type", ["shuffle_context", "random"])
def test_free_noise_falls_through(noise_type: str) -> None:
    """FreeNoise draws its own latents (and shuffles them with `torch.randperm` on the caller's
    generator): the plain call runs."""
    pipe = animatediff()
    pipe.enable_free_noise(context_length=2, context_stride=1, noise_type=noise_type)
    _, report = _arms(pipe, call_kwargs("animatediff"), [24])
    assert not report.overlapped and "FreeNoise" in str(report.reason)


def test_v2v_free_noise_keeps_its_draws() -> None:
    """Video-to-video's FreeNoise changes prompt encoding and the UNet, not the draws."""
    pipe = animatediff(video_to_video=True)
    pipe.enable_free_noise(context_length=2, context_stride=1)
    _, report = _arms(pipe, call_kwargs("animatediff_v2v"), [25])
    assert report.overlapped and report.served == 3


def test_free_init_draws_after_the_planned_noise() -> None:
    pipe = animatediff()
    pipe.enable_free_init(num_iters=2, use_fast_sampling=False)
    _, report = _arms(pipe, call_kwargs("animatediff"), [26])
    assert report.overlapped and report.served == 1 and report.left_plan is None


def _load_tiny_ip_adapter(unet: Any, image_dim: int = 8) -> None:
    """Random IP-adapter weights (one image projection, `to_k_ip` / `to_v_ip` per cross-attention
    processor outside the motion modules), in the layout `_load_ip_adapter_weights` reads."""
    cross = unet.config.cross_attention_dim
    blocks = unet.config.block_out_channels
    g = torch.Generator().manual_seed(0)
    image_proj = {
        "proj.weight": torch.randn((4 * cross, image_dim), generator=g) * 0.1,
        "proj.bias": torch.zeros(4 * cross),
        "norm.weight": torch.ones(cross),
        "norm.bias": torch.zeros(cross),
    }
    ip_adapter: dict[str, torch.Tensor] = {}
    key_id = 1
    for name in unet.attn_processors:
        if name.endswith("attn1.processor") or "motion_modules" in name:
            continue
        if name.startswith("mid_block"):
            hidden = blocks[-1]
        elif name.startswith("up_blocks"):
            hidden = list(reversed(blocks))[int(name[len("up_blocks.")])]
        else:
            hidden = blocks[int(name[len("down_blocks.")])]
        for kind in ("to_k_ip", "to_v_ip"):
            ip_adapter[f"{key_id}.{kind}.weight"] = torch.randn((hidden, cross), generator=g) * 0.1
        key_id += 2
    unet._load_ip_adapter_weights([{"image_proj": image_proj, "ip_adapter": ip_adapter}])


def test_ip_adapter_embeddings_do_not_move_the_noise() -> None:
    pipe = animatediff()
    _load_tiny_ip_adapter(pipe.unet)
    embeds = torch.randn(
        (2, 1, 8), generator=torch.Generator().manual_seed(1)
    )  # negative, positive
    kwargs = {**call_kwargs("animatediff"), "ip_adapter_image_embeds": [embeds]}
    plain, report = _arms(pipe, kwargs, [27])
    assert report.overlapped and report.served == 1
    other = pipe(generator=generators([27])[0], **{**kwargs, "ip_adapter_image_embeds": [-embeds]})
    assert not torch.equal(output_tensor(plain), output_tensor(other))  # the adapter is used


# -- SDXL, ControlNet ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["animatediff", "animatediff_sdxl", "animatediff_controlnet"])
def test_default_height_and_width(tiny: Any, name: str) -> None:
    """`height` / `width` None: the UNet's sample size (SDXL: `default_sample_size`) times 2."""
    pipe = tiny(name)
    kwargs = {**call_kwargs(name), "height": None, "width": None, "num_inference_steps": 3}
    planned = plan_call(pipe, (), {**kwargs, "generator": generators([1])[0]})
    assert [p.shape for p in planned] == [(1, 4, 4, 8, 8)]
    plain, report = _arms(pipe, kwargs, [28])
    assert report.served == 1 and output_tensor(plain).shape[-2:] == (16, 16)
    assert _step_draws_made(report) == 3


def test_sdxl_prompt_dtype_is_the_second_encoders() -> None:
    from tiny_animatediff import animatediff_sdxl

    pipe = animatediff_sdxl()
    kwargs = {**call_kwargs("animatediff_sdxl"), "generator": generators([1])[0]}
    pipe.text_encoder_2.to(torch.bfloat16)
    assert [p.dtype for p in plan_call(pipe, (), kwargs)] == [torch.bfloat16]
    pipe.text_encoder_2 = None
    pipe.unet.to(torch.float16)
    assert [p.dtype for p in plan_call(pipe, (), kwargs)] == [torch.float16]


def test_controlnet_free_noise_falls_through() -> None:
    from tiny_animatediff import animatediff_controlnet

    pipe = animatediff_controlnet()
    pipe.enable_free_noise(context_length=2, context_stride=1)
    _, report = _arms(pipe, call_kwargs("animatediff_controlnet"), [29])
    assert not report.overlapped and "FreeNoise" in str(report.reason)
