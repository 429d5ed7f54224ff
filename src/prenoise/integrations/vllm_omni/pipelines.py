"""Named noise streams in vLLM-Omni's other pipelines: Wan2.2, LTX-2, HunyuanVideo-1.5, Qwen-Image
and Stable Audio (the hooked names: `pipeline_targets.TARGETS`).

With `PRENOISE_VLLM_OMNI_NOISE_STREAM=x86|libm` every noise draw these pipelines make from a CPU
generator is drawn in that stream (`prenoise.noise.streams`): bit for bit what upstream draws on
a host whose torch arithmetic is that stream's, the same on x86 and ARM. With `native` (the
default) each hook calls upstream's function directly. Wan2.2 T2V's initial latents are also
prepared ahead, in every stream (`wan_ahead`).

Never silently native: in a named stream, a draw from the request's generator when that
generator is not on the CPU raises `NoiseStreamError` saying what to change
(`generator_device='cpu'`, or the native stream); so does a stream whose self-check fails, and
every request of a pipeline one of whose names could not be hooked (*uncovered*), and every
seeded request of a pipeline class prenoise does not cover at all (Flux, SD3, ...: refused where
vLLM-Omni's runner makes the request's generator, `pipeline_targets.RUNNER_GUARD`). Left to
upstream, each said once in the log: a draw without a generator (the global RNG: an unseeded
request, or a scheduler that is not given one), and a draw from generators upstream makes itself
on the accelerator (LTX-2's euler_ancestral noise, Stable Audio's torchsde noise on a GPU): the
device's arithmetic, not a CPU stream, and no request setting moves it.

Nothing is imported here until a hook is installed, and `install_stream_hooks` imports no
pipeline module itself (importing one may patch other libraries): it hooks those already
imported and, through `import_hooks.AfterImport`, each other one right after it executes. A name
another plugin already replaced is left alone and said once; a hook never raises for what it
finds (a plugin must never stop `vllm serve`). Only the module's own global is rebound: vLLM-Omni
0.30.0 imports none of the hooked functions by name elsewhere.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch

from prenoise.integrations.vllm_omni import digests, live, support, wan_ahead
from prenoise.integrations.vllm_omni.import_hooks import AfterImport
from prenoise.integrations.vllm_omni.pipeline_targets import (
    AHEAD,
    COVERED_CLASSES,
    DRAW,
    GUARD,
    NOT_COVERED,
    PIPELINES,
    TARGETS,
    StreamTarget,
)
from prenoise.integrations.vllm_omni.settings import PluginSettings, SettingsError
from prenoise.noise import streams as noise_streams
from prenoise.noise.stream_mode import StreamDrawMode
from prenoise.noise.streams import NoiseStreamError

__all__ = [
    "PIPELINES",
    "TARGETS",
    "install_stream_hooks",
    "installed_targets",
    "served_counts",
    "uncovered_pipelines",
    "uninstall_stream_hooks",
]

logger = logging.getLogger("prenoise.vllm_omni")

_CPU_HINT = (
    "set generator_device='cpu' in the request's sampling params, or use "
    "PRENOISE_VLLM_OMNI_NOISE_STREAM=native"
)

_lock = threading.Lock()
_said_lock = threading.Lock()  # `_say_once` runs with `_lock` held too
_scope: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "prenoise_vllm_omni_pipeline", default=None
)
_drawing = threading.local()  # set while this thread draws inside a hook


@dataclass
class _Hooked:
    target: StreamTarget
    holder: Any  # the module or class
    original: Any
    hook: Any


@dataclass
class _State:
    pending: dict[str, list[StreamTarget]]
    hooked: list[_Hooked] = field(default_factory=list)
    finder: AfterImport | None = None


_state: _State | None = None
_said: set[str] = set()
_served: dict[str, int] = {}
_uncovered: dict[str, str] = {}  # pipeline -> the name prenoise could not hook, and why


def install_stream_hooks(
    settings: PluginSettings | None = None, *, targets: Iterable[StreamTarget] = TARGETS
) -> None:
    """Hook every target (idempotent): those already imported now, the others when imported.

    `settings` is only for the log line (each hook reads the environment per call, as the
    MiniMax-H3 wrappers do). Never raises for what it finds.
    """
    global _state
    with _lock:
        if _state is not None:
            return
        chosen = tuple(targets)
        pending: dict[str, list[StreamTarget]] = {}
        for target in chosen:
            pending.setdefault(target.module, []).append(target)
        state = _State(pending)
        _state = state
        for name in list(pending):
            module = sys.modules.get(name)
            if module is not None:
                _hook_module_locked(state, module)
        if state.pending:
            state.finder = AfterImport(_is_pending, _hook_after_import)
            state.finder.install()
        hooked_now = len({h.target.module for h in state.hooked})
    stream = settings.noise_stream if settings is not None else "(read per request)"
    # INFO only where it changes draws (a named stream): the install line is the INFO line
    level = logging.DEBUG if stream == noise_streams.NATIVE else logging.INFO
    logger.log(
        level,
        "prenoise: noise-stream hooks ready for %s (noise stream %s; %d module(s) hooked now, "
        "the others when vLLM-Omni imports them)",
        ", ".join(dict.fromkeys(t.pipeline for t in chosen if t.kind != GUARD)),
        stream,
        hooked_now,
    )


def uninstall_stream_hooks() -> None:
    """Restore every hooked name (unless another plugin replaced prenoise's hook since: then
    that name stays, said once) and stop hooking modules imported later."""
    global _state
    with _lock:
        state, _state = _state, None
        if state is None:
            return
        if state.finder is not None:
            state.finder.remove()
        _uncovered.clear()
        for hooked in reversed(state.hooked):
            name = hooked.target.name
            if vars(hooked.holder).get(name) is hooked.hook:
                setattr(hooked.holder, name, hooked.original)
            else:
                _say_once(
                    f"uninstall:{hooked.target.key}",
                    f"prenoise: {hooked.target.key} was replaced by another plugin after "
                    "prenoise hooked it; left as it is",
                )


def installed_targets() -> list[str]:
    """Keys (`StreamTarget.key`) of the names hooked now."""
    with _lock:
        return [] if _state is None else sorted(h.target.key for h in _state.hooked)


def served_counts() -> dict[str, int]:
    """Draws served in a named stream so far, per target key (tests, diagnostics)."""
    with _lock:
        return dict(_served)


def uncovered_pipelines() -> dict[str, str]:
    """Pipelines whose requests a named stream refuses, and why (a name prenoise left alone)."""
    with _lock:
        return dict(_uncovered)


# -- hooking ------------------------------------------------------------------------------------


def _is_pending(fullname: str) -> bool:
    state = _state
    return state is not None and fullname in state.pending


def _hook_after_import(module: ModuleType) -> None:
    with _lock:
        if _state is not None and module.__name__ in _state.pending:
            _hook_module_locked(_state, module)


def _hook_module_locked(state: _State, module: ModuleType) -> None:
    """Hook `module`'s targets (lock held). Never raises: a problem is said once.

    A module whose drawing functions are not the reviewed code (`digests.draw_sites_problem`)
    is still hooked, and its pipelines are uncovered: a named stream refuses their requests
    (a new draw could escape the hooks), native runs them as upstream does."""
    try:
        changed = digests.draw_sites_problem(module.__name__)
    except Exception as error:  # never fail upstream's import
        changed = f"the draw sites of {module.__name__} could not be read ({error!r})"
    targets = state.pending.pop(module.__name__, [])
    pipelines = list(dict.fromkeys(t.pipeline for t in targets if t.kind != GUARD))
    if changed is not None and pipelines:
        for pipeline in pipelines:
            _uncovered.setdefault(pipeline, changed)
        _say_once(
            f"draws:{module.__name__}",
            f"prenoise: {changed}; {', '.join(pipelines)}: with a non-native "
            "PRENOISE_VLLM_OMNI_NOISE_STREAM their requests fail rather than mix streams, "
            "native runs upstream's code (nothing prepared ahead)",
        )
    for target in targets:
        try:
            holder, current, problem = _locate(target, module)
        except Exception as error:  # an upstream module shaped unlike 0.30.0's
            holder, current, problem = None, None, f"could not be read ({error!r})"
        if problem is not None:
            _mark_uncovered(target, problem)
            continue
        hook = _make_hook(target, current)
        setattr(holder, target.name, hook)
        state.hooked.append(_Hooked(target, holder, current, hook))


def _mark_uncovered(target: StreamTarget, problem: str) -> None:
    """A name prenoise cannot hook: that pipeline's requests in a named stream then fail
    (`NoiseStreamError`) rather than mix streams; native is unaffected."""
    if target.kind == GUARD:
        _say_once(
            f"skip:{target.key}",
            f"prenoise: {target.key} {problem}; with a non-native "
            "PRENOISE_VLLM_OMNI_NOISE_STREAM the requests of pipelines prenoise does not cover "
            "(Flux, SD3, ...) cannot be refused and draw local torch's noise: use the native "
            "stream for those models",
            level=logging.ERROR,
        )
        return
    _uncovered.setdefault(target.pipeline, f"{target.key} {problem}")
    _say_once(
        f"skip:{target.key}",
        f"prenoise: {target.key} {problem}; {target.pipeline}'s noise cannot all be drawn in a "
        "noise stream: with a non-native PRENOISE_VLLM_OMNI_NOISE_STREAM its requests fail "
        "rather than mix streams (native is unaffected)",
    )


def _locate(target: StreamTarget, module: ModuleType) -> tuple[Any, Any, str | None]:
    """(holder, the current value, why it cannot be hooked or None)."""
    holder: Any = module
    if target.owner is not None:
        holder = vars(module).get(target.owner)
        if not isinstance(holder, type):
            return None, None, f"(no class {target.owner} in {module.__name__})"
    current = vars(holder).get(target.name)
    if current is None:
        return holder, None, "is missing in this vllm-omni"
    if target.name == "randn_tensor":
        from diffusers.utils import torch_utils

        own = current is torch_utils.randn_tensor and _is_own_function(current, torch_utils)
    else:
        own = _is_own_function(current, module)
    if not own:
        return holder, current, "was already replaced by another plugin (prenoise left it)"
    return holder, current, None


def _is_own_function(fn: Any, module: ModuleType) -> bool:
    """True if `fn` is defined in `module`'s file (through torch's `no_grad` decorator only)."""
    import torch.utils._contextlib as torch_contextlib

    code = getattr(fn, "__code__", None)
    if code is not None and code.co_filename == torch_contextlib.__file__:
        code = getattr(getattr(fn, "__wrapped__", None), "__code__", None)
    return code is not None and code.co_filename == getattr(module, "__file__", None)


def _make_hook(target: StreamTarget, upstream: Callable[..., Any]) -> Callable[..., Any]:
    if target.kind == GUARD:

        @functools.wraps(upstream)
        def guard(*args: Any, **kwargs: Any) -> Any:
            _refuse_uncovered_class(args, kwargs)
            return upstream(*args, **kwargs)

        return guard
    if target.kind != DRAW:

        @functools.wraps(upstream)
        def entry(*args: Any, **kwargs: Any) -> Any:
            return _enter(target, upstream, args, kwargs)

        return entry

    @functools.wraps(upstream)
    def draw(*args: Any, **kwargs: Any) -> Any:
        return _draw(target, upstream, args, kwargs)

    return draw


live.own_wrappers(_make_hook, ("guard", "entry", "draw"), "upstream")  # looked through


def _original(module: str, name: str) -> Callable[..., Any] | None:
    """Upstream's function behind prenoise's hook of `module.name`, if hooked."""
    with _lock:
        if _state is None:
            return None
        for hooked in _state.hooked:
            if hooked.target.module == module and hooked.target.name == name:
                found: Callable[..., Any] = hooked.original
                return found
    return None


# -- the hooks ------------------------------------------------------------------------------------


def _enter(
    target: StreamTarget, upstream: Callable[..., Any], args: tuple[Any, ...], kwargs: Any
) -> Any:
    """A pipeline's `forward`: refuse an uncovered pipeline or a refused stream up front, then
    run upstream's forward inside the pipeline's scope (Wan2.2 T2V: prepared ahead)."""
    settings = _settings()
    if settings is None or not settings.enabled:
        return upstream(*args, **kwargs)
    if settings.noise_stream != noise_streams.NATIVE:
        if target.kind == NOT_COVERED:
            raise NoiseStreamError(
                f"prenoise: PRENOISE_VLLM_OMNI_NOISE_STREAM={settings.noise_stream}: "
                f"{target.pipeline}'s noise is not drawn in noise streams ({target.draws}); use "
                "the native stream"
            )
        _refuse_uncovered(target.pipeline, settings.noise_stream)
        noise_streams.require_usable(settings.noise_stream)
    token = _scope.set(target.pipeline)
    try:
        if target.kind == AHEAD and _ahead_runs(target):
            draw = _original(target.module, "randn_tensor")
            return wan_ahead.run_forward(upstream, args, kwargs, settings, draw, target.module)
        return upstream(*args, **kwargs)
    finally:
        _scope.reset(token)


def _ahead_runs(target: StreamTarget) -> bool:
    """Whether `target`'s prepared-ahead path is the reviewed code here (`support`); where it is
    not, upstream's forward draws (in the stream); `plugin.register` said so once."""
    with _lock:
        uncovered = target.pipeline in _uncovered
    if not support.current().wan_ahead or uncovered:
        return False
    problem = live.problem(support.WAN_AHEAD_PATH)  # the code as it runs now (`live`)
    if problem is not None:
        _say_once(f"live:{problem}", f"prenoise: vllm-omni: {support.WAN_AHEAD_PATH}: "
                  f"upstream's code runs untouched: {problem}")  # fmt: skip
    return problem is None


