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

from prenoise.integrations.sglang import support
from prenoise.integrations.sglang.h3_initial import DENOISE_STATE_KEY, RequestDraws

__all__ = ["CONDITION_HOOKS", "ENABLE_ENV", "HOOKS", "enabled", "register"]

logger = logging.getLogger("prenoise.sglang")

ENABLE_ENV = "PRENOISE_SGLANG"
"""`0` turns the plugin off; `1` or unset: on."""

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
_H3_PIPELINE_MODULE = "sglang.multimodal_gen.runtime.pipelines.minimax_h3_pipeline"

_current: contextvars.ContextVar[RequestDraws | None] = contextvars.ContextVar(
    "prenoise_sglang_request", default=None
)
_denoising: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "prenoise_sglang_denoising_batch", default=None
)
_said: set[str] = set()
_said_lock = threading.Lock()


def enabled(environ: Any = None) -> bool | None:
    """`PRENOISE_SGLANG`: True (`1` or unset), False (`0`), None (another value)."""
    raw = (os.environ if environ is None else environ).get(ENABLE_ENV, "1").strip()
    return {"1": True, "0": False, "": True}.get(raw)


def _say_once(key: str, line: str, level: int = logging.INFO) -> None:
    with _said_lock:
        if key in _said:
            return
        _said.add(key)
    logger.log(level, line)


def _active(path: str = support.H3_INITIAL_PATH) -> bool:
    return enabled() is True and support.current().runs(path)


def _is_h3(pipeline: Any) -> bool:
    module = sys.modules.get(_H3_PIPELINE_MODULE)  # not imported: no MiniMax-H3 pipeline
    cls = getattr(module, "MiniMaxH3Pipeline", None)
    return isinstance(cls, type) and isinstance(pipeline, cls)


def _with_requests(
    original: Callable[..., Any], pipeline: Any, batches: list[Any], *a: Any, **k: Any
) -> Any:
    if _current.get() is not None or not _is_h3(pipeline) or not _active():
        return original(pipeline, *a, **k)  # nested (forward_batch -> forward), or not ours
    with RequestDraws(conditions=_active(support.H3_CONDITIONS_PATH)) as draws:
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


def around_prepare_denoise_state(
    original: Callable[..., Any], stage: Any, batch: Any, plan: Any, *args: Any, **kwargs: Any
) -> Any:
    """AROUND `MiniMaxH3LatentPreparationStage._prepare_denoise_state_from_plan(self, batch,
    plan)`: upstream's function always runs; it finds the state pre-filled only when the
    prepared draws' key equals `plan`'s."""
    draws = _current.get()
    extra = getattr(batch, "extra", None)
    if draws is not None and isinstance(extra, dict) and DENOISE_STATE_KEY not in extra:
        state = draws.serve_state(batch, plan)
        if state is not None:
            extra[DENOISE_STATE_KEY] = state
    return original(stage, batch, plan, *args, **kwargs)


def around_run_full_loop(
    original: Callable[..., Any], stage: Any, batch: Any, *args: Any, **kwargs: Any
) -> Any:
    """AROUND `MiniMaxH3DenoisingStage._run_full_loop(self, batch, server_args)`: tells the
    condition-noise hook which request's draws it is called for; changes nothing else."""
    token = _denoising.set(batch)
    try:
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
    return original(*args, **kwargs)


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
    code = support.current()
    if not code.h3_initial:
        problem = code.problems[support.H3_INITIAL_PATH]
        _say_once("code", f"prenoise: sglang: {support.H3_INITIAL_PATH}: off, upstream's "
                  f"code runs untouched: {problem}", logging.WARNING)  # fmt: skip
        return
    from sglang.multimodal_gen.runtime.platforms.plugins import HookRegistry, HookType

    conditions = code.runs(support.H3_CONDITIONS_PATH)
    for target, hook in HOOKS + (CONDITION_HOOKS if conditions else ()):
        HookRegistry.register(target, hook, HookType.AROUND)
    if not conditions:
        problem = code.problems[support.H3_CONDITIONS_PATH]
        _say_once("code", f"prenoise: sglang: {support.H3_CONDITIONS_PATH}: off, upstream's "
                  f"code runs untouched: {problem}", logging.WARNING)  # fmt: skip
    _say_once(
        "on",
        f"prenoise: sglang (code of {code.release}): {support.H3_INITIAL_PATH}: on "
        "(MiniMax-H3 t2va/fl2va/ref2va); "
        f"{support.H3_CONDITIONS_PATH}: {'on' if conditions else 'off'}; "
        "rollout noise: upstream's draws",
    )
