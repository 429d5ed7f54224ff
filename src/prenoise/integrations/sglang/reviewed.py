"""The reviewed SGLang code: the source digest of every function the plugin relies on.

Keyed `"module:qualname"` -> {digest: the releases whose source has it}; digests are
`prenoise.guards.source_digests` digests (a function's `ast.unparse` without its docstring and
return annotation; a class digested whole). `support` computes the installed digests from the
source files, importing nothing, and runs a path only where every function it lists has a
reviewed digest: a changed, new or missing function runs upstream's code untouched, named in
one WARNING line per process.

What each key is relied on for (read in the 0.5.23 wheel):

- `ComposedPipelineBase.forward` / `forward_batch`: wrapped (AROUND hooks); each runs every
  stage of one request (or a group) in the calling thread, `forward_batch` with one request
  calls `forward`.
- `MiniMaxH3LatentPreparationStage` (whole class): `_prepare_denoise_state_from_plan` is
  wrapped; it returns at once when `batch.extra["minimax_h3_denoise_state"]` is set, else it
  draws the initial noise prenoise reproduces (video `randn(1, 24, T, H/16, W/16)` on a CPU
  generator seeded with the plan's seed (42 when None), patchified to rows `[T*H/32*W/32, 96]`;
  audio `randn(2*A, 32)` on a second generator seeded the same) and stores the state dict.
- `minimax_h3_patchify_video_latent`: the row layout of the video noise.
- `minimax_h3_plan_from_batch` / `minimax_h3_resolve_plan`: how the plan the stage receives is
  found or resolved (read at request entry to predict the draws; the served draw is still
  checked against the plan the stage is given).

Visual-condition noise (in addition to all of the above, which it rides on):

- `minimax_h3_imgvid_cond_noise_aug_rows`: wrapped; per condition a fresh CPU generator
  seeded `seed`, `randn(1, 24, T + n, h, w)[:, :, :t]`, patchified, mixed `t * clean +
  (1 - t) * noise` (the arithmetic `h3_conditions.mix` performs on the served noise).
- `MiniMaxH3DenoisingStage._run_full_loop`: wrapped (names the request of the call); calls
  `_apply_condition_noise_aug` once per request, before the loop.
- `_apply_condition_noise_aug`, `_imgvid_condition_shapes`, `_assemble_condition_rows`,
  `_ref2va_ordered_blocks_and_rows`, `minimax_h3_condition_noise_aug`: the seed (plan, else
  sampling, else 42), the level, the conditions' order (keyframes, then references in plan
  order) and shapes the call is made with — what `h3_conditions.predict` reads in advance.
- `MiniMaxH3VisualEncodingStage`, `minimax_h3_prepared_keyframes`,
  `minimax_h3_prepared_reference_image`, `_reference_video_target_frame_count`,
  `minimax_h3_video_latent_t`: the conditions' latent shapes (canvas / 16, resolved material
  size / 16, the target-capped reference-video frame count).

Rollout noise (`h3_rollout`; on top of the initial path's keys):

- `minimax_h3_rollout_update_video_target`: wrapped; at a stochastic step (`sde` / `cps`, a
  non-zero `rollout_noise_level`) it makes one `torch.randn(sample.shape, generator=generator,
  device=sample.device, dtype=torch.float32)` — the call `h3_rollout` answers — and none at
  others; another type raises after its draw.
- `_effective_sde_type`: which steps are stochastic (`expected_draws` calls it).
- `minimax_h3_denoise_loop`: calls the update once per step, `loop_step_index` 0, 1, ... over
  the video sigma schedule, with one generator.
- `MiniMaxH3DenoisingStage._run_full_loop`: wrapped (opens the loop's look-ahead for a rollout
  batch); makes that generator per loop (`torch.Generator(device)`, the request seed).
- `_resolve_full_loop_context`: the schedule is `batch.extra["minimax_h3_sigmas"]["video"]`;
  the denoise state's `initial_video_rows` are the layout's video target rows (the first
  draw's shape, prepared when the loop opens, with `_run_full_loop`'s seed: the sampling
  seed, its first entry for a list).
- `CpuPlatform.get_local_torch_device`: the CPU platform's loop device (a CPU generator).

Named noise streams (every key above, plus): `minimax_h3_audio_cond_noise_aug_rows`, wrapped to
draw in the stream (fresh CPU generators seeded `seed + 1`, only below a level of 1.0);
`minimax_h3_encode_keyframe_cond_rows` (keyframes and reference images) and
`minimax_h3_encode_reference_video_rows`, wrapped to draw in the stream: each samples the VAE
posterior inside `minimax_h3_scoped_encode_rng` (`fork_rng`, the default CPU generator seeded
42, restored after), the draw being `DiagonalGaussianDistribution.sample`'s
`torch.randn(mean.shape, generator=None)` on the CPU, then moved to the VAE's device. Those two
are not listed (each is a wrapper at run time, a context manager and a `torch.compiler.disable`
function, which the live check cannot verify) and need not be: the stream's mode serves
whatever normal draw the encode makes from whatever generator state it finds, bit for bit and
consuming as torch does, and a draw it cannot serve raises.

Noise records' `group` (`h3_record`, only while `PRENOISE_NOISE_RECORD` is set; its own path:
off, records carry no group): `get_replica_group` (the ranks that share a request batch: every
axis but data parallel; the world group when SGLang made no replica group),
`world_group_is_initialized`, `GroupCoordinator.__init__` (`ranks`: the group's global ranks).

Wan / HunyuanVideo and LTX-2 initial noise (`latents_ahead`; none of the MiniMax-H3 keys):

- `ComposedPipelineBase.forward` / `forward_batch` (wrapped: the request entry) and `stages`
  (where the pipeline's latent stage is found).
- `InputValidationStage.forward` (wrapped: the draws are submitted when it returns) and
  `_generate_seeds` (it makes `batch.generator`, CPU only for `generator_device="cpu"`).
- `LatentPreparationStage` (whole class): `forward` / `_prepare_grouped_latents` are wrapped and
  draw through `randn_tensor` at the shape and dtype `standard_latents.predict` computes.
- diffusers' `randn_tensor` (0.37.0, sglang 0.5.23's pin): the `torch.randn` calls it makes per
  generator, the calls answered.
- `Req.batch_size`, `resolve_component_precision`: the batch and the predicted dtype.
- Wan / HunyuanVideo: `create_pipeline_stages` of both (nothing draws from the generators
  before the latent stage), `PipelineConfig.prepare_latent_shape` and `get_latent_dtype`.
- LTX-2: `LTX2AVLatentPreparationStage` (whole class: video then audio, the packed LTX-2.3
  shapes), `LTX2Pipeline.create_pipeline_stages`, `_add_ltx2_front_stages`,
  `_add_ltx2_stage1_generation_stages`, `LTX2PipelineConfig.prepare_latent_shape` and
  `prepare_audio_latent_shape`, `is_ltx23_native_variant`, `is_ltx2_two_stage_pipeline_name`
  and `PipelineConfig.get_latent_dtype` (called as upstream's `_get_latent_dtype` calls them:
  LTX-2.3's latent dtype under a two-stage pipeline name).
- LTX-2 two-stage (its own path, on the LTX-2 keys but `LTX2Pipeline.create_pipeline_stages`):
  `LTX2TwoStagePipeline.create_pipeline_stages` (the front stages, then
  `LTX2HalveResolutionStage`, a LoRA switch, then stage 1's stages: the one latent stage),
  `LTX2TwoStageHQPipeline` (whole class: it makes no stages of its own),
  `LTX2HalveResolutionStage` (whole class: refuses a resolution not a multiple of
  `max(64, 2 * vae_scale_factor)`, else halves height and width with `//`).

Named noise streams for Wan / HunyuanVideo / LTX-2 (`latents_streams`; one path per latents
path, on that path's keys): the wrapped draw sites (`FlowMatchEulerDiscreteScheduler._transition`,
`LTX2DenoisingStage._randn_like_with_batch_generators` / `_ltx2_res2s_new_noise`,
`LTX2RefinementStage` with its two stage-2 draw functions, `LTX2ImageEncodingStage._vae_encode`,
`LTX2AVDecodingStage.forward`, inside their classes' digests), the schedulers' step functions
(`FlowMatchEulerDiscreteScheduler.step`, `FlowUniPCMultistepScheduler.step` and the update
functions it calls: no draw but `_transition`'s), LTX-2's `LTX2FlowMatchScheduler`,
`rollout_step_kwargs` (empty for a serving request), and every stage class these pipelines run
after the latent stage, digested whole (no draw but the wrapped ones); `LIVE_UNCHECKED` lists the
two whole classes the live check cannot verify.
"""

