"""The `vllm_omni.general_plugins` entry point and the patches it installs into MiniMax-H3.

`register()` is what vLLM-Omni's `load_omni_general_plugins()` calls in every engine, stage and
worker process. It installs prenoise into `MiniMaxH3Pipeline` when vllm-omni is installed and
`PRENOISE_VLLM_OMNI` is not `0`; otherwise it logs once why it did nothing. What runs is decided
by the installed code, not its version (`support`: the source digests of every function a path
relies on): a path whose functions are not the reviewed code runs upstream's code untouched and
is named once in the log. Installing twice is a no-op; `uninstall()` restores upstream's
functions (unless another plugin has wrapped prenoise's since). Each installed wrapper holds the
upstream function it wraps.

Six upstream names are wrapped, each delegating to upstream's own code whenever the request is
not being prepared ahead (the draws among them in `PRENOISE_VLLM_OMNI_NOISE_STREAM`'s noise
stream, see `streams`; `native`: upstream's code exactly):
- `MiniMaxH3Pipeline.forward`: refuses the request if the named noise stream fails this
  process's self-check (`NoiseStreamError`), then opens a `RequestPreparation` around the
  request (its executor cancels, joins and re-raises on an encoder failure; no worker outlives
  the request);
- `pipeline_minimax_h3.prepare_encoder_inputs`: once the media plan is known (before the text
  encoder runs) submits the first output's draws;
- `MiniMaxH3Pipeline.encode_prompt`: on several ranks, rank 0's plan is broadcast once (every
  rank calls it at the same point), so every rank prepares ahead;
- `MiniMaxH3Pipeline._initial_noise` and
  `pipeline_minimax_h3.minimax_h3_imgvid_cond_noise_aug_rows`: take the
  prepared noise when the actual arguments equal the prediction, else draw serially (in the
  stream);
- `pipeline_minimax_h3.minimax_h3_audio_cond_noise_aug_rows` (imported by name into the pipeline
  module, so rebound there): never prepared ahead (upstream's `noise_aug` 1.0 draws nothing);
  draws serially in the stream;
- `pipeline_minimax_h3.minimax_h3_imgvid_cond_noise_rows`, where upstream has it (0.32.0rc1: its
  own Ref2VA first-output draw, made on upstream's worker thread): in the stream, never prepared
  by prenoise (never twice).
Where the MiniMax-H3 stream path is not the reviewed code only `forward` is wrapped: it passes a
request to upstream's, or refuses it in a named stream.
(see docs/background/vllm-omni-h3.md)
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch

from prenoise.guards.env import EnvVarError, check_environment
from prenoise.integrations.vllm_omni import live, support
from prenoise.integrations.vllm_omni.logs import route_to_vllm_logging
from prenoise.integrations.vllm_omni.pipelines import install_stream_hooks, uninstall_stream_hooks
from prenoise.integrations.vllm_omni.request import (
    ConditionKey,
    InitialNoiseKey,
    RequestPreparation,
    adopted,
    current_request,
    serve_condition_rows,
)
from prenoise.integrations.vllm_omni.reviewed import RELEASES
from prenoise.integrations.vllm_omni.settings import (
    NOISE_STREAM_ENV,
    PluginSettings,
    SettingsError,
)
from prenoise.integrations.vllm_omni.streams import require_stream, run_serial
from prenoise.noise.streams import NATIVE, NoiseStreamError

__all__ = [
    "SUPPORTED_VERSIONS",
    "install",
    "is_installed",
    "original",
    "register",
    "uninstall",
]

logger = logging.getLogger("prenoise.vllm_omni")
SUPPORTED_VERSIONS = RELEASES
"""The vllm-omni releases whose code was reviewed (`reviewed.RELEASES`). Support is decided by
the installed code (`support`), not by this list: a later release whose relied-on functions are
the reviewed code runs as the release it equals."""

_METHODS = ("forward", "_initial_noise", "encode_prompt")
_FUNCTIONS = (
    "prepare_encoder_inputs",
    "minimax_h3_imgvid_cond_noise_aug_rows",
    "minimax_h3_audio_cond_noise_aug_rows",
    "minimax_h3_imgvid_cond_noise_rows",
)
_OPTIONAL = frozenset({"minimax_h3_imgvid_cond_noise_rows"})
"""Wrapped where upstream's pipeline module has it (0.32.0rc1)."""
_GUARD_ONLY = ("forward",)
"""What is wrapped when the MiniMax-H3 stream path is not the reviewed code."""
_lock = threading.Lock()
_originals: dict[str, Callable[..., Any]] = {}  # upstream's own functions, saved by install
_installed: dict[str, Callable[..., Any]] = {}  # prenoise's wrappers, as install set them
_said: set[str] = set()


