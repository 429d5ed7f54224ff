"""One MiniMax-H3 request through SGLang's real stages, no checkpoint: what `prenoise
sglang-verify` and the SGLang plugin tests run (one copy).

`load_h3()` imports upstream's H3 modules, loads the diffusion plugins the way SGLang's workers
do (`load_plugins(); apply_plugin_hooks()`: prenoise's entry point) and sets the stand-in server
args upstream's own unit tests use. A request (`make_request`) is admitted by upstream's real
pre-queue hook and runs through the plugin's `forward` hook and upstream's real latent
preparation -> timestep preparation -> denoising stages, the DiT a tiny fake (`FakeH3DiT`);
visual conditions are encoded by upstream's own visual-encoding code with a fake VAE
(`encode_visual`). `capture` returns every tensor the Denoising stage receives, every input the
DiT receives at each step, the stage's outputs and, for a rollout request, the trajectory, the
log-probs and the rollout generator's final state.

Imports nothing of SGLang until a function runs (sglang takes 15-45 s to import).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from prenoise.integrations.sglang import h3_initial, h3_rollout, plugin

__all__ = [
    "H3_MODULE",
    "STEPS",
    "Capture",
    "FakeH3DiT",
    "FakeVideoVAE",
    "ServerArgs",
    "capture",
    "encode_visual",
    "fingerprint",
    "load_h3",
    "make_request",
    "recorded_draws",
    "recorded_loops",
    "recorded_serves",
    "rollout_contexts",
    "run",
    "run_group",
    "same",
    "server_args",
    "synthetic_images",
    "tensors",
]

H3_MODULE = "sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3"
"""Upstream's MiniMax-H3 package."""

STEPS = 3
"""Denoising steps of a request unless told otherwise."""


class ServerArgs(SimpleNamespace):
    """The stand-in server args upstream's unit tests use (`test/unit/conftest.py`), plus what
    the H3 denoising stage reads."""


def server_args() -> ServerArgs:
    """Server args for the stages on the CPU (bfloat16 DiT precision, no parallelism)."""
    dit = SimpleNamespace(
        hidden_size=64,
        num_attention_heads=4,
        boundary_ratio=None,
        arch_config=SimpleNamespace(in_channels=16, patch_size=2),
    )
    pipeline = SimpleNamespace(
        dit_config=dit,
        dit_precision="bfloat16",
        vae_precision="bfloat16",
        get_latent_dtype=lambda dtype: dtype,
        uses_subblock_attention=lambda _sa: False,
    )
    return ServerArgs(
        attention_backend=None,
        attention_backend_config=None,
        component_attention_backends=None,
        comfyui_mode=False,
        disable_autocast=False,
        enable_cfg_parallel=False,
        enable_breakable_cuda_graph=False,
        enable_layerwise_nvtx_marker=False,
        enable_torch_compile=False,
        kv_gather_degree=1,
        sp_split_auto=False,
        model_loaded={},
        model_paths={},
        pipeline_config=pipeline,
    )