def _draw(
    target: StreamTarget, upstream: Callable[..., Any], args: tuple[Any, ...], kwargs: Any
) -> Any:
    if getattr(_drawing, "active", False):  # a hooked draw inside a hooked draw: one mode
        return upstream(*args, **kwargs)
    settings = _settings()
    if settings is None or not settings.enabled:
        return upstream(*args, **kwargs)
    stream = settings.noise_stream

    def serial() -> Any:
        return _serial_draw(target, upstream, args, kwargs, stream)

    prepared = wan_ahead.take_pending(target.module, args, kwargs, serial)
    return serial() if prepared is None else prepared


def _serial_draw(
    target: StreamTarget,
    upstream: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    stream: str,
) -> Any:
    """Upstream's draw, in `stream` where it is a CPU-generator draw of a covered pipeline."""
    if stream == noise_streams.NATIVE:
        return upstream(*args, **kwargs)
    if target.scoped and _scope.get() != target.pipeline:
        return upstream(*args, **kwargs)  # not this pipeline's call (the module is shared)
    _refuse_uncovered(target.pipeline, stream)
    left = _left_to_upstream(target, stream, args, kwargs)
    if left is not None:
        _say_once(f"{left[0]}:{target.key}", left[1], level=logging.INFO)
        return upstream(*args, **kwargs)
    noise_streams.require_usable(stream)
    mode = StreamDrawMode(stream)
    _drawing.active = True
    try:
        with mode:
            return upstream(*args, **kwargs)
    finally:
        _drawing.active = False
        with _lock:
            _served[target.key] = _served.get(target.key, 0) + mode.served


