"""What SGLang's `LTX2AVLatentPreparationStage` will draw for an LTX-2 (one-stage) request.

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
predicted as the precision upstream loads the `connectors` in (or the given embeddings').
Only `LTX2Pipeline` is prepared: the two-stage pipelines halve the resolution before stage 1 and
re-seed stage-2 generators in `LTX2AVDenoisingStage` (`_reset_stage2_generators`, a renoise
generator that first burns the stage-1 draws): those draws stay upstream's. A request whose
duration head changes `num_frames` (`auto_duration`) gets another key: upstream draws.
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
    for `batch`, in call order; `NotPredicted` when they cannot be told now."""
    from sglang.multimodal_gen.configs.pipeline_configs.ltx_2 import is_ltx23_native_variant
    from sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.ltx_2.latent_preparation_av import (  # noqa: E501
        LTX2AVLatentPreparationStage,
    )
    from sglang.multimodal_gen.runtime.server_args import is_ltx2_two_stage_pipeline_name

    stage = latent_stage(pipeline, LTX2AVLatentPreparationStage)
    config = server_args.pipeline_config
    native = is_ltx23_native_variant(config.vae_config.arch_config)
    if native and is_ltx2_two_stage_pipeline_name(server_args.pipeline_class_name):
        raise NotPredicted("a two-stage LTX-2.3 pipeline name")
    dtype = prompt_dtype(batch, server_args, "connectors")
    batch_size = batch.batch_size
    calls = []
    if getattr(batch, "latents", None) is None:
        shape = config.prepare_latent_shape(
            batch, batch_size, stage.adjust_video_length(batch, server_args)
        )
        if native:
            shape = stage._packed_video_latent_shape(shape, config)
        calls.append(RandnCall("initial_video_latents", tuple(shape), dtype))
    try:
        generate_audio = batch.generate_audio
    except AttributeError:
        generate_audio = True
    if generate_audio and getattr(batch, "audio_latents", None) is None:
        shape = config.prepare_audio_latent_shape(batch, batch_size, batch.num_frames)
        if native:
            shape = stage._packed_audio_latent_shape(shape)
        calls.append(RandnCall("initial_audio_latents", tuple(shape), dtype))
    return tuple(calls)