from __future__ import annotations

__all__ = [
    "H3_CONDITIONS_PATH",
    "H3_INITIAL_PATH",
    "H3_RECORD_PATH",
    "H3_ROLLOUT_PATH",
    "H3_STREAMS_PATH",
    "LIVE_UNCHECKED",
    "LTX2_LATENTS_PATH",
    "LTX2_STREAMS_PATH",
    "LTX2_TWO_STAGE_LATENTS_PATH",
    "LTX2_TWO_STAGE_STREAMS_PATH",
    "PATHS",
    "RELEASES",
    "REVIEWED",
    "STANDARD_LATENTS_PATH",
    "STANDARD_STREAMS_PATH",
]

RELEASES = ("0.5.23",)
"""The sglang releases every digest below was reviewed on."""

_V0523 = ("0.5.23",)
_BASE = "sglang.multimodal_gen.runtime.pipelines_core.composed_pipeline_base:ComposedPipelineBase."
_H3 = "sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3."

REVIEWED: dict[str, dict[str, tuple[str, ...]]] = {
    _BASE + "forward": {"f4f107fc60cb": _V0523},
    _BASE + "forward_batch": {"a59744962125": _V0523},
    _H3 + "stages.latent_preparation:MiniMaxH3LatentPreparationStage": {"d2d966974010": _V0523},
    _H3 + "packed_tokens:minimax_h3_patchify_video_latent": {"45147f3282aa": _V0523},
    _H3 + "resolved_plan:minimax_h3_plan_from_batch": {"eab97afc35a1": _V0523},
    _H3 + "resolved_plan:minimax_h3_resolve_plan": {"e03fe8afcfa1": _V0523},
}
_INITIAL_KEYS = tuple(REVIEWED)

