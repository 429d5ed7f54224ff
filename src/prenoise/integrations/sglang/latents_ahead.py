"""Initial noise of SGLang's Wan, HunyuanVideo and LTX-2 pipelines drawn ahead on a CPU generator.

SGLang 0.5.23 makes these pipelines' request generators in `InputValidationStage._generate_seeds`
(one `torch.Generator(...).manual_seed(s)` per output, on the CPU only when the request's or the
pipeline's `generator_device` is `"cpu"`: LTX-2's default, Wan's and HunyuanVideo's when asked)
and draws the initial noise after the text encoders ran, in `LatentPreparationStage.forward` /
`_prepare_grouped_latents` (and `LTX2AVLatentPreparationStage.forward` for LTX-2's video and
audio), through diffusers' `randn_tensor`: one `torch.randn(shape, generator=g, device="cpu",
dtype=..., layout=torch.strided)` per generator of the request (row `i` of a batch of `n > 1`
drawn as `(1, ...)` on generator `i`; one generator draws the whole shape).

The pipelines: exactly `WanPipeline`, `HunyuanVideoPipeline`, `LTX2Pipeline` and the two-stage
`LTX2TwoStagePipeline` / `LTX2TwoStageHQPipeline` (their stage-1 noise, at the halved
resolution; stage 2's new generators draw upstream's way).

What this module does (the pipelines' own arithmetic is in `standard_latents` and
`ltx2_latents`):

- At request entry (`ComposedPipelineBase.forward` / `forward_batch` of a supported pipeline,
  dispatched by `plugin`) it opens a request-owned `RequestLatents` (a one-thread
  `PreparationExecutor`); nothing is drawn yet, as the generators do not exist.
- When `InputValidationStage.forward` returned (the generators made, every input adjusted), it
  predicts each `randn_tensor` call the latent stage will make and submits one `KeyedDraw` per
  `torch.randn` row to the core's `ServedDraws`, with the request's own generators as the
  draws' caller-owned generators: the worker draws on their clones while the text encoders run.
- During the latent stage's draw method (AROUND hooks) a thread-local `TorchFunctionMode` on the
  request thread answers exactly the `torch.randn` calls on a planned generator: served only when
  the call's key (`RandnKey`: shape, dtype, CPU, the generator's identity) equals the planned one
  and the generator is byte for byte where its clone started; the generator is then set to the
  clone's end state. Upstream's code runs unchanged around it (`randn_tensor`'s device check and
  `.to(device)`, packing, scaling). Anything else — another key or form of call, a moved
  generator, a failed draw — ends that request's plan (pending draws cancelled, the running one
  joined) and torch draws as always.

Never prepared: device (CUDA) generators (upstream's draw untouched), requests that give their
latents, a generator count that differs from the batch (upstream raises).

Under a named noise stream (`latents_streams`) the request's `RequestLatents` draws its plan in
that stream (the stream is part of each key), the latent stage's method runs inside a
`StreamDrawMode` below the serving mode (a draw not served is drawn in the stream by upstream's
own call), and a device generator fails the request when input validation made it.

Bitwise: a served tensor equals what `torch.randn` returns for that call in values, shape,
dtype, device (CPU) and strides (contiguous), and the generator ends where torch leaves it, so
every tensor the latent stage produces is upstream's; the global RNG is never used.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import operator
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from prenoise.integrations.sglang import latents_streams, ltx2_latents, standard_latents
from prenoise.integrations.sglang.reviewed import (
    LTX2_LATENTS_PATH,
    LTX2_STREAMS_PATH,
    LTX2_TWO_STAGE_LATENTS_PATH,
    LTX2_TWO_STAGE_STREAMS_PATH,
    STANDARD_LATENTS_PATH,
    STANDARD_STREAMS_PATH,
)
from prenoise.integrations.sglang.standard_latents import NotPredicted, RandnCall
from prenoise.noise.stream_mode import StreamDrawMode
from prenoise.noise.streams import NATIVE
from prenoise.preparation.draws import Draw, HalfDrawRule
from prenoise.preparation.executor import PreparationExecutor
from prenoise.preparation.served import KeyedDraw, ServedDraws, rows_work

__all__ = [
    "DRAW_SITE_HOOKS",
    "ENTRY_HOOKS",
    "KINDS",
    "WORKER",
    "RandnKey",
    "RequestLatents",
    "current",
    "draw_observers",
    "kind_of",
    "run_request",
    "serve_observers",
]

logger = logging.getLogger("prenoise.sglang")

WORKER = "prenoise-sglang-latents"
"""Thread-name prefix of the request's worker."""

