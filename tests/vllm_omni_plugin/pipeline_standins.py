"""Weightless stand-ins to drive vLLM-Omni 0.30.0's own latent preparation on the CPU.

Wan2.2 T2V and Stable Audio run their whole upstream `forward` (scheduler loop included, output
`latent`) with stand-in encoders and transformers. The other pipelines' upstream
`prepare_latents` (LTX-2: its module functions) are called directly on an object carrying only
the attributes they read: running their whole forward would need their text encoders and VAEs.
`draw_all` is what the tests compare, in this process and in an `ATEN_CPU_CAPABILITY=default`
subprocess (scalar_host.py).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

SEED = 1234


_IMPORTED_FIRST = (
    "transformers",
    "diffusers",
    "vllm_omni.diffusion.data",
    "vllm_omni.diffusion.models.dmd2",
    "diffusers.video_processor",
)


@contextlib.contextmanager
def _torchvision_stub() -> Iterator[None]:
    """`.venv-vllm-omni` has no torchvision (none imports beside torch 2.13.0+cpu), which
    `wan2_2/pipeline_wan2_2_i2v.py` imports at module level (for image resizing no test calls).
    Empty stand-in modules exist only during that import, so nothing else sees a torchvision."""
    if importlib.util.find_spec("torchvision") is not None:
        yield
        return
    for needed in _IMPORTED_FIRST:  # they ask whether torchvision is installed: not the stub
        importlib.import_module(needed)
    names = ("torchvision", "torchvision.transforms", "torchvision.transforms.functional")
    for name in names:
        sys.modules[name] = ModuleType(name)
    try:
        yield
    finally:
        for name in names:
            sys.modules.pop(name, None)


def import_wan() -> tuple[ModuleType, ModuleType]:
    """vLLM-Omni's Wan2.2 T2V and I2V pipeline modules (VACE's and S2V's imported too)."""
    with _torchvision_stub():
        for name in (
            "pipeline_wan2_2",
            "pipeline_wan2_2_i2v",
            "pipeline_wan2_2_vace",
            "pipeline_wan2_2_s2v",
        ):
            importlib.import_module("vllm_omni.diffusion.models.wan2_2." + name)
    modules = sys.modules
    return modules[_WAN + "pipeline_wan2_2"], modules[_WAN + "pipeline_wan2_2_i2v"]


_WAN = "vllm_omni.diffusion.models.wan2_2."


class _Tokenizer:
    def __call__(self, texts: list[str], max_length: int, **_: Any) -> Any:
        ids = torch.zeros(len(texts), max_length, dtype=torch.long)
        mask = torch.zeros(len(texts), max_length, dtype=torch.long)
        for row, text in enumerate(texts):
            n = min(max_length, max(1, len(text.split())))
            ids[row, :n] = torch.arange(1, n + 1)
            mask[row, :n] = 1
        return SimpleNamespace(input_ids=ids, attention_mask=mask)


class _TextEncoder(torch.nn.Module):
    """Embeds token ids arithmetically (no weights); records when it ran."""

    dim = 8

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.on_call: Any = None

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> Any:
        if self.on_call is not None:
            self.on_call()
        self.calls.append("encode")
        steps = torch.arange(self.dim, dtype=torch.float32)
        hidden = (ids.float()[..., None] * 0.01 + steps) * mask[..., None]
        return SimpleNamespace(last_hidden_state=hidden)


class _WanTransformer(torch.nn.Module):
    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def forward(self, hidden_states: torch.Tensor, **_: Any) -> tuple[torch.Tensor]:
        return (hidden_states * 0.25,)


def wan_t2v_pipeline() -> Any:
    """A weightless upstream `Wan22Pipeline` (T2V, one transformer) on the CPU."""
    upstream, _ = import_wan()
    pipe = object.__new__(upstream.Wan22Pipeline)
    torch.nn.Module.__init__(pipe)
    pipe.od_config = SimpleNamespace(flow_shift=None)
    pipe.device = torch.device("cpu")
    pipe.expand_timesteps = False
    pipe.is_dmd = False
    pipe.boundary_ratio = 0.875
    pipe.transformer_config = SimpleNamespace(patch_size=(1, 2, 2), in_channels=4, out_channels=4)
    pipe.vae_scale_factor_spatial = 8
    pipe.vae_scale_factor_temporal = 4
    pipe.tokenizer = _Tokenizer()
    pipe.text_encoder = _TextEncoder()
    pipe.transformer = _WanTransformer()
    pipe.transformer_2 = None
    pipe._sample_solver = "unipc"
    pipe._flow_shift = 5.0
    pipe.scheduler = upstream.build_wan_scheduler("unipc", 5.0)
    pipe._progress_bar_config = {"disable": True}
    try:  # vllm-omni 0.32.0rc1 on: the stage this pipeline serves (a whole request here)
        from vllm_omni.config.stage_config import resolve_diffusion_stage_role
    except ImportError:
        pass
    else:
        pipe.stage_role = resolve_diffusion_stage_role(None, None)
    return pipe