_CONDITIONS: dict[str, dict[str, tuple[str, ...]]] = {
    _H3 + "condition_noise:minimax_h3_imgvid_cond_noise_aug_rows": {"9df586b4bd56": _V0523},
    _H3 + "stages.denoising:MiniMaxH3DenoisingStage._run_full_loop": {"a9ac851615a6": _V0523},
    _H3 + "stages.denoising:_apply_condition_noise_aug": {"c11ac50ef289": _V0523},
    _H3 + "stages.denoising:_imgvid_condition_shapes": {"cd131eae80e0": _V0523},
    _H3 + "stages.denoising:_assemble_condition_rows": {"e031bfef290a": _V0523},
    _H3 + "stages.denoising:_ref2va_ordered_blocks_and_rows": {"b19a5ebcc4dc": _V0523},
    _H3 + "stages.denoising:minimax_h3_condition_noise_aug": {"25ae56ba01be": _V0523},
    _H3 + "stages.visual_encoding:MiniMaxH3VisualEncodingStage": {"93c4afe054c5": _V0523},
    _H3 + "canvas:minimax_h3_prepared_keyframes": {"28cc5de5ff23": _V0523},
    _H3 + "reference_encoding:minimax_h3_prepared_reference_image": {"f1528eb92baf": _V0523},
    _H3 + "reference_encoding:_reference_video_target_frame_count": {"62bd9d23a109": _V0523},
    _H3 + "time_request:minimax_h3_video_latent_t": {"d9a0be11ca26": _V0523},
}
REVIEWED.update(_CONDITIONS)

