"""Tiny diffusers pipelines built offline from small configs with seeded random weights.

The Wan and LTX-2 builders, the tokenizer and the T5 / Gemma-3 encoders live in the package
(`prenoise.integrations.diffusers.tiny`, what `prenoise demo diffusers` runs) and are imported
here; the other families' builders are test-only.

Every builder seeds the global RNG inside `torch.random.fork_rng()`, so building never changes
the caller's global RNG state and two builds are identical.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from overlap import OverlapRecorder
from prenoise.integrations.diffusers.tiny import (  # the builders `prenoise demo` runs too
    WORDS as WORDS,
)
from prenoise.integrations.diffusers.tiny import gemma3_encoder as gemma3_encoder
from prenoise.integrations.diffusers.tiny import ltx2 as ltx2
from prenoise.integrations.diffusers.tiny import seeded as _seeded
from prenoise.integrations.diffusers.tiny import t5_encoder as t5_encoder
from prenoise.integrations.diffusers.tiny import tokenizer as tokenizer
from prenoise.integrations.diffusers.tiny import wan as wan
from prenoise.preparation import lookahead as lookahead_module
from prenoise.preparation import served as served_module


def flux() -> Any:
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        FluxPipeline,
        FluxTransformer2DModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel

    with _seeded():
        transformer = FluxTransformer2DModel(
            patch_size=1,
            in_channels=4,
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=32,
            pooled_projection_dim=32,
            axes_dims_rope=[4, 4, 8],
        ).eval()
        clip = CLIPTextModel(
            CLIPTextConfig(
                bos_token_id=0,
                eos_token_id=1,
                pad_token_id=0,
                hidden_size=32,
                intermediate_size=37,
                num_attention_heads=4,
                num_hidden_layers=2,
                vocab_size=len(WORDS) + 3,
                projection_dim=32,
                max_position_embeddings=77,
            )
        ).eval()
        t5 = t5_encoder()
        vae = AutoencoderKL(
            sample_size=32,
            in_channels=3,
            out_channels=3,
            block_out_channels=(4,),
            layers_per_block=1,
            latent_channels=1,
            norm_num_groups=1,
            use_quant_conv=False,
            use_post_quant_conv=False,
            shift_factor=0.0609,
            scaling_factor=1.5035,
        ).eval()
    return FluxPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae,
        text_encoder=clip,
        tokenizer=tokenizer(77),
        text_encoder_2=t5,
        tokenizer_2=tokenizer(16),
        transformer=transformer,
    )


def ltx(image_to_video: bool = False, timestep_conditioning: bool = True) -> Any:
    from diffusers import (
        AutoencoderKLLTXVideo,
        FlowMatchEulerDiscreteScheduler,
        LTXImageToVideoPipeline,
        LTXPipeline,
        LTXVideoTransformer3DModel,
    )

    with _seeded():
        transformer = LTXVideoTransformer3DModel(
            in_channels=8,
            out_channels=8,
            patch_size=1,
            patch_size_t=1,
            num_attention_heads=4,
            attention_head_dim=8,
            cross_attention_dim=32,
            num_layers=1,
            caption_channels=32,
        ).eval()
        vae = AutoencoderKLLTXVideo(
            in_channels=3,
            out_channels=3,
            latent_channels=8,
            block_out_channels=(8, 8, 8, 8),
            decoder_block_out_channels=(8, 8, 8, 8),
            layers_per_block=(1, 1, 1, 1, 1),
            decoder_layers_per_block=(1, 1, 1, 1, 1),
            spatio_temporal_scaling=(True, True, False, False),
            decoder_spatio_temporal_scaling=(True, True, False, False),
            decoder_inject_noise=(False, False, False, False, False),
            upsample_residual=(False, False, False, False),
            upsample_factor=(1, 1, 1, 1),
            timestep_conditioning=timestep_conditioning,
            patch_size=1,
            patch_size_t=1,
            encoder_causal=True,
            decoder_causal=False,
        ).eval()
        vae.use_framewise_encoding = False
        vae.use_framewise_decoding = False
        encoder = t5_encoder()
    cls = LTXImageToVideoPipeline if image_to_video else LTXPipeline
    return cls(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae,
        text_encoder=encoder,
        tokenizer=tokenizer(),
        transformer=transformer,
    )


def flux_with_dropout() -> Any:
    """Flux whose T5 encoder is in train mode, as diffusers' `TestFluxPipeline` builds it: its
    dropout (p = 0.1) draws from the global CPU RNG while the prompt is encoded."""
    pipe = flux()
    pipe.text_encoder_2.train()
    return pipe


BUILDERS: dict[str, Callable[[], Any]] = {
    "wan21": wan,
    "wan22_ti2v": lambda: wan(ti2v=True),
    "wan_i2v": lambda: wan(image_to_video=True),
    "flux": flux,
    "flux_dropout": flux_with_dropout,
    "ltx": ltx,
    "ltx_i2v": lambda: ltx(image_to_video=True),
}


# -- call arguments ---------------------------------------------------------------------------

VIDEO = {"num_frames": 9, "num_inference_steps": 2, "max_sequence_length": 16, "output_type": "pt"}
LTX2_GUIDANCE = {  # the reference pipelines' legacy knobs: one transformer pass per step
    "guidance_scale": 1.0,
    "stg_scale": 0.0,
    "modality_scale": 1.0,
    "guidance_rescale": 0.0,
    "audio_guidance_scale": 1.0,
    "audio_stg_scale": 0.0,
    "audio_modality_scale": 1.0,
    "audio_guidance_rescale": 0.0,
    "spatio_temporal_guidance_blocks": None,
    "use_cross_timestep": False,
}


def image(seed: int = 0, size: int = 32) -> Any:
    import numpy as np
    import PIL.Image

    pixels = np.random.RandomState(seed).rand(size, size, 3) * 255
    return PIL.Image.fromarray(pixels.astype("uint8"))


CALL_KWARGS: dict[str, Callable[[int], dict[str, Any]]] = {}
"""Call arguments of the pipelines built in the `tiny_<family>.py` modules: `name` ->
`kwargs(prompts)`, merged over the prompt (conftest.py imports every such module)."""


def call_kwargs(name: str, prompts: int = 1) -> dict[str, Any]:
    """Small call arguments for the pipeline `name` (without `generator`)."""
    prompt: str | list[str] = "a cat dance on the moon"
    if prompts > 1:
        prompt = [f"a {w} in the sky" for w in WORDS[1 : prompts + 1]]
    kwargs: dict[str, Any] = {"prompt": prompt}
    if name in CALL_KWARGS:
        kwargs.update(CALL_KWARGS[name](prompts))
    elif name.startswith("wan"):
        size = 64 if name == "wan22_ti2v" else 32
        kwargs.update(VIDEO, height=size, width=size, negative_prompt="bad", guidance_scale=5.0)
    elif name == "flux":
        kwargs.update(height=8, width=8, num_inference_steps=2, max_sequence_length=16)
        kwargs["output_type"] = "pt"
    elif name.startswith("ltx2"):
        kwargs.update(VIDEO, **LTX2_GUIDANCE, num_frames=5, height=32, width=32, frame_rate=25.0)
        kwargs.update(negative_prompt="bad", decode_timestep=0.05, decode_noise_scale=0.025)
    elif name.startswith("ltx"):
        kwargs.update(VIDEO, height=32, width=32, decode_timestep=0.05, decode_noise_scale=0.025)
    elif name == "hunyuan_video":
        template = {"template": "{}", "crop_start": 0}
        kwargs.update(VIDEO, height=16, width=16, guidance_scale=4.5, prompt_template=template)
    elif name.startswith("stable_audio"):
        kwargs.update(num_inference_steps=2, guidance_scale=6.0, output_type="pt")
    elif name.startswith("cogvideox"):
        kwargs.update(VIDEO, height=32, width=32, negative_prompt="bad", guidance_scale=6.0)
    elif name == "allegro":
        kwargs.update(num_frames=8, height=16, width=16, num_inference_steps=3)
        kwargs.update(negative_prompt="bad", guidance_scale=5.0, max_sequence_length=16)
        kwargs.update(output_type="latent", clean_caption=False)
    elif name == "mochi":
        kwargs.update(VIDEO, num_frames=7, height=16, width=16, negative_prompt="bad")
        kwargs.update(guidance_scale=4.5)
    elif name == "latte":
        kwargs.update(height=16, width=16, video_length=2, num_inference_steps=2, eta=0.5)
        kwargs.update(negative_prompt="bad", guidance_scale=5.0, output_type="pt")
        kwargs.update(clean_caption=False)
    if name in ("wan_i2v", "ltx_i2v", "cogvideox_i2v"):
        several = prompts > 1 and name != "wan_i2v"  # Wan takes one image for the whole batch
        kwargs["image"] = [image(i) for i in range(prompts)] if several else image()
    return kwargs


def output_tensor(output: Any) -> torch.Tensor:
    """The main tensor of a pipeline output (frames, images or audios)."""
    if isinstance(output, tuple):
        return output[0]  # type: ignore[no-any-return]
    for name in ("frames", "images", "audios"):
        if hasattr(output, name):
            return getattr(output, name)  # type: ignore[no-any-return]
    raise TypeError(type(output))


def output_tensors(output: Any) -> dict[str, torch.Tensor]:
    """Every tensor of a pipeline output by name (LTX-2 returns video frames and audio)."""
    if isinstance(output, tuple):
        return {str(i): t for i, t in enumerate(output) if isinstance(t, torch.Tensor)}
    names = ("frames", "images", "audios", "audio")
    found = {
        n: getattr(output, n) for n in names if isinstance(getattr(output, n, None), torch.Tensor)
    }
    if not found:
        raise TypeError(type(output))
    return found


def assert_outputs_bitwise_equal(a: Any, b: Any) -> None:
    """Every output tensor of `a` equals the one of `b` bit for bit."""
    ta, tb = output_tensors(a), output_tensors(b)
    assert ta.keys() == tb.keys(), (ta.keys(), tb.keys())
    for name in ta:
        assert_bitwise_equal(ta[name], tb[name])


_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit pattern as an integer tensor."""
    return t.contiguous().view(_INT_VIEW[t.element_size()])