_PIPELINES = "sglang.multimodal_gen.runtime.pipelines."
_STAGES = "sglang.multimodal_gen.runtime.pipelines_core.stages."
_INPUT = _STAGES + "input_validation.InputValidationStage"
_LATENT = _STAGES + "latent_preparation.LatentPreparationStage"
_LTX2_LATENT = (
    _STAGES + "model_specific_stages.ltx_2.latent_preparation_av.LTX2AVLatentPreparationStage"
)


@dataclass(frozen=True)
class _Kind:
    name: str
    path: str
    module: str
    cls: str
    predict: Callable[[Any, Any, Any], tuple[RandnCall, ...]]
    stream_path: str
    """The path that draws this pipeline's requests in a named noise stream."""


KINDS: tuple[_Kind, ...] = (
    _Kind("Wan", STANDARD_LATENTS_PATH, _PIPELINES + "wan_pipeline", "WanPipeline",
          standard_latents.predict, STANDARD_STREAMS_PATH),
    _Kind("HunyuanVideo", STANDARD_LATENTS_PATH, _PIPELINES + "hunyuan_pipeline",
          "HunyuanVideoPipeline", standard_latents.predict, STANDARD_STREAMS_PATH),
    _Kind("LTX-2", LTX2_LATENTS_PATH, _PIPELINES + "ltx_2_pipeline", "LTX2Pipeline",
          ltx2_latents.predict, LTX2_STREAMS_PATH),
    _Kind("LTX-2 two-stage", LTX2_TWO_STAGE_LATENTS_PATH, _PIPELINES + "ltx_2_pipeline",
          "LTX2TwoStagePipeline", ltx2_latents.predict, LTX2_TWO_STAGE_STREAMS_PATH),
    _Kind("LTX-2 two-stage HQ", LTX2_TWO_STAGE_LATENTS_PATH, _PIPELINES + "ltx_2_pipeline",
          "LTX2TwoStageHQPipeline", ltx2_latents.predict, LTX2_TWO_STAGE_STREAMS_PATH),
)  # fmt: skip
"""The pipelines prepared here: exactly these classes (subclasses change stages: left alone)."""

DrawObserver = Callable[[str, "RandnKey", str, torch.Tensor], None]
draw_observers: list[DrawObserver] = []
"""Told `(label, key, worker thread name, tensor)` after each prepared draw (tests, tools)."""
ServeObserver = Callable[[str, int, int], None]
serve_observers: list[ServeObserver] = []
"""Told `(pipeline kind, draws served, draws planned)` per planned batch when its request ends
(tests)."""

_current: contextvars.ContextVar[RequestLatents | None] = contextvars.ContextVar(
    "prenoise_sglang_latents", default=None
)
_serving: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "prenoise_sglang_latents_serving", default=False
)


def kind_of(pipeline: Any) -> _Kind | None:
    """The supported pipeline kind `pipeline` is an instance of (its exact class), or None."""
    for kind in KINDS:
        cls = getattr(sys.modules.get(kind.module), kind.cls, None)  # not imported: not it
        if isinstance(cls, type) and type(pipeline) is cls:
            return kind
    return None


