"""The SGLang diffusion plugin: `register()` and the hooks it registers.

`register` is the `sglang.multimodal_gen.plugins` entry point `prenoise`; SGLang calls it in
every diffusion process (`load_plugins()`, then `apply_plugin_hooks()` resolves the targets).
It only registers AROUND hooks through SGLang's own `HookRegistry` and imports no runtime
module. Hooks (MiniMax-H3 initial noise, `h3_initial`):

- `ComposedPipelineBase.forward` / `forward_batch`: for a MiniMax-H3 pipeline (the class or a
  subclass: FastH3, VDN-H3), open a request-owned `RequestDraws` and submit each request's
  initial draws before any stage runs (so they are drawn while the encoders run); leave it
  (cancel, join) when the call returns or raises.
- `MiniMaxH3LatentPreparationStage._prepare_denoise_state_from_plan`: pre-fill upstream's
  `batch.extra["minimax_h3_denoise_state"]` with the prepared draws when their key matches,
  then call upstream's function (which returns at once on a pre-filled state).
- Visual-condition noise (`h3_conditions`; its own path, registered only where its code is the
  reviewed code): `MiniMaxH3DenoisingStage._run_full_loop` names the request being denoised;
  `condition_noise.minimax_h3_imgvid_cond_noise_aug_rows` returns the prepared noise mixed by
  upstream's arithmetic when every condition's key matches the plan, else runs upstream's.
- Wan / HunyuanVideo / LTX-2 initial noise on CPU generators (`latents_ahead`; their own paths):
  the `forward` / `forward_batch` hooks open a request-owned `RequestLatents` for exactly
  `WanPipeline`, `HunyuanVideoPipeline`, `LTX2Pipeline` and the two-stage
  `LTX2TwoStagePipeline` / `LTX2TwoStageHQPipeline` (stage 1); `InputValidationStage.forward`
  submits the draws once the generators exist; `LatentPreparationStage.forward` /
  `_prepare_grouped_latents` and `LTX2AVLatentPreparationStage.forward` answer exactly the
  planned `torch.randn` calls (key and generator state), else torch draws.
- MiniMax-H3 rollout noise (`h3_rollout`; its own path): for a rollout batch the
  `_run_full_loop` hook opens the loop's `StepLookahead`;
  `minimax_h3_rollout.minimax_h3_rollout_update_video_target` runs upstream's own update with
  its one `torch.randn` answered one step ahead (a CPU generator; the exact generator state),
  else the plain draw.
- `PRENOISE_SGLANG_NOISE_STREAM` (`streams`): `native` changes nothing; `x86` / `libm` draw
  every MiniMax-H3 draw above in that named stream (upstream's serial draws too, and
  `condition_noise.minimax_h3_audio_cond_noise_aug_rows`), a device-generator rollout from a
  CPU generator seeded with its `initial_seed()`; and every draw of a Wan / HunyuanVideo /
  LTX-2 request (`latents_streams`: the prepared initial noise drawn in the stream, each other
  draw site run in the stream; device generators refused). A request that cannot be drawn in
  it, or of any other pipeline, fails with `NoiseStreamError`.

Every hook passes the call straight to upstream's function when the plugin is off
(`PRENOISE_SGLANG=0`, read per call), when the installed code is not the reviewed code
(`support`), or for any other pipeline.
"""

from __future__ import annotations

import contextvars
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from prenoise.integrations.sglang import (
    h3_record,
    h3_rollout,
    latents_ahead,
    latents_streams,
    live,
    support,
)
from prenoise.integrations.sglang import streams as h3_streams
from prenoise.integrations.sglang.h3_initial import DENOISE_STATE_KEY, RequestDraws, initial_key
from prenoise.integrations.sglang.support import ENABLE_ENV, enabled
from prenoise.noise.streams import NATIVE, NoiseStreamError

__all__ = [
    "CONDITION_HOOKS",
    "ENABLE_ENV",
    "HOOKS",
    "ROLLOUT_HOOKS",
    "STREAM_HOOKS",
    "enabled",
    "register",
]

logger = logging.getLogger("prenoise.sglang")