def assert_bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
    assert torch.equal(bits(a), bits(b)), "outputs differ"


def assert_same_states(a: list[torch.Generator], b: list[torch.Generator]) -> None:
    for ga, gb in zip(a, b, strict=True):
        assert torch.equal(ga.get_state(), gb.get_state()), "generator states differ"


def generators(seeds: list[int]) -> list[torch.Generator]:
    return [torch.Generator("cpu").manual_seed(s) for s in seeds]


def both_arms(
    pipe: Any, kwargs: dict[str, Any], seeds: list[int], as_list: bool = False
) -> tuple[Any, Any, Any, list[torch.Generator], list[torch.Generator]]:
    """The plain call and `overlapped_call_with_report` on fresh generators seeded `seeds`.

    Asserts that neither arm touches the global RNG. Passes the generator list when `as_list`,
    else its first generator.
    """
    from prenoise.integrations.diffusers import overlapped_call_with_report
    from prenoise.verify.rng_guard import global_rng_guard, snapshot_global_rng

    plain_gens, overlapped_gens = generators(seeds), generators(seeds)
    gen_arg: Callable[[list[Any]], Any] = (lambda g: g) if as_list else (lambda g: g[0])
    before = snapshot_global_rng()
    plain = pipe(generator=gen_arg(plain_gens), **kwargs)
    assert not before.differences(snapshot_global_rng()), "the plain call changed the global RNG"
    with global_rng_guard("overlapped_call"), pytest.MonkeyPatch.context() as patch:
        recorder = OverlapRecorder(patch, draw_modules=[served_module, lookahead_module])
        overlapped, report = overlapped_call_with_report(
            pipe, generator=gen_arg(overlapped_gens), **kwargs
        )
    if report.overlapped:
        assert_served_from_the_worker(recorder, report)
    return plain, overlapped, report, plain_gens, overlapped_gens