def register() -> None:
    """Entry point (`vllm_omni.general_plugins`: `prenoise`): install if supported, else log why.

    Never raises for the environment it finds: a plugin must never be why `vllm serve` does not
    start. A setting with an unknown value — the plugin's own or any other `PRENOISE_*`
    variable its draws read — logs one ERROR line (the variable, its value, the allowed values)
    and installs nothing. The plugin's lines go to vLLM's log
    (`logs.route_to_vllm_logging`).
    """
    route_to_vllm_logging()
    try:
        settings = PluginSettings.from_env()
        # Every PRENOISE_* variable the draws read too (kernel backend, huge pages, ...): a bad
        # one would otherwise fail requests at their first draw instead of installing nothing.
        check_environment()
    except (SettingsError, EnvVarError) as error:  # never a silent default: nothing installed
        _say_once("settings", f"prenoise: {error}; the vLLM-Omni plugin installed nothing",
                  level=logging.ERROR)  # fmt: skip
        return
    if not settings.enabled:
        _say_once("disabled", "prenoise: vLLM-Omni plugin disabled by PRENOISE_VLLM_OMNI=0")
        return
    if _vllm_omni_version() is None:
        _say_once("version", "prenoise: vllm-omni is not installed; plugin did nothing")
        return
    for path, problem in support.current().problems.items():
        _say_once(f"code:{path}", _path_off_line(path, problem))
    install(settings)
    # vLLM-Omni's other pipelines (Wan2.2, LTX-2, HunyuanVideo-1.5, Qwen-Image, Stable Audio):
    # their draws in the named noise stream, Wan2.2 T2V's prepared ahead; independent of H3's.
    install_stream_hooks(settings)


def _path_off_line(path: str, problem: str) -> str:
    """The one line naming why `path` runs upstream's code here, and what to do about it."""
    return support.off_line(path, problem, _vllm_omni_version())


def is_installed() -> bool:
    """True while prenoise's wrappers are installed in MiniMax-H3."""
    return bool(_originals)


def install(settings: PluginSettings | None = None) -> None:
    """Wrap the six MiniMax-H3 names (idempotent); refuses if another plugin already did.

    Logs one INFO line per process when it installs: the prenoise and vllm-omni versions and
    `settings` (the environment's, read per request; `None`: read now, for the line only).
    """
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

    with _lock:
        if _originals:
            return
        names = _METHODS + _FUNCTIONS if support.current().h3_streams else _GUARD_ONLY
        targets = _current(upstream, names)
        foreign = [name for name, fn in targets.items() if not _is_upstream(fn)]
        if foreign:
            # Another plugin (e.g. a hardware backend) replaced them: taking noise past its
            # wrapper would change what the model receives. Do nothing rather than that.
            _say_once(
                "foreign",
                f"prenoise: MiniMax-H3 {foreign} already patched by another plugin; "
                "prenoise did nothing",
            )
            return
        wrappers = {name: _wrap(fn, _IMPLEMENTATIONS[name]) for name, fn in targets.items()}
        _originals.update(targets)
        _installed.update(wrappers)
        _assign(upstream, wrappers)
    logger.info(
        "prenoise %s: overlapped noise preparation installed in MiniMax-H3 (vllm-omni %s, %s; "
        "%s; pid %d)",
        installed_version("prenoise"),
        _vllm_omni_version(),
        support.current().describe(),
        _describe(settings),
        os.getpid(),
    )
    _check_stream(settings)


def original(name: str) -> Callable[..., Any]:
    """Upstream's own `name` (one of those wrapped), whether or not prenoise is installed."""
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

    with _lock:
        if name in _originals:
            return _originals[name]
    return vars(_owner(upstream, name))[name]