def load_h3() -> SimpleNamespace:
    """Upstream's H3 modules and stand-in server args, with the diffusion plugins loaded by
    SGLang's own loader; `previous_server_args` is what to restore after."""
    from sglang.multimodal_gen.configs.sample.minimax_h3 import MiniMaxH3SamplingParams
    from sglang.multimodal_gen.runtime import server_args as server_args_module
    from sglang.multimodal_gen.runtime.pipelines import minimax_h3_pipeline
    from sglang.multimodal_gen.runtime.pipelines_core import composed_pipeline_base
    from sglang.multimodal_gen.runtime.pipelines_core.schedule_batch import Req
    from sglang.multimodal_gen.runtime.platforms import plugins

    prequeue = importlib.import_module(f"{H3_MODULE}.prequeue")
    stages = f"{H3_MODULE}.stages"
    denoising = importlib.import_module(f"{stages}.denoising")
    latent_preparation = importlib.import_module(f"{stages}.latent_preparation")
    timestep_preparation = importlib.import_module(f"{stages}.timestep_preparation")
    visual_encoding = importlib.import_module(f"{stages}.visual_encoding")

    plugins.load_plugins()
    plugins.apply_plugin_hooks()
    args = server_args()
    previous = server_args_module._global_server_args
    server_args_module.set_global_server_args(args)
    return SimpleNamespace(
        SA=args,
        Req=Req,
        SamplingParams=MiniMaxH3SamplingParams,
        prepare_for_queue=prequeue.minimax_h3_prepare_for_queue,
        Pipeline=minimax_h3_pipeline.MiniMaxH3Pipeline,
        ComposedPipelineBase=composed_pipeline_base.ComposedPipelineBase,
        LatentStage=latent_preparation.MiniMaxH3LatentPreparationStage,
        TimestepStage=timestep_preparation.MiniMaxH3TimestepPreparationStage,
        DenoisingStage=denoising.MiniMaxH3DenoisingStage,
        VisualStage=visual_encoding.MiniMaxH3VisualEncodingStage,
        plugins=plugins,
        server_args_module=server_args_module,
        previous_server_args=previous,
    )