_BASE = "sglang.multimodal_gen.runtime.pipelines_core.composed_pipeline_base.ComposedPipelineBase"
_LATENT = (
    "sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3."
    "stages.latent_preparation.MiniMaxH3LatentPreparationStage"
)
_DENOISING = (
    "sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3."
    "stages.denoising.MiniMaxH3DenoisingStage"
)
_CONDITION_NOISE = (
    "sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3."
    "condition_noise.minimax_h3_imgvid_cond_noise_aug_rows"
)
_AUDIO_CONDITION_NOISE = (
    "sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3."
    "condition_noise.minimax_h3_audio_cond_noise_aug_rows"
)
_ROLLOUT_UPDATE = (
    "sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3."
    "minimax_h3_rollout.minimax_h3_rollout_update_video_target"
)
_KEYFRAME_ENCODE = (
    "sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3."
    "keyframe_encoding.minimax_h3_encode_keyframe_cond_rows"
)
_REFERENCE_VIDEO_ENCODE = (
    "sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3."
    "reference_encoding.minimax_h3_encode_reference_video_rows"
)
_H3_PIPELINE_MODULE = "sglang.multimodal_gen.runtime.pipelines.minimax_h3_pipeline"
_STREAM_PATHS = (
    support.H3_INITIAL_PATH,
    support.H3_CONDITIONS_PATH,
    support.H3_ROLLOUT_PATH,
    support.H3_STREAMS_PATH,
)

_current: contextvars.ContextVar[RequestDraws | None] = contextvars.ContextVar(
    "prenoise_sglang_request", default=None
)
_denoising: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "prenoise_sglang_denoising_batch", default=None
)
_said: set[str] = set()
_said_lock = threading.Lock()


def _say_once(key: str, line: str, level: int = logging.INFO) -> None:
    with _said_lock:
        if key in _said:
            return
        _said.add(key)
    logger.log(level, line)


def _active(path: str = support.H3_INITIAL_PATH) -> bool:
    """Whether `path` prepares or serves noise for this call: the plugin is on, the installed
    code is the reviewed code (`support`), and so is the code that runs now (`live`; else one
    WARNING per process and problem, and upstream's code runs untouched)."""
    if enabled() is not True or not support.current().runs(path):
        return False
    problem = live.problem(path)
    if problem is not None:
        _say_once(f"live:{problem}", f"prenoise: sglang: {path}: upstream's code runs "
                  f"untouched: {problem}", logging.WARNING)  # fmt: skip
        return False
    return True


def _is_h3(pipeline: Any) -> bool:
    module = sys.modules.get(_H3_PIPELINE_MODULE)  # not imported: no MiniMax-H3 pipeline
    cls = getattr(module, "MiniMaxH3Pipeline", None)
    return isinstance(cls, type) and isinstance(pipeline, cls)


def _stream() -> str:
    """The noise stream of this thread's draws (`native` when the plugin is off)."""
    return h3_streams.current_stream() if enabled() is True else NATIVE


def _refuse_stream_here(stream: str) -> None:
    """`NoiseStreamError` where not every MiniMax-H3 path the stream covers runs here."""
    code = support.current()
    problem = next((code.problems[p] for p in _STREAM_PATHS if not code.runs(p)), None)
    problem = problem or next(filter(None, map(live.problem, _STREAM_PATHS)), None)
    if problem is not None:
        raise NoiseStreamError(
            f"prenoise: {h3_streams.NOISE_STREAM_ENV}={stream}: MiniMax-H3's noise cannot all "
            f"be drawn in that stream on this sglang ({problem}); use the native stream"
        )


def _refuse_uncovered_stream(pipeline: Any) -> None:
    """`NoiseStreamError` for a request of a pipeline the named streams do not cover (every one
    but MiniMax-H3) while `PRENOISE_SGLANG_NOISE_STREAM` names a stream: its noise would be
    local torch's, so the request fails rather than mix streams (native: nothing happens)."""
    stream = h3_streams.setting()  # a bad value raises: never silently native
    if stream != NATIVE:
        raise NoiseStreamError(
            f"prenoise: {h3_streams.NOISE_STREAM_ENV}={stream} covers MiniMax-H3, and exactly "
            f"{', '.join(k.cls for k in latents_ahead.KINDS)}; "
            f"{type(pipeline).__name__}'s noise would be local torch's, so its request fails "
            f"rather than mix streams: unset {h3_streams.NOISE_STREAM_ENV} (native) for it"
        )