_RUN_FULL_LOOP = _H3 + "stages.denoising:MiniMaxH3DenoisingStage._run_full_loop"
_ROLLOUT: dict[str, dict[str, tuple[str, ...]]] = {
    _H3 + "minimax_h3_rollout:minimax_h3_rollout_update_video_target": {"ad2b6cb9768b": _V0523},
    _H3 + "minimax_h3_rollout:_effective_sde_type": {"29cb1358389b": _V0523},
    _H3 + "denoise_loop:minimax_h3_denoise_loop": {"9320add03cf8": _V0523},
    _H3 + "stages.denoising:_resolve_full_loop_context": {"bafab2a7309e": _V0523},
    # the loop's device (the first draw is prepared only where it is the CPU; a wrong answer
    # costs a wasted draw, never a bit: the served draw is checked against the generator)
    "sglang.multimodal_gen.runtime.platforms.cpu:CpuPlatform.get_local_torch_device": {
        "c056ed6bdb32": _V0523
    },
}
REVIEWED.update(_ROLLOUT)
_STREAMS: dict[str, dict[str, tuple[str, ...]]] = {
    _H3 + "condition_noise:minimax_h3_audio_cond_noise_aug_rows": {"3d8241e9a996": _V0523},
    # the VAE posterior samples of keyframes / reference images and reference videos
    _H3 + "keyframe_encoding:minimax_h3_encode_keyframe_cond_rows": {"68b4c7d85f75": _V0523},
    _H3 + "reference_encoding:minimax_h3_encode_reference_video_rows": {"499548b5911d": _V0523},
}
REVIEWED.update(_STREAMS)
# The noise records' `group` (`h3_record.replica_group`; read only while recording).
_PS = "sglang.multimodal_gen.runtime.distributed."
_RECORD: dict[str, dict[str, tuple[str, ...]]] = {
    _PS + "parallel_state:get_replica_group": {"0f74a0667229": _V0523},
    _PS + "parallel_state:world_group_is_initialized": {"71112a452a20": _V0523},
    _PS + "group_coordinator:GroupCoordinator.__init__": {"9264422bc08d": _V0523},
}
REVIEWED.update(_RECORD)