@dataclass(frozen=True)
class RandnKey:
    """One `torch.randn` call: its shape, dtype, device type, the generator's identity and the
    noise stream it is drawn in."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    device: str
    generator: int
    stream: str = NATIVE


def _row_draws(
    calls: Sequence[RandnCall], generators: Sequence[torch.Generator], tag: str, stream: str
) -> list[KeyedDraw]:
    """One keyed draw per `torch.randn` row `randn_tensor` makes for `calls`, in call order."""
    planned = []
    for call in calls:
        if len(generators) == 1:
            rows = [(call.shape, generators[0])]
        elif call.shape and call.shape[0] == len(generators):
            rows = [((1, *call.shape[1:]), g) for g in generators]
        else:
            raise NotPredicted(f"{len(generators)} generators for a batch of {call.shape[:1]}")
        for i, (shape, generator) in enumerate(rows):
            label = f"{call.label}.{i}{tag}"
            key = RandnKey(shape, call.dtype, "cpu", id(generator), stream)
            draw = Draw(label, shape, call.dtype, half_rule=HalfDrawRule.NATIVE)
            planned.append(KeyedDraw(label, key, _work(label, key, draw, stream), (generator,)))
    return planned


def _work(
    label: str, key: RandnKey, draw: Draw, stream: str
) -> Callable[[tuple[torch.Generator, ...]], Any]:
    rows = rows_work([draw], noise_stream=stream)

    def work(clones: tuple[torch.Generator, ...]) -> torch.Tensor:
        tensor = rows(clones)
        for observer in list(draw_observers):
            observer(label, key, threading.current_thread().name, tensor)
        return tensor

    return work


def _generators(batch: Any) -> list[torch.Generator]:
    """The request's generators as `randn_tensor` will use them; `NotPredicted` for anything
    but plain CPU `torch.Generator`s (a device generator's draw is upstream's, untouched)."""
    given = getattr(batch, "generator", None)
    listed: list[Any] = list(given) if isinstance(given, list) else [given]
    if not listed or any(type(g) is not torch.Generator for g in listed):
        raise NotPredicted("the generator is not a plain torch.Generator")
    gens: list[torch.Generator] = listed
    if any(g.device.type != "cpu" for g in gens):
        raise NotPredicted(f"a {gens[0].device.type} generator: upstream's draw, untouched")
    if len({id(g) for g in gens}) != len(gens):
        raise NotPredicted("one generator listed twice")
    return gens


class RequestLatents:
    """The request-owned preparation of one `forward` / `forward_batch` call of a supported
    pipeline. A context manager: leaving it ends every plan not served (pending draws
    cancelled, a running one joined) and shuts the worker down; an exception raised inside
    propagates unchanged.

    Bitwise: `serve_randn` returns a tensor only for the planned `torch.randn` call on a
    generator in exactly its clone's start state — the same values, shape, dtype, CPU device
    and contiguous strides torch would return — and leaves the generator where torch would;
    otherwise it returns None and torch draws. The global RNG is never used."""

    def __init__(
        self, kind: _Kind, pipeline: Any, batches: Sequence[Any], noise_stream: str = NATIVE
    ) -> None:
        self.kind, self.pipeline, self.noise_stream = kind, pipeline, noise_stream
        self.executor = PreparationExecutor(name=WORKER)
        self._expected = {id(b) for b in batches}
        self._plans: dict[int, ServedDraws] = {}  # id(batch) -> its plan
        self._owner: dict[int, ServedDraws] = {}  # id(generator) -> the plan that draws it
        self._submitted = 0
        self.skipped: dict[int, str] = {}
        """id(batch) -> why nothing was prepared for it."""

    def __enter__(self) -> RequestLatents:
        self.executor.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            for served in self._plans.values():
                why = served.finish()
                for observer in list(serve_observers):
                    observer(self.kind.name, served.served, len(served.planned))
                if why is not None:
                    logger.info("prenoise: %s initial noise drawn by upstream: %s",
                                self.kind.name, why)  # fmt: skip
            self._plans.clear()
            self._owner.clear()
        finally:
            self.executor.__exit__(*exc)

    @property
    def active(self) -> bool:
        return any(served.active for served in self._plans.values())

    def submit(self, batch: Any, server_args: Any) -> None:
        """Predict and submit `batch`'s draws (once, after its input validation); never raises."""
        if id(batch) not in self._expected or id(batch) in self._plans:
            return
        try:
            calls = self.kind.predict(self.pipeline, batch, server_args)
            gens = _generators(batch)
            if any(id(g) in self._owner for g in gens):
                raise NotPredicted("a generator shared with another request of the call")
            planned = _row_draws(calls, gens, f"@{self._submitted}", self.noise_stream)
            if not planned:
                raise NotPredicted("upstream draws no initial noise for it")
            served = ServedDraws(self.executor, job_name=lambda _i, d: d.label)
            served.submit(planned)
        except NotPredicted as why:
            self.skipped[id(batch)] = str(why)
            logger.debug("prenoise: %s initial noise not prepared: %s", self.kind.name, why)
            return
        except Exception as error:  # prenoise's planning never fails a request upstream runs
            self.skipped[id(batch)] = f"not predicted: {error!r}"
            logger.debug("prenoise: %s initial noise not prepared: %r", self.kind.name, error)
            return
        self._submitted += 1
        self._plans[id(batch)] = served
        for g in gens:
            self._owner[id(g)] = served

    def serve_randn(self, args: Sequence[Any], kwargs: dict[str, Any]) -> torch.Tensor | None:
        """The prepared tensor for `torch.randn(*args, **kwargs)`, or None: torch draws. A call
        on a planned generator that is not the planned call ends that generator's plan."""
        generator = kwargs.get("generator")
        if not isinstance(generator, torch.Generator):
            return None
        served = self._owner.get(id(generator))
        if served is None or not served.active:
            return None
        try:
            key = _call_key(args, kwargs, generator, self.noise_stream)
        except Exception as error:  # torch itself says what is wrong with such a call
            key = f"whose arguments do not read ({error!r})"
        if isinstance(key, str):
            served.end(f"a torch.randn call on a planned generator {key}")
            return None
        tensor: torch.Tensor | None = served.serve(key, (generator,))
        return tensor


