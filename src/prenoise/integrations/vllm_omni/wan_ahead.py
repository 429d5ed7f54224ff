"""Wan2.2 T2V: the initial latents drawn on a worker while the text encoder runs.

`run_forward` wraps `Wan22Pipeline.forward` (hooked by `pipelines`). Before upstream's forward
runs it predicts the one draw `prepare_latents` will make — `randn_tensor(shape, generator=the
request generators, device=the pipeline's device, dtype=float32)`, computed from the request
exactly as forward computes it — and submits it to a request-owned `PreparationExecutor`. The
installed forward decides how (`reviewed.WAN_STAGED_FORWARD`, by its digest): 0.30.0/0.31.0rc1's
rounds height, width and num_frames itself (repeated here); 0.32.0rc1's runs per stage role and
takes them from upstream's `effective_wan_dimensions`, which the prediction calls (the pipeline
module's, as forward does), on the FULL stage only: a disaggregated DENOISE / DENOISE_DECODE
stage takes its prompt embeddings (and a TI2V image condition) from another stage, and is left
to upstream with that reason. The
worker draws on *clones* of the request's CPU generators (their states copied), in the settings'
noise stream (native: local torch), with diffusers' own `randn_tensor` on the CPU, where upstream
draws for a CPU generator before its `.to(device)`.

The first `randn_tensor` call of the pipeline module in that forward (`take_pending`) takes the
prepared tensor only when its actual arguments equal the prediction — shape, dtype, device,
layout, the same generator objects in the same order *and* their states unchanged since the
prediction — then puts each request generator where upstream's draw leaves it (the clone's
state) and moves the tensor to the device as upstream does. Any difference: the prepared tensor
is dropped and upstream's serial draw runs (`PRENOISE_VLLM_OMNI_ON_MISMATCH=raise`: raises
`PredictionMismatchError`, as for MiniMax-H3). Either way the pipeline gets upstream's bits and
the generators end in upstream's state, so per-step draws after it (FastWan DMD) are unchanged.

Prepared ahead only when the prediction is certain: a T2V request (no image condition on a TI2V
checkpoint) on a whole-request (FULL) stage, seeded with CPU generators, no request latents,
prompts to encode (no `prompt_embeds`). Otherwise upstream draws serially (in the stream), and
the request's log line says why. `PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT` has nothing to do
here: all outputs of a Wan request are one draw, prepared together.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from prenoise.integrations.vllm_omni import digests
from prenoise.integrations.vllm_omni.reviewed import WAN_STAGED_FORWARD
from prenoise.integrations.vllm_omni.settings import PluginSettings
from prenoise.noise import streams as noise_streams
from prenoise.noise.stream_mode import StreamDrawMode
from prenoise.preparation.executor import PreparationExecutor
from prenoise.preparation.prediction import (
    MismatchPolicy,
    PredictionEvent,
    PredictionMismatchError,
)
from prenoise.preparation.served import KeyedDraw, ServedDraws

__all__ = ["DrawKey", "counts", "run_forward", "take_pending"]

logger = logging.getLogger("prenoise.vllm_omni")
WORKER = "prenoise-vllm-omni-wan"
_NAME = "wan_initial_latents"
_ARGS = ("shape", "generator", "device", "dtype", "layout")  # diffusers' randn_tensor
_FORWARD = "vllm_omni.diffusion.models.wan2_2.pipeline_wan2_2:Wan22Pipeline.forward"
_current: contextvars.ContextVar[_Pending | None] = contextvars.ContextVar(
    "prenoise_vllm_omni_wan", default=None
)
_lock = threading.Lock()
_counts = {"prepared": 0, "taken": 0, "serial": 0, "served_in_stream": 0}


@dataclass(frozen=True)
class DrawKey:
    """The `randn_tensor` call a prepared draw is for (generators by identity and state)."""

    shape: tuple[int, ...]
    dtype: str
    device: str
    layout: str | None
    generators: tuple[int, ...]
    states: tuple[str, ...]


@dataclass(frozen=True)
class _Drawn:
    tensor: torch.Tensor
    started: float
    finished: float
    thread: str


class _Pending:
    """One forward's prepared draw: submitted, then taken once (or dropped at exit)."""

    def __init__(
        self,
        module: str,
        served: ServedDraws,
        key: DrawKey,
        originals: list[torch.Generator],
        settings: PluginSettings,
    ) -> None:
        self.module = module
        self.served = served
        self.key = key
        self.originals = originals
        self.settings = settings
        self.open = True
        self.outcome = "not taken (upstream made no draw)"


def counts() -> dict[str, int]:
    """Prepared / taken / drawn serially (prediction missed) / drawn in a named stream."""
    with _lock:
        return dict(_counts)


def _count(name: str, n: int = 1) -> None:
    with _lock:
        _counts[name] += n