# Wan / HunyuanVideo / LTX-2 initial noise (`latents_ahead`): none of the H3 keys above.
_RT = "sglang.multimodal_gen.runtime."
_CFG = "sglang.multimodal_gen.configs.pipeline_configs."
_LATENTS_COMMON: dict[str, dict[str, tuple[str, ...]]] = {
    _RT + "pipelines_core.stages.input_validation:InputValidationStage.forward": {
        "308d8737efe7": _V0523
    },
    _RT + "pipelines_core.stages.input_validation:InputValidationStage._generate_seeds": {
        "c17d1b35a4c0": _V0523
    },
    _RT + "pipelines_core.stages.latent_preparation:LatentPreparationStage": {
        "fa86a50b1792": _V0523
    },
    "diffusers.utils.torch_utils:randn_tensor": {"e84a218275ed": _V0523},  # diffusers 0.37.0
    _RT + "pipelines_core.schedule_batch:Req.batch_size": {"6f22ee29b214": _V0523},
    _RT + "utils.precision:resolve_component_precision": {"2146342137e0": _V0523},
    _BASE + "stages": {"01294bdaa3b7": _V0523},
}
_STANDARD_LATENTS: dict[str, dict[str, tuple[str, ...]]] = {
    _RT + "pipelines.wan_pipeline:WanPipeline.create_pipeline_stages": {"3c42e4810d55": _V0523},
    _RT + "pipelines.hunyuan_pipeline:HunyuanVideoPipeline.create_pipeline_stages": {
        "cdbff177574e": _V0523
    },
    _CFG + "base:PipelineConfig.prepare_latent_shape": {"ea968e6adddf": _V0523},
    _CFG + "base:PipelineConfig.get_latent_dtype": {"06ae0f1e9ff0": _V0523},
}
_LTX2_LATENTS: dict[str, dict[str, tuple[str, ...]]] = {
    _RT + "pipelines_core.stages.model_specific_stages.ltx_2.latent_preparation_av:"
    "LTX2AVLatentPreparationStage": {"a5b09aa1ba02": _V0523},
    _RT + "pipelines.ltx_2_pipeline:LTX2Pipeline.create_pipeline_stages": {"9dd1be8bc84c": _V0523},
    _RT + "pipelines.ltx_2_pipeline:_add_ltx2_front_stages": {"8040a867bc7b": _V0523},
    _RT + "pipelines.ltx_2_pipeline:_add_ltx2_stage1_generation_stages": {"728e5d95f874": _V0523},
    _CFG + "ltx_2:LTX2PipelineConfig.prepare_latent_shape": {"887a90f788c4": _V0523},
    _CFG + "ltx_2:LTX2PipelineConfig.prepare_audio_latent_shape": {"6d2f519f4b61": _V0523},
    _CFG + "ltx_2:is_ltx23_native_variant": {"1dade447d1e9": _V0523},
    _RT + "server_args.server_args:is_ltx2_two_stage_pipeline_name": {"99af50b2c0bf": _V0523},
    _CFG + "base:PipelineConfig.get_latent_dtype": {"06ae0f1e9ff0": _V0523},
}
_LTX2_STAGES = _RT + "pipelines_core.stages.model_specific_stages.ltx_2."
_LTX2_ONE_STAGE = _RT + "pipelines.ltx_2_pipeline:LTX2Pipeline.create_pipeline_stages"
_LTX2_TWO_STAGE_LATENTS: dict[str, dict[str, tuple[str, ...]]] = {
    _RT + "pipelines.ltx_2_pipeline:LTX2TwoStagePipeline.create_pipeline_stages": {
        "8e5e99bedb08": _V0523
    },
    _RT + "pipelines.ltx_2_pipeline:LTX2TwoStageHQPipeline": {"6a4b4b1edd76": _V0523},
    _LTX2_STAGES + "upsampling:LTX2HalveResolutionStage": {"74b711a291e3": _V0523},
}
REVIEWED.update(_LATENTS_COMMON)
REVIEWED.update(_STANDARD_LATENTS)
REVIEWED.update(_LTX2_LATENTS)
REVIEWED.update(_LTX2_TWO_STAGE_LATENTS)
# Named noise streams for Wan / HunyuanVideo / LTX-2 (`latents_streams`): every stage class the
# pipelines run after the latent stage that may draw, digested whole (a changed one may draw
# elsewhere: its pipelines' requests are then refused under a stream), and the wrapped sites.
_SCHED = _RT + "models.schedulers."
_STREAMS_COMMON: dict[str, dict[str, tuple[str, ...]]] = {
    _SCHED + "scheduling_flow_match_euler_discrete:FlowMatchEulerDiscreteScheduler.step": {
        "78adec91a092": _V0523
    },
    _SCHED + "scheduling_flow_match_euler_discrete:FlowMatchEulerDiscreteScheduler._transition": {
        "1f4d84101e6a": _V0523
    },
    _SCHED + "scheduling_flow_unipc_multistep:FlowUniPCMultistepScheduler.step": {
        "885948e908c5": _V0523
    },
    _SCHED + "scheduling_flow_unipc_multistep:FlowUniPCMultistepScheduler.convert_model_output": {
        "ce271743574b": _V0523
    },
    _SCHED + "scheduling_flow_unipc_multistep:FlowUniPCMultistepScheduler."
    "multistep_uni_c_bh_update": {"8e9d23feeb3e": _V0523},
    _SCHED + "scheduling_flow_unipc_multistep:FlowUniPCMultistepScheduler."
    "multistep_uni_p_bh_update": {"c8bd261293b4": _V0523},
    _RT + "post_training.rollout_hooks:rollout_step_kwargs": {"edca40ef38e7": _V0523},
}
_STANDARD_STREAMS: dict[str, dict[str, tuple[str, ...]]] = {
    _RT + "pipelines_core.stages.denoising:DenoisingStage": {"127f51ca724f": _V0523},
    _RT + "pipelines_core.stages.denoising:DenoisingStage._prepare_denoising_loop": {
        "cc75ec5d1216": _V0523
    },
    _RT + "pipelines_core.stages.denoising:DenoisingStage._run_denoising_step": {
        "0c89f6d60f31": _V0523
    },
    _RT + "pipelines_core.stages.progressive_resolution.denoising:"
    "ProgressiveDenoisingStageRouter": {"3a7c852aed2d": _V0523},
    _RT + "pipelines_core.stages.progressive_resolution.denoising:is_progressive_resolution_mode": {
        "e55d76354700": _V0523
    },
    _BASE + "add_progressive_denoising_stage": {"20ec717ad068": _V0523},
    _BASE + "add_standard_denoising_stage": {"a21d26341e48": _V0523},
    _BASE + "add_standard_decoding_stage": {"5ded4a6300dc": _V0523},
    _RT + "pipelines_core.stages.decoding:DecodingStage": {"1c8184f9a0bb": _V0523},
    _RT + "pipelines_core.stages.text_encoding:TextEncodingStage": {"f0d4593bb2bd": _V0523},
    _RT + "pipelines_core.stages.timestep_preparation:TimestepPreparationStage": {
        "c87a73a0bd05": _V0523
    },
    _RT + "pipelines.wan_pipeline:WanPipeline.initialize_pipeline": {"2fe9b65a12c4": _V0523},
}
_LTX2_STREAMS: dict[str, dict[str, tuple[str, ...]]] = {
    _LTX2_STAGES + "denoising:LTX2DenoisingStage": {"2fbc03bacd41": _V0523},
    _LTX2_STAGES + "denoising:LTX2DenoisingStage._randn_like_with_batch_generators": {
        "7ee3504680c0": _V0523
    },
    _LTX2_STAGES + "denoising:LTX2DenoisingStage._ltx2_res2s_new_noise": {"fb7a6548a83f": _V0523},
    _LTX2_STAGES + "denoising_av:LTX2AVDenoisingStage": {"cb335d9d5e41": _V0523},
    _LTX2_STAGES + "decoding_av:LTX2AVDecodingStage": {"44d887f3ac66": _V0523},
    _LTX2_STAGES + "duration:LTX2DurationStage": {"e176522f7839": _V0523},
    _LTX2_STAGES + "text_connector:LTX2TextConnectorStage": {"d1b0065d629c": _V0523},
    _RT + "pipelines_core.stages.image_encoding:LTX2ImageEncodingStage": {"e519fab86a8a": _V0523},
    _RT + "pipelines_core.stages.text_encoding:TextEncodingStage": {"f0d4593bb2bd": _V0523},
    _RT + "pipelines.ltx_2_pipeline:LTX2SigmaPreparationStage": {"b04913efe3ad": _V0523},
    _RT + "pipelines.ltx_2_pipeline:_add_ltx2_decoding_stage": {"f0d2b1b4d406": _V0523},
    _RT + "pipelines.ltx_2_pipeline:_BaseLTX2Pipeline": {"a855568ffd70": _V0523},
    _RT + "pipelines.ltx_2_pipeline:LTX2FlowMatchScheduler": {"0b650f6fdaa0": _V0523},
}
_LTX2_TWO_STAGE_STREAMS: dict[str, dict[str, tuple[str, ...]]] = {
    _LTX2_STAGES + "denoising_av:LTX2RefinementStage": {"f7f114fe0c52": _V0523},
    _LTX2_STAGES + "upsampling:LTX2UpsampleStage": {"0a11bff9751d": _V0523},
}
for _table in (_STREAMS_COMMON, _STANDARD_STREAMS, _LTX2_STREAMS, _LTX2_TWO_STAGE_STREAMS):
    REVIEWED.update(_table)
