"""AnimateDiff (`AnimateDiffPipeline`, `AnimateDiffVideoToVideoPipeline`, SDXL, ControlNet,
video-to-video ControlNet, SparseCtrl) beyond the generic bitwise tests: per-step scheduler
noise, the forced `num_videos_per_prompt`, the dtype rules, FreeNoise / FreeInit, IP-adapter
embeddings, the video inputs of video-to-video and SparseCtrl's global-RNG conditioning sample."""

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
from tiny_animatediff import (
    animatediff,
    animatediff_sparsectrl,
    animatediff_v2v_controlnet,
    video,
)

from prenoise.integrations.diffusers import overlapped_call_with_report
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


# -- video-to-video ControlNet -------------------------------------------------------------------


V2VC = "animatediff_v2v_controlnet"


def test_v2v_controlnet_plans_the_v2v_draws(tiny: Any) -> None:
    """The samples of each chunk, then the frames-first noise; 2 of the 4 steps draw."""
    pipe = tiny(V2VC)
    planned = plan_call(pipe, (), {**call_kwargs(V2VC), "generator": generators([1])[0]})
    assert [(p.label, p.shape, p.module) for p in planned] == [
        ("video_sample_0_0", (2, 4, 8, 8), "diffusers.models.autoencoders.vae"),
        ("video_sample_0_1", (1, 4, 8, 8), "diffusers.models.autoencoders.vae"),
        ("noise", (1, 3, 4, 8, 8), None),
    ]
    _, report = _arms(pipe, call_kwargs(V2VC), [40])
    assert report.overlapped and report.served == 3 and report.left_plan is None
    assert _step_draws_made(report) == 2  # the look-ahead's extra steps are discarded


def test_v2v_controlnet_conditioning_reaches_the_output(tiny: Any) -> None:
    """The tiny controlnet is live: other conditioning frames give another video."""
    pipe = tiny(V2VC)
    plain, _ = _arms(pipe, call_kwargs(V2VC), [41])
    other = pipe(
        generator=generators([41])[0], **{**call_kwargs(V2VC), "conditioning_frames": video(9)}
    )
    assert not torch.equal(output_tensor(plain), output_tensor(other))


def test_v2v_controlnet_two_videos_on_one_generator(tiny: Any) -> None:
    pipe = tiny(V2VC)
    plain, report = _arms(pipe, call_kwargs(V2VC, 2), [42])
    assert report.served == len(report.planned) == 5 and output_tensor(plain).shape[0] == 2


def test_v2v_controlnet_generator_list_samples_each_video_from_its_generator(tiny: Any) -> None:
    pipe = tiny(V2VC)
    gens = generators([1, 2])
    planned = plan_call(pipe, (), {**call_kwargs(V2VC, 2), "generator": gens})
    assert [p.generators for p in planned[:-1]] == [(gens[0],)] * 2 + [(gens[1],)] * 2
    assert planned[-1].generators == tuple(gens) and planned[-1].shape == (2, 3, 4, 8, 8)