def assert_served_from_the_worker(recorder: OverlapRecorder, report: Any) -> None:
    """Every served draw was a job on the call's worker, drawn there before the pipeline asked
    for it; nothing was drawn by prenoise outside those jobs."""
    served = [f"{i}:{label}" for i, label in enumerate(report.planned[: report.served])]
    # per-step draws (step_noise.py): step:0 is the guessed first one's; it is taken and not
    # served when the generator moved after the noise (then the first draw is the plain one)
    first = 0 if report.step_first_ahead else 1
    steps = [f"step:{i}" for i in range(first, first + report.step_served)]
    if not report.step_first_ahead and "step:0" in [t.job for t in recorder.takes]:
        steps.insert(0, "step:0")
    assert report.served >= 1
    if report.left_plan is None and report.step_left is None and report.step_unused == 0:
        assert report.served == len(report.planned)
        recorder.assert_prepared_ahead("prenoise-diffusers", served + steps)
        for job in steps:  # the guess drew once per dtype it guessed
            drawn = recorder.draws_in(job)
            assert drawn and set(drawn) == {"step_noise"}, job
            assert len(drawn) == 1 or job == "step:0", job
    else:  # the discarded rest was joined (taken) after the served ones
        takes = [t.job for t in recorder.takes]
        assert takes[: len(served)] == served
    for job in served:
        label = job.split(":", 1)[1]
        drawn = recorder.draws_in(job)
        assert drawn and all(d.startswith(f"{label}.") for d in drawn), (job, drawn)
    assert recorder.draws_outside_jobs() == []