def _refuse_uncovered_class(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """`DiffusionModelRunner._initialize_generator(self, sampling_params)`, before upstream's:
    in a named stream, refuse a seeded request of a pipeline class not in `COVERED_CLASSES`.

    An unseeded request draws from the global RNG in every pipeline (left to upstream, said
    once), so it is not refused. Native: nothing is checked."""
    settings = _settings()
    if settings is None or not settings.enabled or settings.noise_stream == noise_streams.NATIVE:
        return
    pipeline = getattr(args[0], "pipeline", None) if args else None
    sampling = kwargs.get("sampling_params", args[1] if len(args) > 1 else None)
    if pipeline is None or sampling is None:
        return  # not a request of a loaded model: upstream's own error, if any
    cls = type(pipeline)
    name = f"{cls.__module__}.{cls.__qualname__}"
    if name in COVERED_CLASSES:
        return
    stream = settings.noise_stream
    if getattr(sampling, "generator", None) is None and getattr(sampling, "seed", None) is None:
        _say_once(
            f"global-rng:{name}",
            f"prenoise: {cls.__qualname__} drew an unseeded request's noise (the global RNG); "
            f"such draws are not in noise stream {stream!r}",
            level=logging.INFO,
        )
        return
    covered = ", ".join(dict.fromkeys(COVERED_CLASSES.values()))
    raise NoiseStreamError(
        f"prenoise: PRENOISE_VLLM_OMNI_NOISE_STREAM={stream}: {cls.__qualname__}'s noise is not "
        f"drawn in noise streams (covered: {covered}); serve this model with "
        "PRENOISE_VLLM_OMNI_NOISE_STREAM=native"
    )


def _refuse_uncovered(pipeline: str, stream: str) -> None:
    with _lock:
        problem = _uncovered.get(pipeline)
    if problem is not None:
        raise NoiseStreamError(
            f"prenoise: PRENOISE_VLLM_OMNI_NOISE_STREAM={stream}: {pipeline}'s noise cannot all "
            f"be drawn in that stream ({problem}); use the native stream"
        )


def _left_to_upstream(
    target: StreamTarget, stream: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str, str] | None:
    """(reason, log line) when this draw is not a CPU-generator draw prenoise may serve; raises
    `NoiseStreamError` when it is the request generator's, on another device."""
    if target.generator_arg is not None:
        given = _argument(args, kwargs, target.generator_arg)
        if given is None:
            return "global-rng", (
                f"prenoise: {target.pipeline} drew noise without a generator (the global RNG: "
                f"an unseeded request) in {target.key}; such draws are not in noise stream "
                f"{stream!r}"
            )
        gens: Sequence[Any] = given if isinstance(given, (list, tuple)) else [given]
        where = [str(g.device) for g in gens if isinstance(g, torch.Generator)]
        off = [d for d in where if d != "cpu"]
    else:
        device = _argument(args, kwargs, target.device_arg) if target.device_arg else None
        off = [] if device is None or torch.device(device).type == "cpu" else [str(device)]
    if not off:
        return None
    if target.own_generators:
        return "device", (
            f"prenoise: {target.pipeline}'s {target.draws} is drawn on {off[0]} by upstream's "
            f"own generator: the device's arithmetic, not a CPU stream; left to upstream under "
            f"noise stream {stream!r}"
        )
    raise NoiseStreamError(
        f"prenoise: PRENOISE_VLLM_OMNI_NOISE_STREAM={stream} draws {target.pipeline}'s noise "
        f"({target.draws}) on the CPU, but this draw's generator is on {off[0]}: {_CPU_HINT}"
    )


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], where: tuple[int, str]) -> Any:
    position, keyword = where
    if keyword in kwargs:
        return kwargs[keyword]
    return args[position] if len(args) > position else None


def _settings() -> PluginSettings | None:
    """The settings of this call; None (upstream's code, said once) if they are bad."""
    try:
        return PluginSettings.from_env()
    except SettingsError as error:
        _say_once(
            "settings",
            f"prenoise: {error}; vLLM-Omni pipelines run upstream's code only",
            level=logging.ERROR,
        )
        return None


def _say_once(reason: str, message: str, level: int = logging.WARNING) -> None:
    with _said_lock:
        if reason in _said:
            return
        _said.add(reason)
    logger.log(level, message)