def run_forward(
    upstream: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    settings: PluginSettings,
    draw: Callable[..., torch.Tensor] | None,
    module: str,
) -> Any:
    """Upstream's `Wan22Pipeline.forward(*args, **kwargs)`, its first draw prepared ahead.

    `draw` is upstream's `randn_tensor` as the pipeline module holds it (None: that name is not
    hooked, so nothing could take a prepared draw: not prepared).
    """
    pipeline = args[0] if args else None
    req = args[1] if len(args) > 1 else kwargs.get("req")
    who = f"prenoise: Wan2.2 request {_request_ids(req)}"
    if _current.get() is not None:  # a forward inside a forward: the outer one prepared
        return upstream(*args, **kwargs)
    try:
        plan = "randn_tensor is not hooked" if draw is None else _plan(pipeline, req, module)
    except Exception as error:  # prenoise's planning never fails a request upstream accepts
        plan = f"planning failed: {type(error).__name__}: {error}"
    if isinstance(plan, str):
        logger.info("%s: initial latents not prepared ahead, upstream drew them (%s)", who, plan)
        return upstream(*args, **kwargs)
    assert draw is not None
    key, generator = plan
    originals = _distinct(generator if isinstance(generator, list) else [generator])
    stream = settings.noise_stream
    failed: BaseException | None = None
    with PreparationExecutor(name=WORKER) as executor:
        # the core draws on clones of `originals` and serves on their exact state
        served = ServedDraws(executor, job_name=lambda index, keyed: _NAME)
        pending = _Pending(module, served, key, originals, settings)
        cancel = executor.cancel_event

        def work(clones: tuple[torch.Generator, ...]) -> _Drawn:
            if cancel.is_set():
                raise RuntimeError("request ended before the draw started")
            clone_of = {id(g): c for g, c in zip(originals, clones, strict=True)}
            arg = (
                [clone_of[id(g)] for g in generator]
                if isinstance(generator, list)
                else clone_of[id(generator)]
            )
            return _draw_on_worker(draw, key.shape, arg, stream)

        try:
            served.submit([KeyedDraw(_NAME, key, work, tuple(originals))])
        except ValueError as error:  # a generator whose state cannot be proven equal
            logger.info(
                "%s: initial latents not prepared ahead, upstream drew them (%s)", who, error
            )
            return upstream(*args, **kwargs)
        _count("prepared")
        token = _current.set(pending)
        try:
            return upstream(*args, **kwargs)
        except BaseException as error:
            failed = error
            raise
        finally:
            _current.reset(token)
            pending.open = False
            outcome = f"failed ({type(failed).__name__})" if failed else pending.outcome
            note = "" if stream == noise_streams.NATIVE else f"; noise stream {stream}"
            logger.info(
                "%s: initial latents %s prepared ahead, %s%s", who, key.shape, outcome, note
            )


def take_pending(
    module: str, args: tuple[Any, ...], kwargs: dict[str, Any], serial: Callable[[], Any]
) -> Any:
    """The prepared draw for this `randn_tensor` call of `module`, if one is pending in this
    forward (else None: the caller draws). A call that does not match runs `serial()` instead
    (or raises `PredictionMismatchError` under `on_mismatch=raise`). Once per forward."""
    pending = _current.get()
    if pending is None or not pending.open or pending.module != module:
        return None
    pending.open = False
    actual, device = _actual(args, kwargs)
    requested = time.perf_counter()
    if actual != pending.key:
        pending.served.end(f"{_NAME}: predicted {pending.key!r}, actual {actual!r}")
        if pending.settings.on_mismatch is MismatchPolicy.RAISE:
            raise PredictionMismatchError(_NAME, pending.key, actual)
        PredictionEvent(_NAME, pending.key, actual).log()
        return _drawn_serially(serial(), "the call differed from the prediction")
    # served only on every generator's exact state; each is then where upstream's draw leaves it
    result = pending.served.serve(actual, pending.originals)
    if result is None:
        return _drawn_serially(serial(), str(pending.served.ended))
    waited = time.perf_counter() - requested
    tensor = result.tensor.to(device)
    _count("taken")
    off = max(0.0, (result.finished - result.started) - waited)
    pending.outcome = (
        f"taken; {1000 * off:.1f} ms drawn off the request thread on {result.thread} "
        f"({1000 * waited:.1f} ms waited)"
    )
    return tensor


# -- prediction ---------------------------------------------------------------------------------


