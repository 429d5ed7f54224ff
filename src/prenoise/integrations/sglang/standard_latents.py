"""What SGLang's shared `LatentPreparationStage` will draw for a Wan or HunyuanVideo request.

SGLang 0.5.23's `LatentPreparationStage.forward` (the stage `add_standard_latent_preparation_
stage` adds to `WanPipeline` and `HunyuanVideoPipeline`) makes, for a request without given
latents, one `randn_tensor(spec.shape, generator=batch.generator, device=..., dtype=spec.dtype)`
with `spec.shape = pipeline_config.prepare_latent_shape(batch, batch.batch_size,
self.get_forward_latent_num_frames(batch, server_args))` and `spec.dtype = pipeline_config.
get_latent_dtype(batch.prompt_embeds[0].dtype)`; the grouped path (`_prepare_grouped_latents`,
the outputs of one prompt run as a group) makes the same call per request with a batch of 1.

`predict` reads that call at the end of the request's input validation, from the pipeline's own
latent stage instance and upstream's own functions (`get_forward_latent_num_frames`,
`prepare_latent_shape`, `get_latent_dtype`, `Req.batch_size`). The one thing not yet known then
is the dtype of the text encoder's output: it is predicted as the dtype upstream loads the first
text encoder in (`resolve_component_precision(server_args, "text_encoder")`), or the given
`prompt_embeds`' dtype. A prediction is never trusted: the call is served only on an equal key
and generator state (`latents_ahead`); a wrong one costs the overlap, never a bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["NotPredicted", "RandnCall", "latent_stage", "predict", "prompt_dtype"]

_LATENT_MODULE = "sglang.multimodal_gen.runtime.pipelines_core.stages.latent_preparation"


class NotPredicted(Exception):
    """The request's draws are not predicted (the reason); upstream draws them."""


@dataclass(frozen=True)
class RandnCall:
    """One `randn_tensor(shape, generator=the request's generators, dtype=dtype)` call."""

    label: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    def __post_init__(self) -> None:
        shape = tuple(int(s) for s in self.shape)
        if any(s < 0 for s in shape) or not isinstance(self.dtype, torch.dtype):
            raise NotPredicted(f"{self.label}: shape {shape} dtype {self.dtype!r}")
        object.__setattr__(self, "shape", shape)


def latent_stage(pipeline: Any, cls: type) -> Any:
    """The pipeline's latent stage: its one stage of exactly class `cls`."""
    stages = [s for s in getattr(pipeline, "stages", ()) if type(s) is cls]
    if len(stages) != 1:
        raise NotPredicted(f"{len(stages)} stages of class {cls.__name__} in the pipeline")
    return stages[0]


def prompt_dtype(batch: Any, server_args: Any, component: str) -> torch.dtype:
    """The dtype `batch.prompt_embeds[0]` will have: the given embeddings', else the precision
    upstream loads `component` in (`resolve_component_precision`)."""
    from sglang.multimodal_gen.runtime.utils.precision import resolve_component_precision

    embeds = getattr(batch, "prompt_embeds", None)
    if isinstance(embeds, list) and embeds and torch.is_tensor(embeds[0]):
        return embeds[0].dtype
    dtype = resolve_component_precision(server_args, component)
    if not isinstance(dtype, torch.dtype):
        raise NotPredicted(f"no precision for {component}")
    return dtype


def predict(pipeline: Any, batch: Any, server_args: Any) -> tuple[RandnCall, ...]:
    """The `randn_tensor` call(s) `LatentPreparationStage` will make for `batch` (after its
    input validation); `NotPredicted` when it makes none or they cannot be told now."""
    from sglang.multimodal_gen.runtime.pipelines_core.stages.latent_preparation import (
        LatentPreparationStage,
    )

    stage = latent_stage(pipeline, LatentPreparationStage)
    if getattr(batch, "latents", None) is not None:
        raise NotPredicted("the request gives its latents")
    config = server_args.pipeline_config
    num_frames = stage.get_forward_latent_num_frames(batch, server_args)
    shape = config.prepare_latent_shape(batch, batch.batch_size, num_frames)
    dtype = config.get_latent_dtype(prompt_dtype(batch, server_args, "text_encoder"))
    return (RandnCall("initial_latents", tuple(shape), dtype),)
