"""Shared harness of the SGLang plugin tests: one request through the plugin's forward hook and
upstream's real MiniMax-H3 stages (latent preparation -> timestep preparation -> denoising) with
a tiny fake DiT, and every compared field fingerprinted (shape, dtype, device, strides, bytes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import torch

from prenoise.integrations.sglang import h3_initial, plugin

STEPS = 3


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
        self.inputs.append({k: v.clone() for k, v in kwargs.items() if torch.is_tensor(v)})
        x = kwargs["x"].float()
        video = x[0, : self.target_rows, :96] * 0.5 + x.mean()
        audio = torch.zeros(self.audio_rows, 32) + kwargs["audio_x"].float().mean()
        return video, audio


def tensors(value: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in a nested dict/list/tuple/struct, with its path."""
    if torch.is_tensor(value):
        yield prefix, value
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from tensors(value[key], f"{prefix}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from tensors(item, f"{prefix}[{i}]")


def fingerprint(tensor: torch.Tensor) -> tuple[Any, ...]:
    """Shape, dtype, device, strides and the exact bytes (an integer view)."""
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
    **sampling: Any,
) -> Any:
    """A request as SGLang's HTTP process hands it to a worker (pre-queue plan shipped)."""
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
        num_inference_steps=STEPS,
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


def run(
    h3: Any,
    req: Any,
    *,
    before_latents: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """One request through the plugin's forward hook and upstream's stages; every compared
    field (name -> fingerprint)."""
    fields: dict[str, Any] = {}
    served = fields.setdefault("served_ptrs", [])

    def stages(_pipeline: Any, batch: Any, sa: Any) -> Any:
        if before_latents is not None:
            before_latents(batch)  # the encoders' place in the stage list
        batch = h3.LatentStage()(batch, sa)
        batch = h3.TimestepStage()(batch, sa)
        state = batch.extra["minimax_h3_denoise_state"]
        served.extend(state[k].data_ptr() for k in ("initial_video_rows", "initial_audio_rows"))
        for name, t in tensors({"latents": batch.latents, "audio": batch.audio_latents}):
            fields[f"denoise_in{name}"] = fingerprint(t)
        for name, t in tensors(batch.extra):
            fields[f"denoise_in.extra{name}"] = fingerprint(t)
        ints = {k: v for k, v in state.items() if not torch.is_tensor(v)}
        assert all(type(v) is int for v in ints.values())
        names = ",".join(sorted(ints))
        fields[f"denoise_in.state[{names}]"] = fingerprint(
            torch.tensor([ints[k] for k in sorted(ints)])
        )
        dit = FakeH3DiT(state["initial_video_rows"].shape[0], state["initial_audio_rows"].shape[0])
        batch = h3.DenoisingStage(transformer=dit)(batch, sa)
        for step, inputs in enumerate(dit.inputs):
            for name, t in inputs.items():
                fields[f"dit[{step}].{name}"] = fingerprint(t)
        for name, t in tensors({"latents": batch.latents, "audio": batch.audio_latents}):
            fields[f"denoise_out{name}"] = fingerprint(t)
        return batch

    pipeline = object.__new__(h3.Pipeline)  # a MiniMax-H3 pipeline (no weights)
    plugin.around_forward(stages, pipeline, req, h3.SA)
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
    h3_initial.serve_observers.append(lambda what, served: seen.append((what, served)))
    try:
        yield seen
    finally:
        h3_initial.serve_observers.pop()


@contextlib.contextmanager
def recorded_draws() -> Iterator[list[tuple[str, int, str, int]]]:
    seen: list[tuple[str, int, str, int]] = []

    def observe(label: str, key: Any, thread: str, tensor: torch.Tensor) -> None:
        seen.append((label, key.seed, thread, tensor.data_ptr()))

    h3_initial.observers.append(observe)
    try:
        yield seen
    finally:
        h3_initial.observers.remove(observe)