class FakeH3DiT(torch.nn.Module):
    """What the H3 denoising stage calls (as in SGLang's own H3 harnesses): records its
    inputs and returns velocities that depend on them."""

    def __init__(self, target_rows: int, audio_rows: int) -> None:
        super().__init__()
        self.final_layer = SimpleNamespace(_pdd_heads=None)
        self._resolved_attention_backend = None
        self.target_rows, self.audio_rows = target_rows, audio_rows
        self.inputs: list[dict[str, torch.Tensor]] = []

    def _resolve_attention_backend_once(self) -> None:
        return None

    def prepare_adaln_plans(self, *_args: Any, **_kwargs: Any) -> None:
        return None

    def forward(self, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Record the inputs (copies); velocities computed from them."""
        self.inputs.append({k: v.clone() for k, v in kwargs.items() if torch.is_tensor(v)})
        x = kwargs["x"].float()
        video = x[0, : self.target_rows, :96] * 0.5 + x.mean()
        audio = torch.zeros(self.audio_rows, 32) + kwargs["audio_x"].float().mean()
        return video, audio


class FakeVideoVAE(torch.nn.Module):
    """What upstream's keyframe / reference encoders call: latents of the real shapes (an
    image's size / 16; a video's frames grouped 17n+5 -> 5n+2 as the H3 VAE does)."""

    parallel_tiling = False

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))

    @staticmethod
    def _latent(t: int, h: int, w: int, salt: float) -> torch.Tensor:
        n = 24 * t * h * w
        return (torch.linspace(-2.0, 2.0, n) + salt).sin().reshape(1, 24, t, h, w)

    def encode_images(self, image: Any, use_fp16_latent: bool = True) -> list[torch.Tensor]:
        """One latent of the image's size / 16."""
        width, height = image.size
        return [self._latent(1, height // 16, width // 16, float(sum(image.getpixel((0, 0)))))]

    def encode_videos(self, frames: Any, use_fp16_latent: bool = True) -> list[torch.Tensor]:
        """One latent of the frames' size / 16 and the VAE's latent length."""
        time_request = importlib.import_module(f"{H3_MODULE}.time_request")
        count, height, width, _ = frames.shape
        t = time_request.minimax_h3_video_latent_t(count)
        return [self._latent(t, height // 16, width // 16, 0.5)]


def encode_visual(h3: Any, seconds: dict[str, float]) -> Callable[[Any], None]:
    """The encoders' place: upstream's own visual encoding of the plan's materials (fake VAE;
    a reference video's decoded frames stood in by a zero-stride array of the size upstream's
    decoder gives: the target-capped frame count, or fewer for a video `seconds` says is
    short), plus the audio encoder's empty payload for a reference video without sound."""
    import numpy as np

    reference_encoding = importlib.import_module(f"{H3_MODULE}.reference_encoding")
    resolved_plan = importlib.import_module(f"{H3_MODULE}.resolved_plan")

    def encode(batch: Any) -> None:
        plan = resolved_plan.minimax_h3_plan_from_batch(batch)
        shapes = batch.extra["minimax_h3_resolved_material_shapes"]
        videos, audios = [], []
        for m in plan.materials:
            if str(m.material_chain).startswith("video"):
                ci, size = int(m.condition_index), shapes[int(m.condition_index)]
                frames = reference_encoding._reference_video_target_frame_count(plan=plan)
                frames = min(frames, int(24 * seconds.get(m.uri, 1e9)))
                array = np.broadcast_to(
                    np.zeros((1, 1, 1, 3), np.uint8), (frames, size["height"], size["width"], 3)
                )
                chain = str(m.material_chain)
                videos.append({"frames": array, "condition_index": ci, "material_chain": chain})
                audios.append({"condition_index": ci, "ref_audio_t": 0, "rows": torch.zeros(0, 32)})
        if videos:
            batch.extra["minimax_h3_prepared_reference_video"] = {"videos": videos}
            batch.extra["minimax_h3_reference_audio_rows"] = {"audios": audios}
        stage = object.__new__(h3.VisualStage)
        stage.video_vae = FakeVideoVAE()
        stage.vae_arch_config = SimpleNamespace(
            latent_channels=24, latents_mean=[0.1] * 24, latents_std=[0.9] * 24
        )
        stage._encode_keyframes_from_plan(batch, plan, plan.encoders.get("visual"))

    return encode


def synthetic_images(folder: Path) -> dict[str, str]:
    """Small PNG files upstream's pre-queue hook probes: two keyframes (`kf_first`, `kf_last`)
    and two references (`ref_wide` 300x200, `ref_tall` 120x160); name -> path."""
    from PIL import Image

    files = {}
    for name, size, colour in (
        ("kf_first", (200, 112), (10, 200, 30)),
        ("kf_last", (160, 96), (200, 20, 30)),
        ("ref_wide", (300, 200), (20, 20, 230)),
        ("ref_tall", (120, 160), (20, 120, 230)),
    ):
        path = folder / f"{name}.png"
        Image.new("RGB", size, colour).save(path)
        files[name] = str(path)
    return files


def tensors(value: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in a nested dict/list/tuple, with its path."""
    if torch.is_tensor(value):
        yield prefix, value
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from tensors(value[key], f"{prefix}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from tensors(item, f"{prefix}[{i}]")


def fingerprint(tensor: torch.Tensor) -> tuple[Any, ...]:
    """Shape, dtype, device, strides and the exact bytes (an integer view: NaN-aware)."""
    data = tensor.detach().cpu().contiguous()
    raw = data.reshape(-1).view(torch.uint8) if data.numel() else data
    return (tuple(tensor.shape), tensor.dtype, tensor.device.type, tensor.stride(), raw.clone())


def same(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Names of fields that differ in anything (bytes included); [] when all are identical."""
    differ = sorted(set(a) ^ set(b))
    for name in sorted(set(a) & set(b) - {"served_ptrs"}):
        fa, fb = a[name], b[name]
        if fa[:4] != fb[:4] or not torch.equal(fa[4], fb[4]):
            differ.append(name)
    return differ


def make_request(
    h3: Any,
    seed: int,
    short_edge: int,
    duration: float,
    *,
    task: str = "t2va",
    conditions: list[dict[str, Any]] | None = None,
    aspect_ratio: str = "16:9",
    steps: int = STEPS,
    **sampling: Any,
) -> Any:
    """A request as SGLang's HTTP process hands it to a worker (pre-queue plan shipped).
    Upstream's own validation raises `ValueError` for a request it refuses."""
    params = h3.SamplingParams(
        prompt="a cat",
        task=task,
        seed=seed,
        conditions=conditions,
        target={
            "short_edge": short_edge,
            "aspect_ratio": aspect_ratio,
            "duration_seconds": duration,
        },
        num_inference_steps=steps,
        **sampling,
    )
    req = h3.Req(sampling_params=params)
    params.apply_request_extra(req)
    h3.prepare_for_queue(req)
    req.generator = [torch.Generator("cpu").manual_seed(seed)]
    req.prompt_embeds = [torch.zeros(1, 4, 8)]
    req.extra["minimax_h3_text_embeddings"] = {
        "positive": {
            "hidden_states": torch.zeros(5, 5120, dtype=torch.bfloat16),
            "text_len": 5,
            "text_token_tags": torch.ones(5),
        }
    }
    return req


@dataclass
class Capture:
    """What one request's stages received and returned (name -> a copy of the tensor), and the
    data pointers of the initial rows the Denoising stage received (`served_ptrs`)."""

    fields: dict[str, torch.Tensor] = field(default_factory=dict)
    served_ptrs: list[int] = field(default_factory=list)


def _copy(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


@contextlib.contextmanager
def rollout_contexts() -> Iterator[list[Any]]:
    """Every `MiniMaxH3RolloutCtx` upstream's `_run_full_loop` makes while the block runs."""
    module = importlib.import_module(f"{H3_MODULE}.minimax_h3_rollout")
    seen: list[Any] = []
    base = module.MiniMaxH3RolloutCtx

    class Recorded(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            seen.append(self)

    setattr(module, "MiniMaxH3RolloutCtx", Recorded)  # noqa: B010 (a module attribute)
    try:
        yield seen
    finally:
        setattr(module, "MiniMaxH3RolloutCtx", base)  # noqa: B010


def capture(h3: Any, req: Any, *, before_latents: Callable[[Any], None] | None = None) -> Capture:
    """One request through the plugin's forward hook and upstream's stages; see `Capture`."""
    out = Capture()
    fields = out.fields

    def stages(_pipeline: Any, batch: Any, sa: Any) -> Any:
        if before_latents is not None:
            before_latents(batch)  # the encoders' place in the stage list
        batch = h3.LatentStage()(batch, sa)
        batch = h3.TimestepStage()(batch, sa)
        state = batch.extra["minimax_h3_denoise_state"]
        out.served_ptrs.extend(
            state[k].data_ptr() for k in ("initial_video_rows", "initial_audio_rows")
        )
        for name, t in tensors({"latents": batch.latents, "audio": batch.audio_latents}):
            fields[f"denoise_in{name}"] = _copy(t)
        for name, t in tensors(batch.extra):
            fields[f"denoise_in.extra{name}"] = _copy(t)
        ints = {k: v for k, v in state.items() if not torch.is_tensor(v)}
        assert all(type(v) is int for v in ints.values())
        names = ",".join(sorted(ints))
        fields[f"denoise_in.state[{names}]"] = torch.tensor([ints[k] for k in sorted(ints)])
        dit = FakeH3DiT(state["initial_video_rows"].shape[0], state["initial_audio_rows"].shape[0])
        batch = h3.DenoisingStage(transformer=dit)(batch, sa)
        for step, inputs in enumerate(dit.inputs):
            for name, t in inputs.items():
                fields[f"dit[{step}].{name}"] = t
        for name, t in tensors({"latents": batch.latents, "audio": batch.audio_latents}):
            fields[f"denoise_out{name}"] = _copy(t)
        data = getattr(batch, "rollout_trajectory_data", None)
        if getattr(batch, "rollout", False) and data is not None:
            trajectory = data.dit_trajectory
            for name, t in tensors(
                {
                    "latents": getattr(trajectory, "latents", None),
                    "timesteps": getattr(trajectory, "timesteps", None),
                    "sigmas": getattr(trajectory, "sigmas", None),
                    "log_probs": data.rollout_log_probs,
                }
            ):
                fields[f"rollout{name}"] = _copy(t)
        return batch

    with rollout_contexts() as contexts:
        pipeline = object.__new__(h3.Pipeline)  # a MiniMax-H3 pipeline (no weights)
        plugin.around_forward(stages, pipeline, req, h3.SA)
    for i, ctx in enumerate(contexts):
        fields[f"rollout_generator[{i}].final_state"] = ctx.generator.get_state()
    for i, generator in enumerate(getattr(req, "generator", None) or ()):
        fields[f"request_generator[{i}].final_state"] = generator.get_state()
    return out


def run(
    h3: Any,
    req: Any,
    *,
    before_latents: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """`capture` as fingerprints (name -> `fingerprint`), plus `served_ptrs` (the tests)."""
    captured = capture(h3, req, before_latents=before_latents)
    fields: dict[str, Any] = {"served_ptrs": captured.served_ptrs}
    fields.update((name, fingerprint(t)) for name, t in captured.fields.items())
    return fields


def run_group(h3: Any, reqs: list[Any], before_latents: Callable[[Any], None]) -> dict[str, Any]:
    """A group of requests (the expanded outputs of one prompt) through the plugin's
    `forward_batch` hook and upstream's stages run stage by stage over the group, as the
    executor's `execute_group` runs them; every compared field, per output."""
    fields: dict[str, Any] = {}

    def stages(_pipeline: Any, batches: list[Any], sa: Any) -> Any:
        for batch in batches:
            before_latents(batch)
        batches = h3.LatentStage().run_grouped_requests(batches, sa)
        batches = [h3.TimestepStage()(batch, sa) for batch in batches]
        for i, batch in enumerate(batches):
            for name, t in tensors({"latents": batch.latents, "extra": batch.extra}):
                fields[f"[{i}].denoise_in.{name}"] = fingerprint(t)
            state = batch.extra["minimax_h3_denoise_state"]
            rows = (state["initial_video_rows"].shape[0], state["initial_audio_rows"].shape[0])
            dit = FakeH3DiT(*rows)
            batch = h3.DenoisingStage(transformer=dit)(batch, sa)
            for step, inputs in enumerate(dit.inputs):
                for name, t in inputs.items():
                    fields[f"[{i}].dit[{step}].{name}"] = fingerprint(t)
            for name, t in tensors({"latents": batch.latents, "audio": batch.audio_latents}):
                fields[f"[{i}].denoise_out{name}"] = fingerprint(t)
        return batches

    pipeline = object.__new__(h3.Pipeline)
    plugin.around_forward_batch(stages, pipeline, reqs, h3.SA)
    return fields


@contextlib.contextmanager
def recorded_serves() -> Iterator[list[tuple[str, bool]]]:
    """Every `(what, served)` the plugin reports while the block runs."""
    seen: list[tuple[str, bool]] = []

    def observe(what: str, served: bool) -> None:
        seen.append((what, served))

    h3_initial.serve_observers.append(observe)
    try:
        yield seen
    finally:
        h3_initial.serve_observers.remove(observe)


@contextlib.contextmanager
def recorded_draws() -> Iterator[list[tuple[str, int, str, int]]]:
    """Every draw the plugin prepares while the block runs: (label, seed, thread, data_ptr)."""
    seen: list[tuple[str, int, str, int]] = []

    def observe(label: str, key: Any, thread: str, tensor: torch.Tensor) -> None:
        seen.append((label, key.seed, thread, tensor.data_ptr()))

    h3_initial.observers.append(observe)
    try:
        yield seen
    finally:
        h3_initial.observers.remove(observe)


@contextlib.contextmanager
def recorded_loops() -> Iterator[list[Any]]:
    """Every rollout loop (`h3_rollout.RolloutLoop`) that ended while the block runs."""
    seen: list[Any] = []

    def observe(loop: Any) -> None:
        seen.append(loop)

    h3_rollout.loop_observers.append(observe)
    try:
        yield seen
    finally:
        h3_rollout.loop_observers.remove(observe)
