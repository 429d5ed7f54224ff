"""A Ref2VA continuation request's draws, window by window, predicted with upstream's own plan.

Upstream (`continuation.diffuse_continuation`, the same code on 0.30.0, 0.31.0rc1 and 0.32.0rc1)
runs `diffuse` once per window of `plan_continuation_windows(num_frames, window, overlap)`, every
window with the output's seed. Window k draws:

- the initial noise `_initial_noise(seed, latent_t=_video_t(frames_k), latent_h, latent_w,
  audio_t=audio_end_k - audio_start_k)` — windows of one length draw the same values;
- when the request has visual conditions, or from the second window on, the visual-condition
  noise of the request's condition shapes followed, from the second window on, by the latent
  guide `(_video_t(overlap), latent_h, latent_w)` (the previous window's tail).

`continuation_keys` gives each window's keys (`_initial_noise`'s and the condition call's) with
upstream's own functions (never a copy of their arithmetic); each prediction is used only after
the pipeline's actual arguments equal it.
"""

from __future__ import annotations

from typing import Any

from prenoise.integrations.vllm_omni.h3_keys import ConditionKey, InitialNoiseKey
from prenoise.ref2va.noise import LatentShape

__all__ = ["WindowKeys", "continuation_keys", "resolved_continuation"]

WindowKeys = tuple[InitialNoiseKey, ConditionKey | None]
"""One window's `_initial_noise` key and its condition call's (None: no condition draw)."""


def resolved_continuation(pipeline: Any, sampling: Any, task: str) -> tuple[int, int] | None:
    """`(window_frames, overlap_frames)` of a continuation request, None for a full one:
    upstream's own `resolve_continuation` on the request's arguments (it raises upstream's
    `OmniClientError` for a request upstream refuses)."""
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

    extra = getattr(sampling, "extra_args", None) or {}
    step_execution = bool(getattr(pipeline.od_config, "step_execution", False))
    resolved = upstream.resolve_continuation(extra, task=task, step_execution=step_execution)
    return None if resolved is None else (int(resolved[0]), int(resolved[1]))


def continuation_keys(
    seed: int,
    num_frames: int,
    window_frames: int,
    overlap_frames: int,
    latent_h: int,
    latent_w: int,
    condition_shapes: tuple[LatentShape, ...],
) -> tuple[WindowKeys, ...]:
    """Every window's keys for output `seed`, in upstream's order (`plan_continuation_windows`)."""
    from vllm_omni.diffusion.models.minimax_h3 import continuation

    windows = continuation.plan_continuation_windows(num_frames, window_frames, overlap_frames)
    keys: list[WindowKeys] = []
    for window in windows:
        shapes = condition_shapes
        if window.overlap:  # the previous window's latent tail, appended as one more condition
            guide = (int(continuation._video_t(window.overlap)), latent_h, latent_w)
            shapes = (*condition_shapes, guide)
        latent_t = int(continuation._video_t(window.end - window.start))
        audio_t = int(window.audio_end - window.audio_start)
        initial = InitialNoiseKey(seed, latent_t, latent_h, latent_w, audio_t)
        keys.append((initial, ConditionKey(seed, latent_t, shapes) if shapes else None))
    return tuple(keys)