def uninstall() -> None:
    """Restore upstream's functions (no-op when not installed).

    Refuses, and says so once, if another plugin wrapped prenoise's wrappers since: restoring
    upstream's functions would silently drop that plugin's patch. prenoise's wrappers keep
    calling upstream's functions after an uninstall (a request in flight finishes normally).
    The other pipelines' stream hooks (`pipelines.install_stream_hooks`) are restored too.
    """
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

    uninstall_stream_hooks()

    with _lock:
        if not _originals:
            return
        replaced = [
            name
            for name, fn in _current(upstream, tuple(_installed)).items()
            if fn is not _installed[name]
        ]
        if replaced:
            _say_once(
                "uninstall",
                f"prenoise: MiniMax-H3 {replaced} patched by another plugin after prenoise; "
                "prenoise left installed",
            )
            return
        _assign(upstream, _originals)
        _originals.clear()
        _installed.clear()


def _owner(upstream: Any, name: str) -> Any:
    """Where `name` lives: the pipeline class (methods) or the pipeline module (functions)."""
    return upstream.MiniMaxH3Pipeline if name in _METHODS else upstream


def _current(upstream: Any, names: tuple[str, ...]) -> dict[str, Callable[..., Any]]:
    """`names` as MiniMax-H3 holds them now (a class's own methods, unbound); an optional name
    upstream does not have is left out."""
    return {
        name: vars(_owner(upstream, name))[name]
        for name in names
        if name not in _OPTIONAL or name in vars(_owner(upstream, name))
    }


def _assign(upstream: Any, functions: dict[str, Callable[..., Any]]) -> None:
    for name, fn in functions.items():
        setattr(_owner(upstream, name), name, fn)


def _wrap(upstream_fn: Callable[..., Any], wrapper: Callable[..., Any]) -> Callable[..., Any]:
    """`wrapper(upstream_fn, ...)` under `upstream_fn`'s name and docs.

    A new function per install: prenoise's own functions are never renamed, and the wrapper
    holds `upstream_fn` itself, so it still reaches upstream after `uninstall`.
    """

    @functools.wraps(upstream_fn)
    def installed(*args: Any, **kwargs: Any) -> Any:
        return wrapper(upstream_fn, *args, **kwargs)

    return installed


live.own_wrappers(_wrap, ("installed",), "upstream_fn")  # the live check looks through them


# -- the wrappers -------------------------------------------------------------------------------


def _forward(upstream_fn: Callable[..., Any], self: Any, request: Any) -> Any:
    settings = _request_settings()
    if settings is None or not settings.enabled or current_request() is not None:
        return upstream_fn(self, request)
    code = support.current()
    if not code.h3_streams:  # only `forward` is wrapped: upstream's code, or refused
        if settings.noise_stream != NATIVE:
            raise NoiseStreamError(
                f"prenoise: {NOISE_STREAM_ENV}={settings.noise_stream}: MiniMax-H3's noise cannot "
                f"all be drawn in that stream on this vllm-omni "
                f"({code.problems[support.H3_STREAMS_PATH]}); use the native stream"
            )
        return upstream_fn(self, request)
    # The code as it runs now (`live`): a runtime patch, a swapped `__code__`, another wrapper
    # or a replaced `torch.randn` is upstream's code untouched (refused in a named stream).
    streams_problem = _live_problem(support.H3_STREAMS_PATH)
    if streams_problem is not None:
        if settings.noise_stream != NATIVE:
            raise NoiseStreamError(
                f"prenoise: {NOISE_STREAM_ENV}={settings.noise_stream}: MiniMax-H3's noise cannot "
                f"all be drawn in that stream ({streams_problem}); use the native stream"
            )
        return upstream_fn(self, request)
    ahead_problem = _live_problem(support.H3_AHEAD_PATH) if code.h3_ahead else None
    if ahead_problem is not None:  # nothing prepared ahead for this request
        problems = {**code.problems, support.H3_AHEAD_PATH: ahead_problem}
        code = dataclasses.replace(code, problems=problems)
    # A named stream this process refuses fails the request before anything is drawn: never
    # silently native (a refused stream fails every request alike, so this precedes upstream's
    # own validation).
    require_stream(settings.noise_stream)
    sampling, request_id = _attribute(request, "sampling_params"), _attribute(request, "request_id")
    if sampling is None:  # e.g. a batch of several requests: upstream's own error, unchanged
        return upstream_fn(self, request)  # (its draws still go through the serial wrappers)
    with RequestPreparation(self, sampling, settings, request_id=request_id, code=code):
        return upstream_fn(self, request)


