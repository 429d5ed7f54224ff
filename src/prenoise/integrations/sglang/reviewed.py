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
"""

from __future__ import annotations

__all__ = ["H3_CONDITIONS_PATH", "H3_INITIAL_PATH", "PATHS", "RELEASES", "REVIEWED"]

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

H3_INITIAL_PATH = "MiniMax-H3 initial noise prepared ahead"
H3_CONDITIONS_PATH = "MiniMax-H3 visual-condition noise prepared ahead"
PATHS: dict[str, tuple[str, ...]] = {
    H3_INITIAL_PATH: _INITIAL_KEYS,
    H3_CONDITIONS_PATH: _INITIAL_KEYS + tuple(_CONDITIONS),
}
"""Path -> the keys of `REVIEWED` it relies on (all of them must be reviewed code)."""