def _call_key(
    args: Sequence[Any], kwargs: dict[str, Any], generator: Any, stream: str
) -> RandnKey | str:
    """The key of `torch.randn(shape, generator=, device=, dtype=, layout=)` — the form
    `randn_tensor` calls — in the request's noise `stream`, or why the call has another
    form."""
    if set(kwargs) - {"generator", "device", "dtype", "layout"} or len(args) != 1:
        return f"of another form ({len(args)} positional, {sorted(kwargs)})"
    shape = args[0]
    if not isinstance(shape, tuple | list | torch.Size) or any(
        isinstance(s, bool) or not isinstance(s, int) for s in shape
    ):
        return f"with shape {shape!r}"
    if kwargs.get("layout") not in (None, torch.strided):
        return f"with layout {kwargs['layout']}"
    device = kwargs.get("device")
    where = torch.device(device) if device is not None else torch.get_default_device()
    dtype = kwargs.get("dtype")
    dtype = torch.get_default_dtype() if dtype is None else dtype
    if not isinstance(dtype, torch.dtype):
        return f"with dtype {dtype!r}"
    return RandnKey(tuple(map(operator.index, shape)), dtype, where.type, id(generator), stream)


class _ServeRandn(TorchFunctionMode):
    """Answers this thread's `torch.randn` calls on the request's planned generators."""

    def __init__(self, request: RequestLatents) -> None:
        super().__init__()
        self.request = request

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is torch.randn:
            tensor = self.request.serve_randn(args, kwargs)
            if tensor is not None:
                return tensor
        return func(*args, **kwargs)


def current() -> RequestLatents | None:
    """The latents request open on this thread (None outside one)."""
    return _current.get()


def run_request(
    kind: _Kind,
    original: Callable[..., Any],
    pipeline: Any,
    batches: list[Any],
    *a: Any,
    noise_stream: str = NATIVE,
    **k: Any,
) -> Any:
    """Upstream's `forward` / `forward_batch` within a `RequestLatents` whose draws are in
    `noise_stream` (a nested call: as is)."""
    if _current.get() is not None:
        return original(pipeline, *a, **k)
    with RequestLatents(kind, pipeline, batches, noise_stream) as request:
        token = _current.set(request)
        try:
            return original(pipeline, *a, **k)
        finally:
            _current.reset(token)


def around_input_validation(
    original: Callable[..., Any], stage: Any, *args: Any, **kwargs: Any
) -> Any:
    """AROUND `InputValidationStage.forward(self, batch, server_args)`: upstream's forward, then
    (in a supported request) the batch's draws are predicted and submitted."""
    result = original(stage, *args, **kwargs)
    request = _current.get()
    if request is not None:
        batch = args[0] if args else kwargs.get("batch")
        server_args = args[1] if len(args) > 1 else kwargs.get("server_args")
        if result is batch:
            if request.noise_stream != NATIVE:  # a device generator: refused before any draw
                latents_streams.check_generators(request.pipeline, batch, request.noise_stream)
            request.submit(batch, server_args)
    return result


def around_draw_site(original: Callable[..., Any], stage: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND a latent stage's drawing method (`LatentPreparationStage.forward`,
    `_prepare_grouped_latents`, `LTX2AVLatentPreparationStage.forward`): upstream's method runs
    as is; within it, this thread's `torch.randn` calls on planned generators are answered."""
    request = _current.get()
    stream = latents_streams.site_stream()
    if _serving.get():
        return original(stage, *args, **kwargs)  # nested: the outer call's modes serve it
    token = _serving.set(True)
    try:
        with contextlib.ExitStack() as modes:
            if stream != NATIVE:  # upstream's own draws (served or not) in the stream
                modes.enter_context(StreamDrawMode(stream))
            if request is not None and request.active:
                modes.enter_context(_ServeRandn(request))
            return original(stage, *args, **kwargs)
    finally:
        _serving.reset(token)


ENTRY_HOOKS: tuple[tuple[str, Callable[..., Any]], ...] = (
    (f"{_INPUT}.forward", around_input_validation),
)
"""Registered with the forward hooks when a latents path is on: where the draws are submitted."""

DRAW_SITE_HOOKS: dict[str, tuple[tuple[str, Callable[..., Any]], ...]] = {
    STANDARD_LATENTS_PATH: (
        (f"{_LATENT}.forward", around_draw_site),
        (f"{_LATENT}._prepare_grouped_latents", around_draw_site),
    ),
    LTX2_LATENTS_PATH: (
        (f"{_LATENT}.forward", around_draw_site),
        (f"{_LTX2_LATENT}.forward", around_draw_site),
    ),
    LTX2_TWO_STAGE_LATENTS_PATH: (
        (f"{_LATENT}.forward", around_draw_site),
        (f"{_LTX2_LATENT}.forward", around_draw_site),
    ),
}
"""Path -> the draw sites it serves (a target listed twice is registered once)."""
