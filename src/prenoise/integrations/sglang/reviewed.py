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
"""

from __future__ import annotations

__all__ = ["H3_INITIAL_PATH", "PATHS", "RELEASES", "REVIEWED"]

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

H3_INITIAL_PATH = "MiniMax-H3 initial noise prepared ahead"
PATHS: dict[str, tuple[str, ...]] = {H3_INITIAL_PATH: tuple(REVIEWED)}
"""Path -> the keys of `REVIEWED` it relies on (all of them must be reviewed code)."""
