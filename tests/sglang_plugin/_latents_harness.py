"""Shared harness of the Wan / HunyuanVideo / LTX-2 initial-noise tests: one request through the
plugin's `forward` (or `forward_batch`) hook and upstream's real `InputValidationStage` and
latent stage (SGLang 0.5.23, real pipeline configs, no checkpoint), a stand-in text encoder
between them, and every field the denoising stage would receive fingerprinted (shape, dtype,
device, strides, bytes), with the generators' final states.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import torch
from _h3_harness import fingerprint

from prenoise.integrations.sglang import latents_ahead, plugin, reviewed, support

_FIELDS = ("height", "width", "num_frames", "seeds", "raw_latent_shape", "raw_audio_latent_shape")


def server_args(config: Any, class_name: str) -> SimpleNamespace:
    """What `InputValidationStage` and the latent stages read of the server args."""
    return SimpleNamespace(
        pipeline_config=config,
        pipeline_class_name=class_name,
        component_precisions={},
        enable_cfg_parallel=False,
        comfyui_mode=False,
        enable_layerwise_nvtx_marker=False,
        attention_backend=None,
    )


def make_req(env: Any, seed: int, height: int, width: int, frames: int, **sampling: Any) -> Any:
    """A request as the scheduler hands it to a worker (before input validation);
    `params_cls` (in `sampling`): the sampling-params class (default: the generic one)."""
    params = sampling.pop("params_cls", env.SamplingParams)(
        prompt="a cat",
        seed=seed,
        height=height,
        width=width,
        num_frames=frames,
        num_inference_steps=2,
        guidance_scale=1.0,
        **{"generator_device": "cpu", **sampling},
    )
    return env.Req(sampling_params=params)


def _collect(batches: list[Any], fields: dict[str, Any]) -> None:
    for i, batch in enumerate(batches):
        for name, value in sorted(vars(batch).items()):
            items = value if isinstance(value, list | tuple) else [value]
            for j, item in enumerate(items):
                if torch.is_tensor(item):
                    fields[f"[{i}].{name}[{j}]"] = fingerprint(item)
            if name in _FIELDS:
                fields[f"[{i}].{name}"] = repr(value)
        for name, value in sorted(batch.extra.items()):
            if torch.is_tensor(value) or isinstance(value, tuple | int | str):
                fields[f"[{i}].extra.{name}"] = (
                    fingerprint(value) if torch.is_tensor(value) else repr(value)
                )
        for j, g in enumerate(batch.generator):
            fields[f"[{i}].generator[{j}].state"] = fingerprint(g.get_state())


def run(
    env: Any,
    pipeline_cls: type,
    latent_stage: Any,
    sa: Any,
    reqs: list[Any],
    *,
    text_dtype: torch.dtype,
    before_latents: Callable[[Any], None] | None = None,
    grouped: bool = False,
    between: tuple[Any, ...] = (),
) -> dict[str, Any]:
    """`reqs` (one, or the outputs of one prompt run as a group) through the plugin's entry
    hook, upstream's input validation, a stand-in text encoder (embeddings of `text_dtype`),
    upstream's stages `between` (in the pipeline's stage list too) and upstream's latent
    stage; every compared field (name -> fingerprint)."""
    fields: dict[str, Any] = {}
    pipeline = object.__new__(pipeline_cls)  # the pipeline class, no weights
    pipeline._stages = [env.InputValidationStage(), *between, latent_stage]

    def front(batch: Any) -> Any:
        batch = pipeline._stages[0](batch, sa)
        batch.prompt_embeds = [torch.zeros(1, 4, 8, dtype=text_dtype)]  # the text encoder
        for stage in between:
            batch = stage(batch, sa)
        if before_latents is not None:
            before_latents(batch)
        return batch

    def one(_pipeline: Any, batch: Any, _sa: Any) -> Any:
        batch = latent_stage(front(batch), sa)
        _collect([batch], fields)
        return batch

    def group(_pipeline: Any, batches: list[Any], _sa: Any) -> Any:
        batches = latent_stage.run_grouped_requests([front(b) for b in batches], sa)
        _collect(batches, fields)
        return batches

    if grouped:
        plugin.around_forward_batch(group, pipeline, reqs, sa)
    else:
        (req,) = reqs
        plugin.around_forward(one, pipeline, req, sa)
    return fields


def same(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Names of fields that differ in anything (bytes included); [] when all are identical."""
    differ = sorted(set(a) ^ set(b))
    for name in sorted(set(a) & set(b)):
        fa, fb = a[name], b[name]
        if isinstance(fa, str) or isinstance(fb, str):
            if fa != fb:
                differ.append(name)
        elif fa[:4] != fb[:4] or not torch.equal(fa[4], fb[4]):
            differ.append(name)
    return differ