LIVE_UNCHECKED = frozenset({
    _RT + "pipelines_core.stages.denoising:DenoisingStage",
    _LTX2_STAGES + "denoising:LTX2DenoisingStage",
})  # fmt: skip
"""Keys checked by their installed source digest only, not by the live check (`live`): whole
classes holding a method the live check cannot verify (an `lru_cache`, a `contextmanager`); the
methods of theirs that draw or call the step are listed as their own keys, and live-checked."""
_LATENT_ENTRY = (_BASE + "forward", _BASE + "forward_batch", *_LATENTS_COMMON)

H3_INITIAL_PATH = "MiniMax-H3 initial noise prepared ahead"
H3_CONDITIONS_PATH = "MiniMax-H3 visual-condition noise prepared ahead"
H3_ROLLOUT_PATH = "MiniMax-H3 rollout noise prepared ahead"
H3_STREAMS_PATH = "MiniMax-H3 named noise streams"
H3_RECORD_PATH = "MiniMax-H3 noise records' replica group"
STANDARD_LATENTS_PATH = "Wan/HunyuanVideo initial noise prepared ahead (CPU generator)"
LTX2_LATENTS_PATH = "LTX-2 initial noise prepared ahead"
LTX2_TWO_STAGE_LATENTS_PATH = "LTX-2 two-stage initial (stage-1) noise prepared ahead"
STANDARD_STREAMS_PATH = "Wan/HunyuanVideo named noise streams"
LTX2_STREAMS_PATH = "LTX-2 named noise streams"
LTX2_TWO_STAGE_STREAMS_PATH = "LTX-2 two-stage named noise streams"
_STANDARD_KEYS = (*_LATENT_ENTRY, *_STANDARD_LATENTS)
_LTX2_KEYS = (*_LATENT_ENTRY, *_LTX2_LATENTS)
_LTX2_TWO_STAGE_KEYS = (
    *_LATENT_ENTRY,
    *(k for k in _LTX2_LATENTS if k != _LTX2_ONE_STAGE),
    *_LTX2_TWO_STAGE_LATENTS,
)
PATHS: dict[str, tuple[str, ...]] = {
    H3_INITIAL_PATH: _INITIAL_KEYS,
    H3_CONDITIONS_PATH: _INITIAL_KEYS + tuple(_CONDITIONS),
    H3_ROLLOUT_PATH: (*_INITIAL_KEYS, _RUN_FULL_LOOP, *_ROLLOUT),
    H3_STREAMS_PATH: (*_INITIAL_KEYS, *_CONDITIONS, *_ROLLOUT, *_STREAMS),
    H3_RECORD_PATH: tuple(_RECORD),
    STANDARD_LATENTS_PATH: _STANDARD_KEYS,
    LTX2_LATENTS_PATH: _LTX2_KEYS,
    LTX2_TWO_STAGE_LATENTS_PATH: _LTX2_TWO_STAGE_KEYS,
    STANDARD_STREAMS_PATH: (*_STANDARD_KEYS, *_STREAMS_COMMON, *_STANDARD_STREAMS),
    LTX2_STREAMS_PATH: (*_LTX2_KEYS, *_STREAMS_COMMON, *_LTX2_STREAMS),
    LTX2_TWO_STAGE_STREAMS_PATH: (
        *_LTX2_TWO_STAGE_KEYS,
        *_STREAMS_COMMON,
        *_LTX2_STREAMS,
        *_LTX2_TWO_STAGE_STREAMS,
    ),
}
"""Path -> the keys of `REVIEWED` it relies on (all of them must be reviewed code)."""