@contextlib.contextmanager
def one_rank() -> Iterator[None]:
    """vLLM-Omni's pipeline-parallel mixin asks its (uninitialized) process groups for the world
    size each step: answer 1 for the duration, as a one-GPU `vllm serve` would. Wan's forward
    also calls the platform's `empty_cache`, which the CPU platform lacks: a no-op then."""
    from vllm_omni.diffusion.distributed import pipeline_parallel
    from vllm_omni.platforms import current_omni_platform as platform

    saved = pipeline_parallel.get_pipeline_parallel_world_size, platform.empty_cache
    pipeline_parallel.get_pipeline_parallel_world_size = lambda: 1
    if saved[1] is None:
        platform.empty_cache = lambda: None
    try:
        yield
    finally:
        pipeline_parallel.get_pipeline_parallel_world_size, platform.empty_cache = saved


def run_wan(pipe: Any, req: Any) -> torch.Tensor:
    """Upstream's (or prenoise's hooked) `Wan22Pipeline.forward`: the denoised latents."""
    pipe._pp_send_work = []
    with one_rank():
        return wan_latents(pipe.forward(req))


def wan_request(
    seed: int | None = SEED,
    outputs: int = 1,
    prompts: int = 1,
    *,
    generator: Any = "cpu",
    **sampling: Any,
) -> Any:
    """A `DiffusionRequestBatch` of `prompts` T2V requests (64x96, 9 frames, 2 steps)."""
    from vllm_omni.diffusion.request import OmniDiffusionRequest
    from vllm_omni.diffusion.worker.request_batch import DiffusionRequestBatch
    from vllm_omni.inputs.data import OmniDiffusionSamplingParams

    requests = []
    for i in range(prompts):
        params = dict(
            height=64,
            width=96,
            num_frames=9,
            num_inference_steps=2,
            num_outputs_per_prompt=outputs,
            output_type="latent",
            guidance_scale=1.0,
        )
        params.update(sampling)
        sp = OmniDiffusionSamplingParams(**params)
        sp.guidance_scale_provided = True
        if seed is not None and generator is not None:
            sp.seed = seed + i
            sp.generator = (
                torch.Generator(device="cpu").manual_seed(seed + i)
                if generator == "cpu"
                else generator
            )
        requests.append(
            OmniDiffusionRequest(
                prompt={"prompt": f"a fox {i}"}, sampling_params=sp, request_id=f"r{i}"
            )
        )
    return DiffusionRequestBatch(requests)


def wan_latents(outputs: list[Any]) -> torch.Tensor:
    """The latents of each output (a 0.32.0rc1 DENOISE stage's: in its `custom_output`)."""
    return torch.cat(
        [out.custom_output["latents"] if out.output is None else out.output for out in outputs]
    )


# -- the other pipelines: upstream's prepare_latents on a minimal self ---------------------------


def _gen(offset: int = 0) -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(SEED + offset)