def _plan(pipeline: Any, req: Any, module: str) -> tuple[DrawKey, Any] | str:
    """(the predicted call, the request generators) or why it is not predicted; `module`: the
    pipeline module, whose names the installed forward calls."""
    staged = digests.installed_digest(_FORWARD) in WAN_STAGED_FORWARD
    names = vars(sys.modules[module])
    if staged:  # vllm-omni 0.32.0rc1's forward: per stage role
        role = getattr(pipeline, "stage_role", None)
        if role != names["DiffusionStageRole"].FULL:
            return (
                f"stage role {getattr(role, 'value', role)}: a disaggregated stage takes its "
                "inputs from another stage, left to upstream"
            )
    sampling_list = getattr(req, "sampling_params_list", None)
    prompts = getattr(req, "prompts", None)
    if not sampling_list or not prompts:
        return "not a request batch"
    if any(getattr(s, "latents", None) is not None for s in sampling_list):
        return "the request gives its latents"
    if any(not isinstance(p, str) and p.get("prompt_embeds") is not None for p in prompts):
        return "prompt embeddings given: no text encoder to overlap"
    if pipeline.expand_timesteps and any(_has_image(p) for p in prompts):
        return "image-conditioned (TI2V)"
    common = sampling_list[0]
    num_outputs = common.num_outputs_per_prompt or 1
    generator = req.collate_request_generators(num_outputs, None)
    if generator is None:
        return "no generator: an unseeded request"
    gens = generator if isinstance(generator, list) else [generator]
    if not all(isinstance(g, torch.Generator) and g.device.type == "cpu" for g in gens):
        return "a generator is not on the CPU"
    batch = len(prompts) * num_outputs
    if isinstance(generator, list) and len(generator) != batch:
        return "generator count differs from the batch (upstream raises)"
    patch = pipeline.transformer_config.patch_size
    spatial, temporal = pipeline.vae_scale_factor_spatial, pipeline.vae_scale_factor_temporal
    if staged:  # 0.32.0rc1: upstream's own function, as its forward calls it
        height, width, frames = names["effective_wan_dimensions"](common, spatial, temporal, patch)
    else:  # Wan22Pipeline.forward's arithmetic (vllm-omni 0.30.0, 0.31.0rc1)
        mod = spatial * patch[1]
        height = (common.height or 480) // mod * mod
        width = (common.width or 832) // mod * mod
        frames = common.num_frames or 81
        if frames % temporal != 1:
            frames = frames // temporal * temporal + 1
        frames = max(frames, 1)
    # then prepare_latents' (the same on every release)
    shape = (
        batch,
        int(pipeline.transformer_config.in_channels),
        (frames - 1) // temporal + 1,
        int(height) // spatial,
        int(width) // spatial,
    )
    key = _key(shape, gens, torch.device(pipeline.device), torch.float32, None)
    return key, generator


def _has_image(prompt: Any) -> bool:
    """Whether forward sees an image: `_request_image(prompt) is not None` (0.32.0rc1, without its
    warning); 0.30.0/0.31.0rc1 read the same field (a path string: opened, still an image)."""
    if isinstance(prompt, str):
        return False
    image = (prompt.get("multi_modal_data") or {}).get("image")
    if isinstance(image, list):
        image = image[0] if image else None
    return image is not None


def _actual(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """(the call's key, its device); a call of another form gets a key nothing equals."""
    bound = dict(zip(_ARGS, args, strict=False))
    bound.update(kwargs)
    if set(bound) - set(_ARGS) or len(args) > len(_ARGS) or "shape" not in bound:
        return ("unexpected call", tuple(sorted(bound))), bound.get("device")
    given = bound.get("generator")
    listed = given if isinstance(given, list) else [given]
    gens = [g for g in listed if isinstance(g, torch.Generator)]
    if len(gens) != len(listed):
        return ("not generators", repr(given)), bound.get("device")
    device = bound.get("device")
    where = torch.device(device) if device is not None else None
    shape = tuple(int(s) for s in bound["shape"])
    return _key(shape, gens, where, bound.get("dtype"), bound.get("layout")), device


def _key(
    shape: tuple[int, ...],
    gens: Sequence[torch.Generator],
    device: torch.device | None,
    dtype: Any,
    layout: Any,
) -> DrawKey:
    return DrawKey(
        shape,
        str(dtype),
        str(device),
        None if layout is None else str(layout),
        tuple(id(g) for g in gens),
        tuple(_digest(g) for g in _distinct(gens)),
    )


def _digest(generator: torch.Generator) -> str:
    return hashlib.sha1(generator.get_state().numpy().tobytes()).hexdigest()[:16]


def _distinct(gens: Sequence[torch.Generator]) -> list[torch.Generator]:
    return list({id(g): g for g in gens}.values())


def _drawn_serially(tensor: Any, why: str) -> Any:
    _count("serial")
    pending = _current.get()
    if pending is not None:
        pending.outcome = f"not taken: {why}, drawn serially"
    return tensor


# -- the draw -----------------------------------------------------------------------------------


def _draw_on_worker(
    draw: Callable[..., torch.Tensor], shape: tuple[int, ...], generator: Any, stream: str
) -> _Drawn:
    """Upstream's `randn_tensor` on the CPU with the clones, in `stream` (native: no mode)."""
    started = time.perf_counter()
    mode: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if stream != noise_streams.NATIVE:
        noise_streams.require_usable(stream)
        mode = StreamDrawMode(stream)
    with mode:
        tensor = draw(shape, generator=generator, device=torch.device("cpu"), dtype=torch.float32)
    if isinstance(mode, StreamDrawMode):
        _count("served_in_stream", mode.served)
    return _Drawn(tensor, started, time.perf_counter(), threading.current_thread().name)


def _request_ids(req: Any) -> str:
    try:
        ids = getattr(req, "request_ids", None)
    except Exception:
        ids = None
    return ",".join(map(str, ids)) if ids else "(no id)"