def _live_problem(path: str) -> str | None:
    """`live.problem(path)`, said once per process and problem (a WARNING line)."""
    problem = live.problem(path)
    if problem is not None:
        _say_once(f"live:{problem}", f"prenoise: vllm-omni {_vllm_omni_version()}: {path}: "
                  f"upstream's code runs untouched: {problem}")  # fmt: skip
    return problem


def _serves() -> bool:
    """Whether prepared noise may be handed over now: the prepared-ahead path's code, as it
    runs at this hand-over, is the reviewed code (`live`)."""
    return live.problem(support.H3_AHEAD_PATH) is None


def _attribute(request: Any, name: str) -> Any:
    """`request.name`, or None where reading it raises (upstream's properties assert and
    index: a malformed batch must meet upstream's validation first, not prenoise's read)."""
    try:
        return getattr(request, name, None)
    except Exception:
        return None


def _request_settings() -> PluginSettings | None:
    """The settings a request runs with; None (upstream's code, said once) if they are bad."""
    try:
        return PluginSettings.from_env()
    except SettingsError as error:
        _say_once("request-settings", f"prenoise: {error}; requests run upstream's code only",
                  level=logging.ERROR)  # fmt: skip
        return None


def _prepare_encoder_inputs(
    upstream_fn: Callable[..., Any], prompt: Any, sampling: Any, **kwargs: Any
) -> Any:
    prepared = upstream_fn(prompt, sampling, **kwargs)
    state = current_request()
    if state is not None and state.sampling is sampling:
        state.start(prepared)
    return prepared


def _encode_prompt(upstream_fn: Callable[..., Any], self: Any, prepared: Any) -> Any:
    state = current_request()
    if state is not None and state.pipeline is self:
        state.share_plan()  # multi-rank: every rank reaches this point; rank 0 has the plan
    return upstream_fn(self, prepared)