@contextlib.contextmanager
def recorded() -> Iterator[SimpleNamespace]:
    """Every prepared draw `(label, thread)` and every planned batch's `(kind, served,
    planned)` while the block runs."""
    seen = SimpleNamespace(draws=[], serves=[])

    def draw(label: str, _key: Any, thread: str, _tensor: torch.Tensor) -> None:
        seen.draws.append((label, thread))

    def serve(kind: str, served: int, planned: int) -> None:
        seen.serves.append((kind, served, planned))

    latents_ahead.draw_observers.append(draw)
    latents_ahead.serve_observers.append(serve)
    try:
        yield seen
    finally:
        latents_ahead.draw_observers.remove(draw)
        latents_ahead.serve_observers.remove(serve)


def both_arms(
    monkeypatch: Any, arm: Callable[[], dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any], SimpleNamespace, bool]:
    """`arm()` with the plugin off, then on (global RNG state restored between, and compared:
    True when both arms left it where it started)."""
    start = torch.get_rng_state()
    monkeypatch.setenv(plugin.ENABLE_ENV, "0")
    off = arm()
    rng_off = torch.get_rng_state()
    torch.set_rng_state(start)
    monkeypatch.setenv(plugin.ENABLE_ENV, "1")
    with recorded() as seen:
        on = arm()
    rng_on = torch.get_rng_state()
    untouched = torch.equal(rng_on, rng_off) and torch.equal(rng_on, start)
    return off, on, seen, untouched


def load_env(h3: Any) -> SimpleNamespace:
    """Upstream's modules the latents tests use (the plugin is loaded by `h3`'s fixture, through
    SGLang's own loader)."""
    from sglang.multimodal_gen.configs.pipeline_configs.hunyuan import HunyuanConfig
    from sglang.multimodal_gen.configs.pipeline_configs.ltx_2 import LTX2PipelineConfig
    from sglang.multimodal_gen.configs.pipeline_configs.wan import WanT2V480PConfig
    from sglang.multimodal_gen.configs.sample.ltx_2 import LTX2SamplingParams
    from sglang.multimodal_gen.configs.sample.sampling_params import SamplingParams
    from sglang.multimodal_gen.runtime.entrypoints.utils import expand_request_outputs
    from sglang.multimodal_gen.runtime.pipelines.hunyuan_pipeline import HunyuanVideoPipeline
    from sglang.multimodal_gen.runtime.pipelines.ltx_2_pipeline import (
        LTX2Pipeline,
        LTX2TwoStageHQPipeline,
        LTX2TwoStagePipeline,
    )
    from sglang.multimodal_gen.runtime.pipelines.wan_pipeline import WanPipeline
    from sglang.multimodal_gen.runtime.pipelines_core.stages.input_validation import (
        InputValidationStage,
    )
    from sglang.multimodal_gen.runtime.pipelines_core.stages.latent_preparation import (
        LatentPreparationStage,
    )
    from sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.ltx_2.latent_preparation_av import (  # noqa: E501
        LTX2AVLatentPreparationStage,
    )
    from sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.ltx_2.upsampling import (  # noqa: E501
        LTX2HalveResolutionStage,
    )

    return SimpleNamespace(
        h3=h3,
        Req=h3.Req,
        SamplingParams=SamplingParams,
        LTX2SamplingParams=LTX2SamplingParams,
        expand=expand_request_outputs,
        InputValidationStage=InputValidationStage,
        LatentStage=LatentPreparationStage,
        LTX2LatentStage=LTX2AVLatentPreparationStage,
        WanPipeline=WanPipeline,
        HunyuanVideoPipeline=HunyuanVideoPipeline,
        LTX2Pipeline=LTX2Pipeline,
        LTX2TwoStagePipeline=LTX2TwoStagePipeline,
        LTX2TwoStageHQPipeline=LTX2TwoStageHQPipeline,
        LTX2HalveStage=LTX2HalveResolutionStage,
        WanConfig=WanT2V480PConfig,
        HunyuanConfig=HunyuanConfig,
        LTX2Config=LTX2PipelineConfig,
    )


@contextlib.contextmanager
def changed_digest(
    env: Any, monkeypatch: Any, caplog: Any, key: str
) -> Iterator[tuple[list[str], list[str]]]:
    """The installed code of `key` (a `reviewed.REVIEWED` key) made to differ from the reviewed
    code, the plugin registered twice (as two loads in one process would): yields the WARNING
    and the INFO lines it logged. Afterwards SGLang's hook registry, `monkeypatch` and the
    support cache are as before."""
    monkeypatch.setitem(reviewed.REVIEWED, key, {"000000000000": ("0.5.23",)})
    monkeypatch.setattr(plugin, "_said", set())
    registry = env.h3.plugins.HookRegistry
    hooks_before = copy.copy(registry._hooks)
    support.reset()
    try:
        with caplog.at_level(logging.INFO, logger="prenoise.sglang"):
            plugin.register()
            plugin.register()
        lines = [(r.levelno, r.getMessage()) for r in caplog.records]
        yield (
            [m for level, m in lines if level == logging.WARNING],
            [m for level, m in lines if level == logging.INFO],
        )
    finally:
        registry._hooks.clear()
        registry._hooks.update({t: list(h) for t, h in hooks_before.items()})
        monkeypatch.undo()
        support.reset()
