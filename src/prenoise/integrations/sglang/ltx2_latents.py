"""What SGLang's `LTX2AVLatentPreparationStage` will draw for an LTX-2 request (stage 1).

SGLang 0.5.23's `LTX2PipelineConfig` sets `generator_device = "cpu"`, so an LTX-2 request's
generators are CPU generators by default. `LTX2AVLatentPreparationStage.forward` draws, from the
same request generators, first the video noise, then (when `batch.generate_audio`, default
True) the audio noise, each one `randn_tensor(shape, generator=batch.generator, ...)`:

- LTX-2 (`vae_config.arch_config.ltx_variant` other than `"ltx_2_3"`): the video by the shared
  `LatentPreparationStage.forward` (`prepare_latent_shape(batch, batch_size,
  adjust_video_length(...))`), the audio at `prepare_audio_latent_shape(batch, batch_size,
  batch.num_frames)`; both in the stage's `_get_latent_dtype`: the prompt embeddings' dtype.
- LTX-2.3 (`is_ltx23_native_variant`): the same shapes in packed token space
  (`_packed_video_latent_shape`, `_packed_audio_latent_shape`, the stage's own functions).

`predict` computes those calls with upstream's functions at the end of the request's input
validation. The prompt embeddings come out of the text connector stage, so their dtype is
predicted as the precision upstream loads the `connectors` in (or the given embeddings'); under
a two-stage pipeline name (`is_ltx2_two_stage_pipeline_name`) LTX-2.3's latent dtype is
`pipeline_config.get_latent_dtype` of it, as `_get_latent_dtype` says.

The two-stage pipelines (`LTX2TwoStagePipeline`, `LTX2TwoStageHQPipeline`) run
`LTX2HalveResolutionStage` between the front stages and stage 1: it refuses a height or width
that is not a multiple of `max(64, 2 * vae_scale_factor)`, else sets `height // 2`, `width // 2`.
Their stage-1 draws are those above at that resolution: `predict` applies each halving stage
that precedes the latent stage in the pipeline's own stage list to a read-only view of the
request, and upstream's shape functions read the view (nothing is set on the request). Their
stage-2 draws stay upstream's: `LTX2RefinementStage.forward` makes new generators (LTX-2:
`_reset_stage2_generators`, fresh generators on the old ones' device seeded from `batch.seeds`;
LTX-2.3: `_build_stage2_renoise_generator`, a generator on the upsampled latents' device, the
GPU in a served deployment, that first burns the stage-1 shapes) and draws at the upsampled
latents' shape and dtype. A request whose duration head changes `num_frames` (`auto_duration`)
gets another key: upstream draws.
"""

from __future__ import annotations

from typing import Any

from prenoise.integrations.sglang.standard_latents import (
    NotPredicted,
    RandnCall,
    latent_stage,
    prompt_dtype,
)

__all__ = ["predict"]


def predict(pipeline: Any, batch: Any, server_args: Any) -> tuple[RandnCall, ...]:
    """The video (then audio) `randn_tensor` calls of `LTX2AVLatentPreparationStage.forward`
    for `batch`, in call order (at stage 1's resolution); `NotPredicted` when they cannot be
    told now."""
    from sglang.multimodal_gen.configs.pipeline_configs.ltx_2 import is_ltx23_native_variant
    from sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.ltx_2.latent_preparation_av import (  # noqa: E501
        LTX2AVLatentPreparationStage,
    )
    from sglang.multimodal_gen.runtime.server_args import is_ltx2_two_stage_pipeline_name

    stage = latent_stage(pipeline, LTX2AVLatentPreparationStage)
    config = server_args.pipeline_config
    native = is_ltx23_native_variant(config.vae_config.arch_config)
    dtype = prompt_dtype(batch, server_args, "connectors")
    if native and is_ltx2_two_stage_pipeline_name(server_args.pipeline_class_name):
        dtype = config.get_latent_dtype(dtype)
    view = _stage1_view(pipeline, stage, batch, server_args)
    batch_size = batch.batch_size
    calls = []
    if getattr(batch, "latents", None) is None:
        shape = config.prepare_latent_shape(
            view, batch_size, stage.adjust_video_length(view, server_args)
        )
        if native:
            shape = stage._packed_video_latent_shape(shape, config)
        calls.append(RandnCall("initial_video_latents", tuple(shape), dtype))
    try:
        generate_audio = batch.generate_audio
    except AttributeError:
        generate_audio = True
    if generate_audio and getattr(batch, "audio_latents", None) is None:
        shape = config.prepare_audio_latent_shape(view, batch_size, view.num_frames)
        if native:
            shape = stage._packed_audio_latent_shape(shape)
        calls.append(RandnCall("initial_audio_latents", tuple(shape), dtype))
    return tuple(calls)


class _Resized:
    """`batch` as a later stage reads it after `height` / `width` were changed: those two
    answered here, every other attribute read from `batch` (nothing is ever set on it)."""

    def __init__(self, batch: Any, height: int, width: int) -> None:
        self._batch, self.height, self.width = batch, height, width

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)


def _stage1_view(pipeline: Any, stage: Any, batch: Any, server_args: Any) -> Any:
    """`batch` as the latent stage will see it: after every `LTX2HalveResolutionStage` of the
    pipeline that runs before it (none: `batch` itself)."""
    from sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.ltx_2.upsampling import (  # noqa: E501
        LTX2HalveResolutionStage,
    )

    stages = list(pipeline.stages)
    index = next(i for i, s in enumerate(stages) if s is stage)
    before = stages[:index]
    if any(isinstance(s, LTX2HalveResolutionStage) and type(s) is not LTX2HalveResolutionStage
           for s in before):  # fmt: skip
        raise NotPredicted("a subclass of LTX2HalveResolutionStage before the latent stage")
    halvings = sum(type(s) is LTX2HalveResolutionStage for s in before)
    if halvings == 0:
        return batch
    height, width = batch.height, batch.width
    if not (isinstance(height, int) and isinstance(width, int)):
        raise NotPredicted(f"height {height!r}, width {width!r}")
    vae_scale_factor = getattr(server_args.pipeline_config, "vae_scale_factor", 32)
    alignment = max(64, int(vae_scale_factor) * 2)
    for _ in range(halvings):  # LTX2HalveResolutionStage.forward's arithmetic
        if height % alignment != 0 or width % alignment != 0:
            raise NotPredicted(f"upstream refuses the two-stage resolution {height}x{width}")
        height, width = height // 2, width // 2
    return _Resized(batch, height, width)