def global_rng_arms(
    pipe: Any, kwargs: dict[str, Any], seed: int = 11
) -> tuple[Any, Any, Any, torch.Tensor, torch.Tensor]:
    """Both arms with `generator=None`, each after `torch.manual_seed(seed)`.

    Returns `(plain, overlapped, report, global RNG state after plain, after overlapped)`; the
    caller's global RNG is restored afterwards.
    """
    from prenoise.integrations.diffusers import overlapped_call_with_report

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        plain = pipe(**kwargs)
        after_plain = torch.get_rng_state()
        torch.manual_seed(seed)
        overlapped, report = overlapped_call_with_report(pipe, **kwargs)
        after_overlapped = torch.get_rng_state()
    return plain, overlapped, report, after_plain, after_overlapped


def cogvideox(image_to_video: bool = False) -> Any:
    """CogVideoX with the DPM scheduler, whose steps draw from the generator after the noise."""
    from diffusers import (
        AutoencoderKLCogVideoX,
        CogVideoXDPMScheduler,
        CogVideoXImageToVideoPipeline,
        CogVideoXPipeline,
        CogVideoXTransformer3DModel,
    )

    with _seeded():
        transformer = CogVideoXTransformer3DModel(
            num_attention_heads=2,
            attention_head_dim=16,
            in_channels=8 if image_to_video else 4,
            out_channels=4,
            time_embed_dim=2,
            text_embed_dim=32,
            num_layers=1,
            sample_width=4,
            sample_height=4,
            sample_frames=9,
            patch_size=2,
            temporal_compression_ratio=4,
            max_text_seq_length=16,
            use_rotary_positional_embeddings=image_to_video,
            use_learned_positional_embeddings=image_to_video,
        ).eval()
        vae = AutoencoderKLCogVideoX(
            in_channels=3,
            out_channels=3,
            down_block_types=("CogVideoXDownBlock3D",) * 4,
            up_block_types=("CogVideoXUpBlock3D",) * 4,
            block_out_channels=(8, 8, 8, 8),
            latent_channels=4,
            layers_per_block=1,
            norm_num_groups=2,
            temporal_compression_ratio=4,
        ).eval()
        encoder = t5_encoder()
    cls = CogVideoXImageToVideoPipeline if image_to_video else CogVideoXPipeline
    return cls(
        tokenizer=tokenizer(),
        text_encoder=encoder,
        vae=vae,
        transformer=transformer,
        scheduler=CogVideoXDPMScheduler(),
    )


BUILDERS.update(
    cogvideox=cogvideox,
    cogvideox_i2v=lambda: cogvideox(image_to_video=True),
)