def _latents_request(
    kind: Any, original: Callable[..., Any], pipeline: Any, batches: list[Any], *a: Any, **k: Any
) -> Any:
    """A Wan / HunyuanVideo / LTX-2 request (exact class): its initial noise prepared ahead and,
    under a named stream, every draw of it in that stream (`latents_streams`), or refused."""
    stream = h3_streams.setting() if enabled() is True else NATIVE  # a bad value raises
    if stream == NATIVE:
        if not _active(kind.path):
            return original(pipeline, *a, **k)
        return latents_ahead.run_request(kind, original, pipeline, batches, *a, **k)
    code = support.current()
    problem = next((code.problems[p] for p in (kind.path, kind.stream_path)
                    if not code.runs(p)), None)  # fmt: skip
    problem = problem or live.problem(kind.path) or live.problem(kind.stream_path)
    if problem is not None:
        raise NoiseStreamError(
            f"prenoise: {h3_streams.NOISE_STREAM_ENV}={stream}: {type(pipeline).__name__}'s "
            f"noise cannot all be drawn in that stream on this sglang ({problem}); use the "
            "native stream"
        )
    latents_streams.check_entry(kind.name, pipeline, batches, stream)
    with h3_streams.request_stream(stream):
        return latents_ahead.run_request(
            kind, original, pipeline, batches, *a, noise_stream=stream, **k
        )


def _with_requests(
    original: Callable[..., Any], pipeline: Any, batches: list[Any], *a: Any, **k: Any
) -> Any:
    kind = latents_ahead.kind_of(pipeline)  # Wan, HunyuanVideo, LTX-2 (exact classes)
    if kind is not None and _current.get() is None and latents_ahead.current() is None:
        return _latents_request(kind, original, pipeline, batches, *a, **k)
    if _current.get() is None and not _is_h3(pipeline) and enabled() is True:
        if kind is None:
            _refuse_uncovered_stream(pipeline)
        return original(pipeline, *a, **k)  # a nested call of a latents request
    if _current.get() is not None or not _is_h3(pipeline) or enabled() is not True:
        return original(pipeline, *a, **k)  # nested (forward_batch -> forward), or not ours
    stream = h3_streams.setting()  # a bad value raises: never silently native
    if stream != NATIVE:
        _refuse_stream_here(stream)
    if not _active():
        return original(pipeline, *a, **k)
    with (
        h3_streams.request_stream(stream),
        RequestDraws(conditions=_active(support.H3_CONDITIONS_PATH), noise_stream=stream) as draws,
    ):
        token = _current.set(draws)
        try:
            for batch in batches:
                draws.submit(batch)
            draws.submit_conditions()
            return original(pipeline, *a, **k)
        finally:
            _current.reset(token)