def _initial_noise(
    upstream_fn: Callable[..., Any],
    self: Any,
    *,
    seed: int,
    latent_t: int,
    latent_h: int,
    latent_w: int,
    audio_t: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    state = current_request()
    if state is not None and state.pipeline is self and _serves():
        key = InitialNoiseKey(int(seed), int(latent_t), int(latent_h), int(latent_w), int(audio_t))
        prepared = state.take_initial_noise(key)
        if prepared is not None:
            return prepared
    # On upstream's own worker thread (0.32.0rc1 draws a Ref2VA first output ahead there) the
    # request's context is not set: `adopted` finds the request and draws in its stream.
    with adopted(self):
        return run_serial(
            upstream_fn,
            self,
            seed=seed,
            latent_t=latent_t,
            latent_h=latent_h,
            latent_w=latent_w,
            audio_t=audio_t,
        )


def _condition_noise_rows(
    upstream_fn: Callable[..., Any], clean_rows: torch.Tensor, **kwargs: Any
) -> torch.Tensor:
    serial = functools.partial(run_serial, upstream_fn, clean_rows, **kwargs)
    state = current_request()
    if state is None:
        return serial()
    try:
        key = _condition_key(clean_rows, **kwargs)
    except TypeError:  # arguments upstream does not take: its own call raises
        key = None
    seed = _int_or_none(kwargs.get("seed"))
    if key is None:
        # Upstream's own validation (and its noise_aug == 1 early return) decides; a seed that
        # is not a number is its to refuse or ignore too, never prenoise's to raise on.
        if seed is not None:
            state.discard_condition_noise(seed)
        return serial()
    if kwargs.get("precomputed_noise_rows") is not None:
        # upstream drew this output's rows ahead itself (0.32.0rc1): its own mix; prenoise's
        # part is to prepare the next output now, as this one starts denoising
        state.upstream_took_condition_noise(key)
        return serial()
    noise = state.take_condition_noise(key) if _serves() else None
    if noise is None:
        return serial()
    return serve_condition_rows(upstream_fn, clean_rows, noise, key, kwargs)


def _condition_noise_rows_ahead(upstream_fn: Callable[..., Any], **kwargs: Any) -> torch.Tensor:
    # Upstream's own draw ahead (0.32.0rc1, on its worker thread): never prenoise's to prepare;
    # drawn in the request's stream.
    with adopted(None):
        return run_serial(upstream_fn, **kwargs)


def _audio_condition_noise_rows(
    upstream_fn: Callable[..., Any], clean_rows: torch.Tensor, **kwargs: Any
) -> torch.Tensor:
    # Upstream's own code always (at upstream's noise_aug of 1.0 it draws nothing; otherwise a
    # small draw, seeded seed + 1): in the stream when named.
    state = current_request()
    seed = _int_or_none(kwargs.get("seed"))
    if state is not None and seed is not None:
        state.upstream_took_condition_noise(None, seed=seed)
    return run_serial(upstream_fn, clean_rows, **kwargs)


_IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {
    "forward": _forward,
    "_initial_noise": _initial_noise,
    "encode_prompt": _encode_prompt,
    "prepare_encoder_inputs": _prepare_encoder_inputs,
    "minimax_h3_imgvid_cond_noise_aug_rows": _condition_noise_rows,
    "minimax_h3_audio_cond_noise_aug_rows": _audio_condition_noise_rows,
    "minimax_h3_imgvid_cond_noise_rows": _condition_noise_rows_ahead,
}


def _condition_key(
    clean_rows: torch.Tensor,
    *,
    condition_shapes: Any,
    target_latent_t: int,
    imgvid_cond_num_frames: int,
    seed: int,
    noise_aug: float,
    precomputed_noise_rows: Any = None,
    guided: Any = False,
) -> ConditionKey | None:
    """The key of a call prenoise can serve exactly; None for anything upstream must handle
    (`precomputed_noise_rows` and `guided` exist from 0.32.0rc1 on: a key records the recipe)."""
    try:
        shapes = tuple(tuple(int(v) for v in shape) for shape in condition_shapes)
        tau = float(noise_aug)
        int(seed), int(target_latent_t), int(imgvid_cond_num_frames)
    except (TypeError, ValueError):
        return None
    valid = (
        0.0 <= tau < 1.0
        and isinstance(guided, bool)
        and not (guided and precomputed_noise_rows is not None)
        and clean_rows.ndim == 2
        and int(clean_rows.shape[1]) == 96
        and clean_rows.dtype == torch.float32
        and int(target_latent_t) > 0
        and shapes
        and int(imgvid_cond_num_frames) == len(shapes)
        and all(len(s) == 3 and min(s) > 0 and s[1] % 2 == 0 and s[2] % 2 == 0 for s in shapes)
        and int(clean_rows.shape[0]) == sum(t * (h // 2) * (w // 2) for t, h, w in shapes)
    )
    if not valid:
        return None
    return ConditionKey(int(seed), int(target_latent_t), shapes, guided)  # type: ignore[arg-type]


# -- helpers ------------------------------------------------------------------------------------


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _is_upstream(fn: Any) -> bool:
    """True if `fn` is vllm-omni's own function (through torch's `no_grad` decorator only).

    A wrapper made with `functools.wraps` copies `__module__` but not `__code__`, so the code's
    file is what tells upstream's function from another plugin's wrapper.
    """
    import torch.utils._contextlib as torch_contextlib

    code = getattr(fn, "__code__", None)
    if code is not None and code.co_filename == torch_contextlib.__file__:
        fn = getattr(fn, "__wrapped__", None)
        code = getattr(fn, "__code__", None)
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    return (
        code is not None
        and module is not None
        and module.__name__.startswith("vllm_omni.")
        and code.co_filename == getattr(module, "__file__", None)
    )


def _vllm_omni_version() -> str | None:
    return installed_version("vllm-omni")


def installed_version(distribution: str) -> str | None:
    """`distribution`'s installed version from package metadata (nothing imported), or None."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _describe(settings: PluginSettings | None) -> str:
    if settings is None:
        try:
            settings = PluginSettings.from_env()
        except SettingsError as error:
            return f"settings invalid: {error}"
    return settings.describe()


def _check_stream(settings: PluginSettings | None) -> None:
    """At install: self-check a named noise stream now (once per process), so a refused one is
    an ERROR line at start-up; every request is then refused too (never drawn natively)."""
    from prenoise.noise import streams as noise_streams

    try:
        stream = (settings or PluginSettings.from_env()).noise_stream
    except SettingsError:
        return
    if stream == noise_streams.NATIVE:
        return
    status = noise_streams.stream_status(stream)
    if not status.usable:
        logger.error(
            "prenoise: noise stream %r is refused in this process (%s); every MiniMax-H3 "
            "request will fail with NoiseStreamError until %s names a stream that passes",
            stream,
            status.float32_error,
            NOISE_STREAM_ENV,
        )


def _say_once(reason: str, message: str, level: int = logging.WARNING) -> None:
    if reason not in _said:
        _said.add(reason)
        logger.log(level, message)