def hunyuan_video() -> Any:
    """HunyuanVideo: Llama hidden states (third from the end) and CLIP pooled embeddings."""
    from diffusers import (
        AutoencoderKLHunyuanVideo,
        FlowMatchEulerDiscreteScheduler,
        HunyuanVideoPipeline,
        HunyuanVideoTransformer3DModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel, LlamaConfig, LlamaModel

    with _seeded():
        transformer = HunyuanVideoTransformer3DModel(
            in_channels=4,
            out_channels=4,
            num_attention_heads=2,
            attention_head_dim=10,
            num_layers=1,
            num_single_layers=1,
            num_refiner_layers=1,
            patch_size=1,
            patch_size_t=1,
            guidance_embeds=True,
            text_embed_dim=16,
            pooled_projection_dim=8,
            rope_axes_dim=(2, 4, 4),
        ).eval()
        vae = AutoencoderKLHunyuanVideo(
            in_channels=3,
            out_channels=3,
            latent_channels=4,
            down_block_types=("HunyuanVideoDownBlock3D",) * 4,
            up_block_types=("HunyuanVideoUpBlock3D",) * 4,
            block_out_channels=(8, 8, 8, 8),
            layers_per_block=1,
            act_fn="silu",
            norm_num_groups=4,
            scaling_factor=0.476986,
            spatial_compression_ratio=8,
            temporal_compression_ratio=4,
            mid_block_add_attention=True,
        ).eval()
        llama = LlamaModel(
            LlamaConfig(
                bos_token_id=0,
                eos_token_id=1,
                pad_token_id=0,
                hidden_size=16,
                intermediate_size=37,
                num_attention_heads=4,
                num_hidden_layers=3,
                vocab_size=len(WORDS) + 3,
                hidden_act="gelu",
            )
        ).eval()
        clip = CLIPTextModel(
            CLIPTextConfig(
                bos_token_id=0,
                eos_token_id=1,
                pad_token_id=0,
                hidden_size=8,
                intermediate_size=37,
                num_attention_heads=4,
                num_hidden_layers=2,
                vocab_size=len(WORDS) + 3,
                projection_dim=32,
                max_position_embeddings=77,
            )
        ).eval()
    return HunyuanVideoPipeline(
        text_encoder=llama,
        tokenizer=tokenizer(),
        transformer=transformer,
        vae=vae,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0),
        text_encoder_2=clip,
        tokenizer_2=tokenizer(77),
    )


def stable_audio(sde_scheduler: str = "edm") -> Any:
    """StableAudio. `sde_scheduler="edm"`: EDM DPM-Solver++ in SDE mode, which draws from the
    generator on every step; `"cosine"`: the released checkpoints' scheduler, whose Brownian tree
    is seeded from `generator.initial_seed()` (needs `torchsde`)."""
    from diffusers import (
        AutoencoderOobleck,
        StableAudioDiTModel,
        StableAudioPipeline,
        StableAudioProjectionModel,
    )

    if sde_scheduler == "cosine":
        from diffusers.schedulers.scheduling_cosine_dpmsolver_multistep import (
            CosineDPMSolverMultistepScheduler,
        )

        scheduler: Any = CosineDPMSolverMultistepScheduler(
            solver_order=2,
            prediction_type="v_prediction",
            sigma_data=1.0,
            sigma_schedule="exponential",
        )
    else:
        from diffusers import EDMDPMSolverMultistepScheduler

        scheduler = EDMDPMSolverMultistepScheduler(algorithm_type="sde-dpmsolver++")
    with _seeded():
        transformer = StableAudioDiTModel(
            sample_size=8,
            in_channels=3,
            num_layers=2,
            attention_head_dim=4,
            num_key_value_attention_heads=2,
            out_channels=3,
            cross_attention_dim=4,
            time_proj_dim=8,
            global_states_input_dim=8,
            cross_attention_input_dim=4,
        ).eval()
        vae = AutoencoderOobleck(
            encoder_hidden_size=6,
            downsampling_ratios=[1, 2],
            decoder_channels=3,
            decoder_input_channels=3,
            audio_channels=2,
            channel_multiples=[2, 4],
            sampling_rate=4,
        ).eval()
        encoder = t5_encoder()
        projection = StableAudioProjectionModel(
            text_encoder_dim=32, conditioning_dim=4, min_value=0, max_value=32
        ).eval()
    return StableAudioPipeline(
        vae=vae,
        text_encoder=encoder,
        projection_model=projection,
        tokenizer=tokenizer(),
        transformer=transformer,
        scheduler=scheduler,
    )