def draw_wan_i2v() -> torch.Tensor:
    _, upstream = import_wan()

    class _Vae:
        dtype = torch.float32
        config = SimpleNamespace(z_dim=4, latents_mean=[0.0] * 4, latents_std=[1.0] * 4)

        def encode(self, x: torch.Tensor) -> Any:
            b, _, t, h, w = x.shape
            z = torch.zeros(b, 4, (t - 1) // 4 + 1, h // 8, w // 8)
            return SimpleNamespace(latent_dist=SimpleNamespace(mode=lambda: z))

    me = SimpleNamespace(
        vae_scale_factor_temporal=4,
        vae_scale_factor_spatial=8,
        vae=_Vae(),
        expand_timesteps=False,
        device=torch.device("cpu"),
    )
    image = torch.zeros(1, 3, 64, 96)
    latents, _, _ = upstream.Wan22I2VPipeline.prepare_latents(
        me, image, 1, 4, 64, 96, 9, torch.float32, torch.device("cpu"), _gen()
    )
    return latents


def draw_ltx2() -> dict[str, torch.Tensor]:
    """Upstream's LTX-2 latent functions: video and audio latents, noise on given latents (one
    request generator through all three), then the euler_ancestral per-step noise."""
    from vllm_omni.diffusion.models.ltx2 import ltx2_denoise, ltx2_latents

    me = SimpleNamespace(
        vae_spatial_compression_ratio=32,
        vae_temporal_compression_ratio=8,
        transformer_spatial_patch_size=1,
        transformer_temporal_patch_size=1,
        audio_vae_mel_compression_ratio=4,
        od_config=SimpleNamespace(parallel_config=SimpleNamespace(sequence_parallel_size=1)),
    )
    cpu, generator = torch.device("cpu"), _gen()
    video = ltx2_latents.prepare_video_latents(
        me, 1, 8, 64, 96, 9, dtype=torch.float32, device=cpu, generator=generator
    )
    audio, _, _ = ltx2_latents.prepare_audio_latents(
        me, 1, 8, 5, 64, dtype=torch.float32, device=cpu, generator=generator
    )
    noised = ltx2_latents.create_noised_state(torch.zeros(1, 24, 8), 0.5, generator)
    gens = [_gen(10000), _gen(10001)]
    ancestral = ltx2_denoise._randn_like_with_generators(torch.zeros(2, 24, 8), gens)
    return {
        "ltx2.video": video,
        "ltx2.audio": audio,
        "ltx2.noised": noised,
        "ltx2.ancestral": ancestral,
    }


def draw_hunyuan() -> dict[str, torch.Tensor]:
    from vllm_omni.diffusion.models.hunyuan_video import (
        pipeline_hunyuan_video_1_5 as t2v,
    )
    from vllm_omni.diffusion.models.hunyuan_video import (
        pipeline_hunyuan_video_1_5_i2v as i2v,
    )

    me = SimpleNamespace(
        num_channels_latents=4, vae_scale_factor_temporal=4, vae_scale_factor_spatial=16
    )
    args = (1, 64, 96, 9, torch.float32, torch.device("cpu"))
    return {
        "hunyuan.t2v": t2v.HunyuanVideo15Pipeline.prepare_latents(me, *args, generator=_gen()),
        "hunyuan.i2v": i2v.HunyuanVideo15I2VPipeline.prepare_latents(me, *args, generator=_gen(1)),
    }


def draw_qwen() -> dict[str, torch.Tensor]:
    """Upstream's `prepare_latents` of Qwen-Image and of its Edit, Edit-Plus and Layered
    variants (each its own module and `randn_tensor`; text-to-image: no input image)."""
    from vllm_omni.diffusion.models.qwen_image import pipeline_qwen_image as qwen
    from vllm_omni.diffusion.models.qwen_image import pipeline_qwen_image_edit as edit
    from vllm_omni.diffusion.models.qwen_image import pipeline_qwen_image_edit_plus as plus
    from vllm_omni.diffusion.models.qwen_image import pipeline_qwen_image_layered as layered

    cpu, f32 = torch.device("cpu"), torch.float32

    def me(cls: Any) -> Any:
        return SimpleNamespace(
            vae_scale_factor=8, latent_channels=16, _pack_latents=cls._pack_latents
        )

    image = qwen.QwenImagePipeline
    out = {"qwen.image": image.prepare_latents(me(image), 1, 16, 64, 96, f32, cpu, _gen())}
    for name, cls, offset in (
        ("qwen.edit", edit.QwenImageEditPipeline, 1),
        ("qwen.edit_plus", plus.QwenImageEditPlusPipeline, 2),
    ):
        out[name] = cls.prepare_latents(me(cls), None, 1, 16, 64, 96, f32, cpu, _gen(offset))[0]
    cls = layered.QwenImageLayeredPipeline
    out["qwen.layered"] = cls.prepare_latents(me(cls), None, 1, 16, 64, 96, 2, f32, cpu, _gen(3))[0]
    return {k: v[0] if isinstance(v, tuple) else v for k, v in out.items()}


class _AudioTransformer(torch.nn.Module):
    config = SimpleNamespace(sample_size=32, in_channels=8)

    def forward(self, x: torch.Tensor, *_: Any, **__: Any) -> tuple[torch.Tensor]:
        return (x * 0.1,)


def stable_audio_pipeline() -> Any:
    """A weightless upstream `StableAudioPipeline`: its real scheduler (torchsde noise), its
    text and duration encoders replaced by stand-ins returning fixed embeddings."""
    from diffusers.schedulers import CosineDPMSolverMultistepScheduler
    from vllm_omni.diffusion.models.stable_audio import pipeline_stable_audio as upstream
    from vllm_omni.diffusion.models.stable_audio.stable_audio_transformer import (
        StableAudioSchedulerWrapper,
    )

    pipe = object.__new__(upstream.StableAudioPipeline)
    torch.nn.Module.__init__(pipe)
    pipe.device = torch.device("cpu")
    pipe.scheduler = StableAudioSchedulerWrapper(CosineDPMSolverMultistepScheduler())
    pipe.transformer = _AudioTransformer()
    pipe.vae = SimpleNamespace(hop_length=2048, config=SimpleNamespace(sampling_rate=44100))
    pipe.rotary_embed_dim = 4
    pipe.projection_model = SimpleNamespace(config=SimpleNamespace(min_value=0, max_value=512))
    pipe.encode_prompt = lambda prompt, *_a, **_k: torch.ones(len(prompt), 3, 6)
    pipe.encode_duration = lambda s, e, d, cfg, batch: (torch.ones(batch, 1, 6),) * 2
    return pipe


def draw_stable_audio() -> dict[str, torch.Tensor]:
    """Upstream's whole `StableAudioPipeline.forward` (3 steps, output `latent`): the initial
    latents (`prepare_latents`) and the scheduler's torchsde noise of every step."""
    from vllm_omni.diffusion.request import OmniDiffusionRequest
    from vllm_omni.diffusion.worker.request_batch import DiffusionRequestBatch
    from vllm_omni.inputs.data import OmniDiffusionSamplingParams

    sp = OmniDiffusionSamplingParams(
        num_inference_steps=3, output_type="latent", seed=SEED, guidance_scale=1.0
    )
    sp.guidance_scale_provided = True
    sp.generator = _gen()
    req = DiffusionRequestBatch([OmniDiffusionRequest("a bell", sp, "a0")])
    out = stable_audio_pipeline().forward(req)
    return {"stable_audio": out.output}


@contextlib.contextmanager
def _scope(pipeline: str) -> Iterator[None]:
    """Inside `pipeline`'s call, as its hooked entry marks it (a draw `scoped` to that pipeline
    is served only there; without hooks, as in the reference subprocess, nothing reads it)."""
    from prenoise.integrations.vllm_omni import pipelines

    token = pipelines._scope.set(pipeline)
    try:
        yield
    finally:
        pipelines._scope.reset(token)


def draw_module_globals() -> dict[str, torch.Tensor]:
    """Each hooked module's `randn_tensor` global called as its call sites call it (shape,
    `generator=` a CPU generator, `device=`, `dtype=`), inside its pipeline's scope: the modules
    whose call sites need more than stand-ins can give (LTX-2's I2V conditioning, decode-timestep
    noise, the LTX-2.5 diffusion decoder on one rank and in distributed tiles) included."""
    from prenoise.integrations.vllm_omni.pipeline_targets import TARGETS

    import_wan()
    out = {}
    for offset, target in enumerate(t for t in TARGETS if t.name == "randn_tensor"):
        module = importlib.import_module(target.module)
        with _scope(target.pipeline):
            out[f"global:{target.module}"] = module.randn_tensor(
                (2, 3, 37),
                generator=_gen(100 + offset),
                device=torch.device("cpu"),
                dtype=torch.float32,
            )
    return out


def draw_all(wan: Any = None) -> dict[str, torch.Tensor]:
    """Every pipeline's draws, as upstream makes them (prenoise's hooks in place or not)."""
    out: dict[str, torch.Tensor] = {}
    pipe = wan_t2v_pipeline()
    out["wan.t2v"] = run_wan(pipe, wan_request(outputs=2))
    out["wan.i2v"] = draw_wan_i2v()
    out.update(draw_ltx2())
    out.update(draw_hunyuan())
    out.update(draw_qwen())
    out.update(draw_stable_audio())
    out.update(draw_module_globals())
    return out