@pytest.mark.parametrize("chunk", [1, 3])
def test_v2v_controlnet_one_sample_per_decode_chunk(tiny: Any, chunk: int) -> None:
    pipe = tiny(V2VC)
    kwargs = {**call_kwargs(V2VC), "decode_chunk_size": chunk}
    _, report = _arms(pipe, kwargs, [43])
    assert report.served == len(report.planned) == -(-3 // chunk) + 1


def test_v2v_controlnet_without_upcast() -> None:
    """A VAE that does not upcast samples in its own dtype (here float32, as the pipeline)."""
    pipe = animatediff_v2v_controlnet(force_upcast=False)
    _, report = _arms(pipe, call_kwargs(V2VC), [44])
    assert report.served == 3


def test_v2v_controlnet_euler_ancestral(tiny: Any) -> None:
    from diffusers import EulerAncestralDiscreteScheduler

    pipe = animatediff_v2v_controlnet()
    pipe.scheduler = EulerAncestralDiscreteScheduler.from_config(pipe.scheduler.config)
    kwargs = {**call_kwargs(V2VC), "num_inference_steps": 6, "eta": 0.0}
    _, report = _arms(pipe, kwargs, [45])
    assert report.served == 3 and _step_draws_made(report) == 3


def test_v2v_controlnet_lcm_scheduler_draws_ahead() -> None:
    """The documented example's `LCMScheduler` draws at every step but the last."""
    from diffusers import LCMScheduler

    pipe = animatediff_v2v_controlnet()
    pipe.scheduler = LCMScheduler.from_config(pipe.scheduler.config, beta_schedule="linear")
    kwargs = {**call_kwargs(V2VC), "num_inference_steps": 6, "eta": 0.0, "guidance_scale": 2.0}
    _, report = _arms(pipe, kwargs, [48])
    assert report.served == 3 and _step_draws_made(report) == 2  # 3 steps of 6, the last not


def test_v2v_controlnet_free_noise_keeps_its_draws() -> None:
    pipe = animatediff_v2v_controlnet()
    pipe.enable_free_noise(context_length=2, context_stride=1)
    _, report = _arms(pipe, call_kwargs(V2VC), [46])
    assert report.overlapped and report.served == 3


def test_v2v_controlnet_caller_latents_fall_through(tiny: Any) -> None:
    """Caller latents with `enforce_inference_steps` noise them on the generator (channels
    first, no samples): the plain call runs."""
    pipe = tiny(V2VC)
    latents = torch.randn((1, 4, 3, 8, 8), generator=torch.Generator().manual_seed(0))
    kwargs = {**call_kwargs(V2VC), "video": None, "latents": latents}
    kwargs.update(enforce_inference_steps=True, num_inference_steps=2)
    plain, report = _arms(pipe, kwargs, [47])
    assert not report.overlapped and report.reason == "caller-supplied latents"
    assert output_tensor(plain).shape == (1, 3, 3, 16, 16)


# -- SparseCtrl ---------------------------------------------------------------------------------


SPARSE = "animatediff_sparsectrl"


@pytest.fixture(scope="module")
def simplified() -> Any:
    """SparseCtrl with `use_simplified_condition_embedding`: `prepare_image` samples the VAE
    posterior of the conditioning frames from the global RNG."""
    return animatediff_sparsectrl(simplified=True)


def _global_seed_arms(
    pipe: Any, kwargs: dict[str, Any], seeds: list[int], as_list: bool = False, seed: int = 99
) -> Any:
    """Both arms on private generators, each after `torch.manual_seed(seed)`: outputs, generator
    states and the global RNG states after each arm are equal; returns (plain, report)."""
    gens = generators(seeds), generators(seeds)
    arg = (lambda g: g) if as_list else (lambda g: g[0])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        plain = pipe(generator=arg(gens[0]), **kwargs)
        after_plain = torch.get_rng_state()
        torch.manual_seed(seed)
        overlapped, report = overlapped_call_with_report(pipe, generator=arg(gens[1]), **kwargs)
        after_overlapped = torch.get_rng_state()
        untouched = torch.manual_seed(seed).get_state()
    assert report.overlapped and report.served == len(report.planned) == 1
    assert report.left_plan is None
    assert_outputs_bitwise_equal(plain, overlapped)
    assert_same_states(*gens)
    assert torch.equal(after_plain, after_overlapped)
    assert not torch.equal(after_plain, untouched), "the pipeline drew from the global RNG"
    return plain, report


@pytest.mark.parametrize("steps", [1, 3])
def test_sparsectrl_ddim_eta_draws_every_step_ahead(tiny: Any, steps: int) -> None:
    kwargs = {**call_kwargs(SPARSE), "num_inference_steps": steps}
    _, report = _arms(tiny(SPARSE), kwargs, [50])
    assert report.overlapped and report.planned == ("noise",) and report.served == 1
    assert _step_draws_made(report) == steps and report.step_left is None


@pytest.mark.parametrize(("algorithm", "draws"), [("dpmsolver++", 0), ("sde-dpmsolver++", 3)])
def test_sparsectrl_documented_dpm_solver(algorithm: str, draws: int) -> None:
    """The documented example's `DPMSolverMultistepScheduler` (`dpmsolver++`, Karras sigmas)
    draws nothing per step; its SDE variant draws at every step."""
    from diffusers import DPMSolverMultistepScheduler

    pipe = animatediff_sparsectrl()
    pipe.scheduler = DPMSolverMultistepScheduler.from_config(
        pipe.scheduler.config, algorithm_type=algorithm, use_karras_sigmas=True
    )
    kwargs = {**call_kwargs(SPARSE), "num_inference_steps": 3, "eta": 0.0}
    _, report = _arms(pipe, kwargs, [49])
    assert report.served == 1 and report.left_plan is None
    assert (_step_draws_made(report) if draws else report.step_served) == draws


def test_sparsectrl_conditioning_reaches_the_output(tiny: Any) -> None:
    pipe = tiny(SPARSE)
    plain, _ = _arms(pipe, call_kwargs(SPARSE), [51])
    kwargs = {**call_kwargs(SPARSE), "controlnet_frame_indices": [1, 2]}
    other = pipe(generator=generators([51])[0], **kwargs)
    assert not torch.equal(output_tensor(plain), output_tensor(other))


def test_sparsectrl_num_videos_per_prompt_is_forced_to_one(tiny: Any) -> None:
    pipe = tiny(SPARSE)
    kwargs = {**call_kwargs(SPARSE), "num_videos_per_prompt": 2}
    plain, report = _arms(pipe, kwargs, [52])
    assert output_tensor(plain).shape[0] == 1 and report.served == 1


def test_sparsectrl_noise_in_the_text_encoder_dtype(tiny: Any) -> None:
    pipe = animatediff_sparsectrl()
    pipe.text_encoder.to(torch.bfloat16)
    kwargs = {**call_kwargs(SPARSE), "generator": generators([1])[0]}
    assert [(p.shape, p.dtype) for p in plan_call(pipe, (), kwargs)] == [
        ((1, 4, 4, 8, 8), torch.bfloat16)
    ]
    pipe.text_encoder = None
    pipe.unet.to(torch.float16)
    assert [p.dtype for p in plan_call(pipe, (), kwargs)] == [torch.float16]


def test_sparsectrl_free_init_draws_after_the_planned_noise() -> None:
    pipe = animatediff_sparsectrl()
    pipe.enable_free_init(num_iters=2, use_fast_sampling=False)
    _, report = _arms(pipe, call_kwargs(SPARSE), [53])
    assert report.overlapped and report.served == 1 and report.left_plan is None


def test_sparsectrl_simplified_samples_the_global_rng_not_the_generator(simplified: Any) -> None:
    """The conditioning frames' posterior sample comes from the global RNG on the request
    thread: under the same global seed both arms match bit for bit, and move the global RNG
    alike (the worker draws nothing from it)."""
    plain, report = _global_seed_arms(simplified, call_kwargs(SPARSE), [54])
    assert _step_draws_made(report) == 2
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(98)
        other = simplified(generator=generators([54])[0], **call_kwargs(SPARSE))
    assert not torch.equal(output_tensor(plain), output_tensor(other))  # the sample matters


def test_sparsectrl_simplified_generator_list(simplified: Any) -> None:
    plain, _ = _global_seed_arms(simplified, call_kwargs(SPARSE, 2), [55, 56], as_list=True)
    assert output_tensor(plain).shape[0] == 2


def test_sparsectrl_simplified_with_the_global_generator_falls_through(simplified: Any) -> None:
    """`torch.manual_seed(...)` returns the global generator, which `prepare_image` draws from
    too: the call is not overlapped, and both arms match."""
    outputs = []
    with torch.random.fork_rng(devices=[]):
        outputs.append(simplified(generator=torch.manual_seed(57), **call_kwargs(SPARSE)))
        after_plain = torch.get_rng_state()
        overlapped, report = overlapped_call_with_report(
            simplified, generator=torch.manual_seed(57), **call_kwargs(SPARSE)
        )
        outputs.append(overlapped)
        assert torch.equal(after_plain, torch.get_rng_state())
    assert not report.overlapped and "default" in str(report.reason)
    assert_outputs_bitwise_equal(*outputs)


def test_sparsectrl_worker_leaves_the_global_rng_alone(
    tiny: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The executor's `PRENOISE_DEBUG_RNG=1` check passes on a call that draws nothing from the
    global RNG itself."""
    monkeypatch.setenv("PRENOISE_DEBUG_RNG", "1")
    _, report = _arms(tiny(SPARSE), call_kwargs(SPARSE), [58])
    assert report.overlapped and report.served == 1


def test_sparsectrl_simplified_passes_the_debug_rng_check(
    simplified: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PRENOISE_DEBUG_RNG", "1")
    with torch.random.fork_rng(devices=[]):
        _, report = overlapped_call_with_report(
            simplified, generator=generators([59])[0], **call_kwargs(SPARSE)
        )
    assert report.overlapped


def test_debug_rng_catches_a_prepared_draw_that_draws_the_global_rng(
    tiny: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe covers prenoise's draws: one that also draws the global RNG is reported (as
    GlobalRNGChangedError, before the call starts), whatever the pipeline itself does."""
    from prenoise.integrations.diffusers import rng_probe
    from prenoise.verify.rng_guard import GlobalRNGChangedError

    real = rng_probe.run_draw

    def leaky(*args: Any, **kwargs: Any) -> Any:
        torch.rand(1)  # the global RNG
        return real(*args, **kwargs)

    monkeypatch.setattr(rng_probe, "run_draw", leaky)
    monkeypatch.setenv("PRENOISE_DEBUG_RNG", "1")
    with (
        torch.random.fork_rng(devices=[]),
        pytest.raises(GlobalRNGChangedError, match="prenoise's prepared draw noise"),
    ):
        overlapped_call_with_report(
            tiny(SPARSE), generator=generators([60])[0], **call_kwargs(SPARSE)
        )
    monkeypatch.setenv("PRENOISE_DEBUG_RNG", "0")
    _, report = overlapped_call_with_report(
        tiny(SPARSE), generator=generators([60])[0], **call_kwargs(SPARSE)
    )
    assert report.overlapped  # without the debug flag, no probe