def around_forward(original: Callable[..., Any], pipeline: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND `ComposedPipelineBase.forward(self, batch, server_args)`."""
    batch = args[0] if args else kwargs.get("batch")
    return _with_requests(original, pipeline, [batch], *args, **kwargs)


def around_forward_batch(
    original: Callable[..., Any], pipeline: Any, *args: Any, **kwargs: Any
) -> Any:
    """AROUND `ComposedPipelineBase.forward_batch(self, batches, server_args)`."""
    batches = args[0] if args else kwargs.get("batches")
    listed = list(batches) if isinstance(batches, list | tuple) else []
    return _with_requests(original, pipeline, listed, *args, **kwargs)


def _initial_seed(plan: Any) -> int | None:
    """The seed upstream draws `plan`'s initial noise with (None where the plan has no key)."""
    key = initial_key(plan)
    return key.seed if key is not None else None


def around_prepare_denoise_state(
    original: Callable[..., Any], stage: Any, batch: Any, plan: Any, *args: Any, **kwargs: Any
) -> Any:
    """AROUND `MiniMaxH3LatentPreparationStage._prepare_denoise_state_from_plan(self, batch,
    plan)`: upstream's function always runs; it finds the state pre-filled only when the
    prepared draws' key equals `plan`'s."""
    draws = _current.get()
    extra = getattr(batch, "extra", None)
    if (
        draws is not None
        and isinstance(extra, dict)
        and DENOISE_STATE_KEY not in extra
        and _active(support.H3_INITIAL_PATH)
    ):
        state = draws.serve_state(batch, plan)
        if state is not None:
            extra[DENOISE_STATE_KEY] = state
    out = h3_streams.run_in_stream(_stream(), original, stage, batch, plan, *args, **kwargs)
    if enabled() is True:  # `h3.initial.*` noise records (a no-op unless recording)
        h3_record.record_initial(batch, lambda: _initial_seed(plan))
    return out


def around_run_full_loop(
    original: Callable[..., Any], stage: Any, batch: Any, *args: Any, **kwargs: Any
) -> Any:
    """AROUND `MiniMaxH3DenoisingStage._run_full_loop(self, batch, server_args)`: tells the
    condition-noise hook which request's draws it is called for and, for a rollout batch, opens
    the loop's rollout look-ahead (`h3_rollout.open_loop`, finished when the call returns or
    raises); changes nothing else."""
    token = _denoising.set(batch)
    try:
        if getattr(batch, "rollout", False) and _active(support.H3_ROLLOUT_PATH):
            with h3_rollout.open_loop(batch, _stream()):
                return original(stage, batch, *args, **kwargs)
        return original(stage, batch, *args, **kwargs)
    finally:
        _denoising.reset(token)


def around_imgvid_cond_noise(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """AROUND `condition_noise.minimax_h3_imgvid_cond_noise_aug_rows(clean_rows, **kw)`: the
    prepared noise mixed by upstream's arithmetic when every condition's key matches the plan,
    else upstream's function itself (see `h3_conditions`)."""
    draws, batch = _current.get(), _denoising.get()
    if (
        draws is not None
        and batch is not None
        and len(args) == 1
        and _active(support.H3_CONDITIONS_PATH)
    ):
        rows = draws.serve_condition_rows(batch, args[0], kwargs)
        if rows is not None:
            return rows
    if batch is not None and enabled() is True:  # upstream's draws read for the noise records
        capture = h3_record.captured_condition_noise
        return h3_streams.run_in_stream(_stream(), capture, batch, original, args, kwargs)
    return h3_streams.run_in_stream(_stream(), original, *args, **kwargs)


def around_rollout_update(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """AROUND `minimax_h3_rollout.minimax_h3_rollout_update_video_target(video_target, velocity,
    **kw)`: upstream's function, its one draw answered by the loop's look-ahead (a CPU
    generator) or drawn in the named stream; see `h3_rollout.update`."""
    if not _active(support.H3_ROLLOUT_PATH):
        return original(*args, **kwargs)
    return h3_rollout.update(original, _stream(), args, kwargs)


def around_audio_cond_noise(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """AROUND `condition_noise.minimax_h3_audio_cond_noise_aug_rows(...)`: upstream's function,
    its draws in the named noise stream (`native`: a plain call)."""
    return _drawn_in_stream(original, *args, **kwargs)


def around_posterior_encode(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """AROUND `keyframe_encoding.minimax_h3_encode_keyframe_cond_rows(...)` (keyframes and
    reference images) and `reference_encoding.minimax_h3_encode_reference_video_rows(...)`:
    upstream's encode, its VAE posterior sample (`torch.randn(mean.shape, generator=None)` on
    the default CPU generator, seeded 42 inside upstream's `fork_rng`) drawn in the named noise
    stream (`native`: a plain call)."""
    return _drawn_in_stream(original, *args, **kwargs)


def _drawn_in_stream(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`original(*args, **kwargs)` with its normal draws in this thread's stream: a plain call
    in `native` (or with the plugin off); in a named stream on code the streams path does not
    run (changed or not the live reviewed code), `NoiseStreamError` — never a native draw."""
    stream = _stream()
    if stream == NATIVE:
        return original(*args, **kwargs)
    if not _active(support.H3_STREAMS_PATH):
        _refuse_stream_here(stream)
        raise NoiseStreamError(
            f"prenoise: {h3_streams.NOISE_STREAM_ENV}={stream}: the named noise streams' path "
            "does not run here; use the native stream"
        )
    return h3_streams.run_in_stream(stream, original, *args, **kwargs)


HOOKS: tuple[tuple[str, Callable[..., Any]], ...] = (
    (f"{_BASE}.forward", around_forward),
    (f"{_BASE}.forward_batch", around_forward_batch),
    (f"{_LATENT}._prepare_denoise_state_from_plan", around_prepare_denoise_state),
)
"""(dotted target, AROUND hook) registered by `register` for the initial noise."""

CONDITION_HOOKS: tuple[tuple[str, Callable[..., Any]], ...] = (
    (f"{_DENOISING}._run_full_loop", around_run_full_loop),
    (_CONDITION_NOISE, around_imgvid_cond_noise),
)
"""(dotted target, AROUND hook) registered in addition for the visual-condition noise."""

ROLLOUT_HOOKS: tuple[tuple[str, Callable[..., Any]], ...] = (
    (_ROLLOUT_UPDATE, around_rollout_update),
)
"""Registered in addition for the rollout noise (with `_run_full_loop`'s, once per target)."""

STREAM_HOOKS: tuple[tuple[str, Callable[..., Any]], ...] = (
    (_AUDIO_CONDITION_NOISE, around_audio_cond_noise),
    (_KEYFRAME_ENCODE, around_posterior_encode),
    (_REFERENCE_VIDEO_ENCODE, around_posterior_encode),
)
"""Registered in addition for the named noise streams (a plain call in `native`)."""

_TABLES = (HOOKS, CONDITION_HOOKS, ROLLOUT_HOOKS, STREAM_HOOKS, latents_ahead.ENTRY_HOOKS,
           *latents_ahead.DRAW_SITE_HOOKS.values(),
           *latents_streams.SITE_HOOKS.values())  # fmt: skip
live.own_hooks(hook for table in _TABLES for _target, hook in table)  # the live check's


_latents_registered: set[str] = set()  # the latents hooks' targets registered in this process


def _register_latents(code: support.Support, registry: Any, hook_type: Any) -> tuple[str, bool]:
    """Register the Wan/HunyuanVideo and LTX-2 paths' hooks that run here, each target once
    per process (a hook applied earlier passes calls through once its path is off); returns
    their part of the log line and whether any target was newly registered (the forward hooks
    are the caller's)."""
    paths = tuple(latents_ahead.DRAW_SITE_HOOKS)
    on = [p for p in paths if code.runs(p)]
    targets = dict(latents_ahead.ENTRY_HOOKS) if on else {}
    for path in on:
        targets.update(latents_ahead.DRAW_SITE_HOOKS[path])
    streamed = [p for p in latents_streams.SITE_HOOKS if code.runs(p)]
    for path in streamed:  # the stream paths include their latents path's keys
        targets.update(latents_streams.SITE_HOOKS[path])
    new = {t: h for t, h in targets.items() if t not in _latents_registered}
    for target, hook in new.items():
        registry.register(target, hook, hook_type.AROUND)
        _latents_registered.add(target)
    stream = h3_streams.setting()
    refused = "" if stream == NATIVE else (
        f"; with {h3_streams.NOISE_STREAM_ENV}={stream} its pipelines' requests fail "
        "(NoiseStreamError)")  # fmt: skip
    latents_of = {k.stream_path: k.path for k in latents_ahead.KINDS}
    for path in (*paths, *latents_streams.SITE_HOOKS):  # each problem named once
        if path in paths and not code.runs(path):
            _say_once(f"code:{path}", f"prenoise: sglang: {path}: off, upstream's code runs "
                      f"untouched: {code.problems[path]}{refused}", logging.WARNING)  # fmt: skip
        elif (
            path not in paths
            and not code.runs(path)
            and stream != NATIVE
            and code.runs(latents_of[path])
        ):  # else named with its latents path above
            _say_once(f"code:{path}", f"prenoise: sglang: {path}: off: "
                      f"{code.problems[path]}{refused}", logging.WARNING)  # fmt: skip
    line = "; ".join(f"{p}: {'on' if p in on else 'off'}" for p in paths)
    covered = [k.cls for k in latents_ahead.KINDS if k.stream_path in streamed]
    return f"{line}; named noise streams cover {', '.join(covered) or 'none of them'}", bool(new)


def register() -> None:
    """Entry point (`sglang.multimodal_gen.plugins`: `prenoise`): register the hooks, or log
    why not. Imports only SGLang's plugin registry (already imported by the loader calling
    it); reads the installed source files for the digests. Never raises."""
    setting = enabled()
    if setting is None:
        _say_once("setting", f"prenoise: {ENABLE_ENV}={os.environ.get(ENABLE_ENV)!r} is not 0 "
                  "or 1; the SGLang plugin registered nothing", logging.ERROR)  # fmt: skip
        return
    if not setting:
        _say_once("off", f"prenoise: SGLang plugin disabled by {ENABLE_ENV}=0")
        return
    try:
        stream = h3_streams.setting()
    except NoiseStreamError as error:  # never a silent native: nothing registered
        _say_once("stream", f"prenoise: {error}; the SGLang plugin registered nothing",
                  logging.ERROR)  # fmt: skip
        return
    code = support.current()
    from sglang.multimodal_gen.runtime.platforms.plugins import HookRegistry, HookType

    latents, latents_new = _register_latents(code, HookRegistry, HookType)
    if not code.h3_initial:
        problem = code.problems[support.H3_INITIAL_PATH]
        refused = "" if stream == NATIVE else (
            f"; with {h3_streams.NOISE_STREAM_ENV}={stream} MiniMax-H3 requests fail "
            "(NoiseStreamError)")  # fmt: skip
        _say_once("code", f"prenoise: sglang: {support.H3_INITIAL_PATH}: off, upstream's "
                  f"code runs untouched: {problem}{refused}; {latents}",
                  logging.WARNING)  # fmt: skip
        if stream != NATIVE or latents_new:  # only the entry hooks (H3 requests: refused
            for target, hook in HOOKS[:2]:  # in a stream, else passed to upstream)
                HookRegistry.register(target, hook, HookType.AROUND)
        return
    conditions = code.runs(support.H3_CONDITIONS_PATH)
    rollout = code.runs(support.H3_ROLLOUT_PATH)
    streamed = code.runs(support.H3_STREAMS_PATH)
    targets = list(HOOKS)
    targets += CONDITION_HOOKS if conditions else CONDITION_HOOKS[:1] if rollout else ()
    targets += (ROLLOUT_HOOKS if rollout else ()) + (STREAM_HOOKS if streamed else ())
    for target, hook in targets:
        HookRegistry.register(target, hook, HookType.AROUND)
    for path, runs in ((support.H3_CONDITIONS_PATH, conditions),
                       (support.H3_ROLLOUT_PATH, rollout),
                       (support.H3_STREAMS_PATH, streamed or stream == NATIVE)):  # fmt: skip
        if not runs:
            refused = "" if stream == NATIVE else (
                f"; with {h3_streams.NOISE_STREAM_ENV}={stream} MiniMax-H3 requests fail "
                "(NoiseStreamError)")  # fmt: skip
            _say_once(f"code:{path}", f"prenoise: sglang: {path}: off, upstream's code runs "
                      f"untouched: {code.problems[path]}{refused}", logging.WARNING)  # fmt: skip
    if not rollout:
        rollout_noise = "upstream's draws"
    elif stream == NATIVE:
        rollout_noise = "CPU generators one step ahead, device generators upstream's draws"
    else:
        rollout_noise = f"one step ahead in stream {stream} (device generators too)"
    _say_once(
        "on",
        f"prenoise: sglang (code of {code.release}): {support.H3_INITIAL_PATH}: on "
        "(MiniMax-H3 t2va/fl2va/ref2va); "
        f"{support.H3_CONDITIONS_PATH}: {'on' if conditions else 'off'}; "
        f"rollout noise: {rollout_noise}; {latents}; "
        f"noise stream: {stream} ({h3_streams.NOISE_STREAM_ENV})",
    )