BUILDERS.update(
    hunyuan_video=hunyuan_video,
    stable_audio=stable_audio,
    stable_audio_cosine=lambda: stable_audio("cosine"),
    ltx2=ltx2,
    ltx2_duration_head=lambda: ltx2(duration_head=True),
)


def latte() -> Any:
    """Latte with DDIM (given the generator at each step: `eta > 0` makes it draw)."""
    from diffusers import AutoencoderKL, DDIMScheduler, LattePipeline, LatteTransformer3DModel

    with _seeded():
        transformer = LatteTransformer3DModel(
            sample_size=8,
            num_layers=1,
            patch_size=2,
            attention_head_dim=8,
            num_attention_heads=2,
            caption_channels=32,
            in_channels=4,
            cross_attention_dim=16,
            out_channels=8,
            attention_bias=True,
            activation_fn="gelu-approximate",
            num_embeds_ada_norm=1000,
            norm_type="ada_norm_single",
            norm_elementwise_affine=False,
            norm_eps=1e-6,
            video_length=2,
        ).eval()
        vae = AutoencoderKL(
            block_out_channels=(8, 8),
            down_block_types=("DownEncoderBlock2D",) * 2,
            up_block_types=("UpDecoderBlock2D",) * 2,
            latent_channels=4,
            norm_num_groups=2,
        ).eval()
        encoder = t5_encoder()
    return LattePipeline(
        tokenizer=tokenizer(120),
        text_encoder=encoder,
        vae=vae,
        transformer=transformer,
        scheduler=DDIMScheduler(),
    )


BUILDERS.update(latte=latte)


def mochi() -> Any:
    """Mochi (its scheduler is called without the generator)."""
    from diffusers import (
        AutoencoderKLMochi,
        FlowMatchEulerDiscreteScheduler,
        MochiPipeline,
        MochiTransformer3DModel,
    )

    with _seeded():
        transformer = MochiTransformer3DModel(
            patch_size=2,
            num_attention_heads=2,
            attention_head_dim=8,
            num_layers=1,
            pooled_projection_dim=16,
            in_channels=12,
            out_channels=None,
            qk_norm="rms_norm",
            text_embed_dim=32,
            time_embed_dim=4,
            activation_fn="swiglu",
            max_sequence_length=16,
        ).eval()
        vae = AutoencoderKLMochi(
            latent_channels=12,
            out_channels=3,
            encoder_block_out_channels=(32, 32, 32, 32),
            decoder_block_out_channels=(32, 32, 32, 32),
            layers_per_block=(1, 1, 1, 1, 1),
        ).eval()
        encoder = t5_encoder()
    return MochiPipeline(
        tokenizer=tokenizer(),
        text_encoder=encoder,
        vae=vae,
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(),
    )


BUILDERS.update(mochi=mochi)


def allegro() -> Any:
    """Allegro with Euler ancestral (its released scheduler: draws at every step)."""
    from diffusers import (
        AllegroPipeline,
        AllegroTransformer3DModel,
        AutoencoderKLAllegro,
        EulerAncestralDiscreteScheduler,
    )

    with _seeded():
        transformer = AllegroTransformer3DModel(
            num_attention_heads=2,
            attention_head_dim=12,
            in_channels=4,
            out_channels=4,
            num_layers=1,
            cross_attention_dim=24,
            sample_width=8,
            sample_height=8,
            sample_frames=8,
            caption_channels=32,
        ).eval()
        vae = AutoencoderKLAllegro(
            in_channels=3,
            out_channels=3,
            down_block_types=("AllegroDownBlock3D",) * 4,
            up_block_types=("AllegroUpBlock3D",) * 4,
            block_out_channels=(8, 8, 8, 8),
            latent_channels=4,
            layers_per_block=1,
            norm_num_groups=2,
            temporal_compression_ratio=4,
        ).eval()
        encoder = t5_encoder()
    return AllegroPipeline(
        tokenizer=tokenizer(),
        text_encoder=encoder,
        vae=vae,
        transformer=transformer,
        scheduler=EulerAncestralDiscreteScheduler(),
    )


BUILDERS.update(allegro=allegro)
