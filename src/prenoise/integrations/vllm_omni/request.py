"""One H3 request's noise preparation: eligibility, shape prediction, submission, consumption.

`RequestPreparation` is opened around `MiniMaxH3Pipeline.forward` (see `plugin`). When the
request's media plan is known (`prepare_encoder_inputs` returned, the text encoder has not run),
`start` submits the first output's initial video/audio noise and visual-condition noise to a
request-owned `PreparationExecutor` (Ref2VA, T2VA and FL2VA requests; for a Ref2VA continuation
request its first window's, see `h3_continuation`).
`_initial_noise` and the condition-noise function then take what was prepared — only when the
pipeline's actual arguments equal the prediction — and otherwise run upstream's serial code
unchanged (or raise, with `on_mismatch=raise`). Submission, serving and discarding are the
engine-neutral core's (`prenoise.preparation.served.ServedDraws`, one plan per key: an output's
initial video+audio noise, its condition noise): a mismatch ends that plan (pending draws
cancelled, the running one joined) and each of its fields runs upstream's serial draw.

Never drawn twice: where upstream draws a Ref2VA request's first output ahead itself
(`support.Support.upstream_prepares_ref2va`, vllm-omni 0.32.0rc1), prenoise submits nothing of
it but what upstream still draws serially: a timeline-guided request's condition rows (the
`guided` recipe: `(rows, 96)` per condition, each from a generator seeded with the output seed).
The next output (`PRENOISE_VLLM_OMNI_PREPARE_NEXT_OUTPUT=1`) is prepared when upstream's
condition mix of this one starts, as after a take; with the same setting a continuation request's
next window is prepared when this window took its noise (upstream draws no continuation ahead
itself on any release).

Bitwise guarantee: the prepared tensors are the draws of the Ref2VA contract
(`prenoise.ref2va.noise`), identical in values, shape, dtype, device and strides to upstream's
`torch.randn` + patchify, drawn in the settings' noise stream (`PRENOISE_VLLM_OMNI_NOISE_STREAM`:
native = local torch; `x86`/`libm`: torch's values on a host of that arithmetic, see
`streams`); the condition mix is `prenoise.mix_conditions` (two rounded products
and one rounded sum with CPU float32 coefficients) on the clean rows' device, which is what
upstream computes on the CPU before its `.to(device)`.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch

from prenoise.guards.cancel import CancelEvent
from prenoise.integrations.vllm_omni import support
from prenoise.integrations.vllm_omni.h3_continuation import (
    WindowKeys,
    continuation_keys,
    resolved_continuation,
)
from prenoise.integrations.vllm_omni.h3_keys import (
    ConditionKey,
    DrawRecord,
    InitialNoiseKey,
    record_name,
)
from prenoise.integrations.vllm_omni.h3_mix import (
    mix_condition_rows,
    mix_guided_rows,
    serve_condition_rows,
)
from prenoise.integrations.vllm_omni.h3_seeds import num_outputs, request_seed, torch_seed
from prenoise.integrations.vllm_omni.h3_shapes import (
    guided_condition_streams,
    predict_condition_shapes,
    predict_guided_shapes,
)
from prenoise.integrations.vllm_omni.settings import PluginSettings
from prenoise.preparation.draws import run_stream
from prenoise.preparation.executor import PreparationExecutor
from prenoise.preparation.prediction import (
    MismatchPolicy,
    PredictionEvent,
    PredictionMismatchError,
)
from prenoise.preparation.served import KeyedDraw, ServedDraws
from prenoise.ref2va.noise import condition_streams, initial_noise_streams

__all__ = [
    "ConditionKey",
    "DrawRecord",
    "InitialNoiseKey",
    "RequestPreparation",
    "adopted",
    "current_request",
    "mix_condition_rows",
    "mix_guided_rows",
    "observe_draws",
    "predict_condition_shapes",
    "predict_guided_shapes",
    "record_name",
    "serve_condition_rows",
]

logger = logging.getLogger("prenoise.vllm_omni")
_current: contextvars.ContextVar[RequestPreparation | None] = contextvars.ContextVar(
    "prenoise_vllm_omni_request", default=None
)
DrawObserver = Callable[[str, int, torch.Tensor], None]
_observers: list[DrawObserver] = []
_open: list[RequestPreparation] = []  # every request preparation open in this process
_open_lock = threading.Lock()
PREPARED_TASKS = ("ref2va", "t2va", "fl2va")

VIDEO, AUDIO, CONDITION = "initial_video_noise", "initial_audio_noise", "visual_condition_noise"


def current_request() -> RequestPreparation | None:
    """The preparation of the request running on this thread (None outside a request)."""
    return _current.get()


@contextlib.contextmanager
def adopted(pipeline: Any) -> Iterator[None]:
    """On a thread outside any request (upstream's own worker, 0.32.0rc1, which a context
    variable does not reach): run as the request open in this process — the one on `pipeline`
    (None: the only one open) — so its draws are in its stream and counted. No-op on a request's
    own thread, and where that request is not unique (the stream is then the environment's,
    which every request of the process reads too)."""
    if _current.get() is not None:
        yield
        return
    with _open_lock:
        found = [r for r in _open if pipeline is None or r.pipeline is pipeline]
    if len(found) != 1:
        yield
        return
    token = _current.set(found[0])
    try:
        yield
    finally:
        _current.reset(token)


class observe_draws:
    """Call `observer(name, seed, tensor)` for every prepared tensor when it is drawn.

    For verification and tests (weakrefs, digests); observers run on the worker thread.
    """

    def __init__(self, observer: DrawObserver) -> None:
        self.observer = observer

    def __enter__(self) -> None:
        _observers.append(self.observer)

    def __exit__(self, *exc: object) -> None:
        _observers.remove(self.observer)


@dataclass
class _Plan:
    """What was submitted for one output seed."""

    initial: InitialNoiseKey
    condition: ConditionKey | None
    names: dict[str, str] = field(default_factory=dict)
    served: dict[str, ServedDraws] = field(default_factory=dict)
    """Field name -> the core's plan that serves it (one per key)."""
    upstream: bool = False
    """Upstream draws this output's initial noise ahead itself (and its dependent-recipe
    condition noise); prenoise submitted only what upstream draws serially."""
    windows: tuple[WindowKeys, ...] = ()
    """A continuation request: every window's keys for this output (`initial`/`condition` are
    window `window`'s)."""
    window: int = 0


class RequestPreparation:
    """The request-owned preparation state of one `forward` call (a context manager)."""

    def __init__(
        self,
        pipeline: Any,
        sampling: Any,
        settings: PluginSettings,
        request_id: Any = None,
        code: support.Support | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.code = code if code is not None else support.current()
        self.sampling = sampling
        self.settings = settings
        self.request_id = request_id
        self.executor = PreparationExecutor(name="prenoise-vllm-omni")
        self.records: dict[str, DrawRecord] = {}
        self.skipped: str | None = None
        self._plans: dict[int, _Plan] = {}
        self._shared = False
        self._first_seed: int | None = None
        self._upstream_first = False  # upstream draws the first output ahead itself (0.32)
        self._num_outputs = 1
        self._continuation: tuple[int, int] | None = None  # (window, overlap) frames
        self._token: contextvars.Token[RequestPreparation | None] | None = None
        self._lock = threading.Lock()
        self.serial_streamed = 0
        """Draws upstream's serial code made in the named noise stream (`streams.run_serial`)."""

    def note_serial_streamed(self, count: int) -> None:
        """Count `count` serial draws drawn in the settings' named noise stream."""
        with self._lock:
            self.serial_streamed += count

    # -- lifetime ----------------------------------------------------------------------------
    def __enter__(self) -> RequestPreparation:
        self.executor.__enter__()
        self._token = _current.set(self)
        with _open_lock:
            _open.append(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._token is not None
        _current.reset(self._token)
        with _open_lock:
            _open.remove(self)
        self._plans.clear()
        try:
            # Cancels pending draws, joins the running one; `exc` propagates unchanged.
            self.executor.__exit__(exc_type, exc, tb)
        finally:
            logger.info("%s", self.summary(exc))

    def summary(self, exc: BaseException | None = None) -> str:
        """The request's one log line: prepared ahead (how much left the request thread) or not.

        `exc` is the exception the request ended with, if any.
        """
        who = f"prenoise: request {self.request_id or '(no id)'}"
        if exc is not None:
            why = f"noise not prepared ahead: {self.skipped}" if self.skipped else "draws dropped"
            return f"{who}: failed ({type(exc).__name__}); {why}{self._stream_note()}"
        if self.skipped is not None:
            return (
                f"{who}: noise not prepared ahead, upstream drew it ({self.skipped})"
                f"{self._stream_note()}"
            )
        with self._lock:
            records = list(self.records.values())
        upstream = (
            "; the first output's drawn ahead by upstream itself" if self._upstream_first else ""
        )
        if not records and self._upstream_first:
            return (
                f"{who}: the first output's noise drawn ahead by upstream itself, nothing left "
                f"for prenoise{self._stream_note()}"
            )
        if not records:
            return (
                f"{who}: noise not prepared ahead, upstream drew it (no media plan)"
                f"{self._stream_note()}"
            )
        used = [r for r in records if r.used]
        off_ms = 1000 * sum(r.off_request_thread for r in used)
        waited_ms = 1000 * sum(r.waited for r in used)
        line = (
            f"{who}: noise prepared ahead, {len(used)} of {len(records)} draws taken, "
            f"{off_ms:.1f} ms drawn off the request thread ({waited_ms:.1f} ms waited)"
        )
        if self.prediction_events:
            line += f"; {len(self.prediction_events)} ran upstream's serial draw (shape mismatch)"
        return line + upstream + self._stream_note()

    def _stream_note(self) -> str:
        """`; noise stream x86 (…)` for a named stream; nothing for `native`."""
        stream = self.settings.noise_stream
        if stream == "native":
            return ""
        with self._lock:
            ahead = sum(1 for r in self.records.values() if r.used)
            serial = self.serial_streamed
        return f"; noise stream {stream} ({ahead} drawn ahead, {serial} drawn serially in it)"

    @property
    def prediction_events(self) -> list[PredictionEvent]:
        """Mismatches handled by running upstream's serial code instead."""
        return self.executor.prediction_events

    # -- start: called with the media plan, before the text encoder runs -----------------------
    def start(self, prepared: Any) -> None:
        """Submit the first output's draws if the request is eligible (else record why not)."""
        try:
            reason = self._ineligible(prepared) or self._plan_first_output(prepared)
        except Exception as error:  # prenoise's planning never fails a request upstream accepts
            reason = f"planning failed: {type(error).__name__}: {error}"
            logger.warning("prenoise: request %s: %s", self.request_id or "(no id)", reason)
        if reason is not None:
            self.skipped = reason
            self._plans.clear()

    def _plan_first_output(self, prepared: Any) -> str | None:
        """Submit the first output's draws; a reason instead when upstream must draw them."""
        media = prepared.media
        seed = request_seed(self.sampling)
        if seed is None:
            return f"seed {self.sampling.seed!r} is not an integer (upstream decides)"
        outputs = num_outputs(self.sampling)
        if torch_seed(seed) is None or torch_seed(seed + outputs - 1) is None:
            return f"seed {seed} is outside torch's seed range (upstream decides)"
        self._first_seed = seed
        self._num_outputs = outputs
        initial = InitialNoiseKey(
            seed, int(media.latent_t), media.height // 16, media.width // 16, int(media.audio_t)
        )
        guides = tuple(getattr(media, "timeline_guides", None) or ())
        if guides:
            shapes = predict_guided_shapes(self.pipeline, media, guides)
        else:
            shapes = predict_condition_shapes(self.pipeline, media)
        condition = ConditionKey(seed, initial.latent_t, shapes, bool(guides)) if shapes else None
        if self._continuation is not None:
            if shapes is None:
                return "the video VAE does not expose its alignment methods (continuation)"
            window, overlap = self._continuation
            windows = continuation_keys(
                seed,
                int(media.num_frames),
                window,
                overlap,
                initial.latent_h,
                initial.latent_w,
                shapes,
            )
            self._submit(*windows[0], windows=windows)  # upstream draws no continuation ahead
            return None
        # never twice: upstream draws this Ref2VA output's initial noise ahead (and, without
        # guides, its condition noise); prenoise draws what upstream still draws serially
        upstream = self.code.upstream_prepares_ref2va and media.task == "ref2va"
        self._upstream_first = upstream
        self._submit(initial, condition, upstream=upstream)
        return None

    def share_plan(self) -> None:
        """Multi-rank: rank 0 broadcasts its first-output plan so every rank prepares ahead.

        Upstream prepares media on rank 0 only; this is one `broadcast_object_list` on the DiT
        group, made by every rank at the same point (the request's first `encode_prompt`), the
        way the pipeline broadcasts its own rank-0 results. Each rank still takes its prepared
        noise only when its actual arguments equal the plan. Once per request; no-op on 1 rank.
        """
        if self._shared:
            return
        self._shared = True
        from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

        group, rank, world_size = upstream._dit_rank_world()
        if world_size == 1:
            return
        first = self._plans.get(self._first_seed) if self._first_seed is not None else None
        payload: list[Any] = [None]
        if rank == 0 and first is not None:
            payload = [
                (first.initial, first.condition, self._num_outputs, first.upstream, first.windows)
            ]
        torch.distributed.broadcast_object_list(payload, src=0, group=group)
        if rank != 0 and payload[0] is not None and not self._plans:
            initial, condition, self._num_outputs, upstream_first, windows = payload[0]
            self._first_seed = initial.seed
            self._upstream_first = upstream_first
            self._submit(initial, condition, upstream=upstream_first, windows=windows)

    def _ineligible(self, prepared: Any) -> str | None:
        if not self.code.h3_ahead:
            problem = self.code.problems[support.H3_AHEAD_PATH]
            if problem.startswith("the code that runs"):  # `live`: said as it is
                return problem
            return f"this vllm-omni's {problem.split(' (', 1)[0]} is not the reviewed code"
        task = getattr(prepared.media, "task", None)
        if task not in PREPARED_TASKS:
            return f"task {task!r} (prepared ahead: {', '.join(PREPARED_TASKS)})"
        extra = getattr(self.sampling, "extra_args", None) or {}
        if task == "ref2va":
            self._continuation = resolved_continuation(self.pipeline, self.sampling, task)
        if extra.get("continuation_prompts") is not None and self._continuation is None:
            return "continuation prompts without continuation mode (upstream refuses them)"
        if self._continuation is not None and getattr(prepared.media, "timeline_guides", None):
            return "continuation request with timeline guides"
        if not getattr(self.pipeline, "load_vae_encoder", True):
            return "media conditioning comes from the encoder stage"
        return None

    def _submit(
        self,
        initial: InitialNoiseKey,
        condition: ConditionKey | None,
        *,
        upstream: bool = False,
        windows: tuple[WindowKeys, ...] = (),
        window: int = 0,
    ) -> None:
        """Submit an output's draws (a continuation request: window `window` of `windows`);
        with `upstream`, only what upstream does not draw ahead itself (a guided request's
        condition rows)."""
        plan = _Plan(initial, condition, upstream=upstream, windows=windows, window=window)
        seed = torch_seed(initial.seed)
        assert seed is not None  # checked for every output seed when the request was planned
        stream = self.settings.noise_stream  # the worker draws in the request's noise stream
        cancel = self.executor.cancel_event  # set when the request fails: draws stop early
        jobs: list[tuple[str, Callable[[], torch.Tensor], InitialNoiseKey | ConditionKey]] = []
        if not upstream:
            video, audio = initial_noise_streams(
                seed,
                initial.latent_t,
                initial.latent_h,
                initial.latent_w,
                initial.audio_t,
                noise_stream=stream,
            )
            jobs += [
                (VIDEO, lambda: run_stream(video, cancel=cancel)[VIDEO], initial),
                (AUDIO, lambda: run_stream(audio, cancel=cancel)[AUDIO], initial),
            ]
        if condition is not None and (condition.guided or not upstream):
            if condition.guided:
                streams = guided_condition_streams(
                    seed, condition.condition_shapes, noise_stream=stream
                )
            else:
                streams = condition_streams(
                    seed, condition.target_latent_t, condition.condition_shapes, noise_stream=stream
                )
            jobs.append((CONDITION, lambda: _concat_streams(streams, cancel), condition))
        by_key: dict[Any, list[KeyedDraw]] = {}
        for field_name, draw, key in jobs:
            name = record_name(field_name, initial.seed, window)
            plan.names[field_name] = name
            work = self._recorded(name, initial.seed, draw)
            by_key.setdefault(key, []).append(KeyedDraw(name, key, _seeded(work)))
        for keyed in by_key.values():  # one plan per key: a mismatch ends only that key's draws
            served = ServedDraws(self.executor, job_name=_label)
            served.submit(keyed)
            for field_name, name in plan.names.items():
                if name in {d.label for d in keyed}:
                    plan.served[field_name] = served
        self._plans[initial.seed] = plan

    def _recorded(
        self, name: str, seed: int, draw: Callable[[], torch.Tensor]
    ) -> Callable[[], torch.Tensor]:
        def work() -> torch.Tensor:
            started = time.perf_counter()
            tensor = draw()
            record = DrawRecord(
                name, seed, threading.current_thread().name, started, time.perf_counter()
            )
            with self._lock:
                self.records[name] = record
            for observer in list(_observers):
                observer(name.split("@")[0], seed, tensor)
            return tensor

        return work

    # -- consumption -------------------------------------------------------------------------
    def take_initial_noise(self, key: InitialNoiseKey) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The prepared `(video_rows, audio_rows)` for `key`, or None: run the serial code."""
        plan = self._plans.get(key.seed)
        if plan is None or VIDEO not in plan.names:
            return None
        video = self._take(plan, VIDEO, key)
        audio = self._take(plan, AUDIO, key)
        if video is None or audio is None:
            return None
        if plan.condition is None:
            self._finish_output(plan)
        return video, audio

    def take_condition_noise(self, key: ConditionKey) -> torch.Tensor | None:
        """The prepared visual-condition noise rows for `key`, or None: run the serial code."""
        plan = self._plans.get(key.seed)
        if plan is None or CONDITION not in plan.names:
            return None
        noise = self._take(plan, CONDITION, key)
        self._finish_output(plan, confirmed=key if noise is not None else None)
        return noise

    def upstream_took_condition_noise(self, key: ConditionKey | None, seed: int = 0) -> None:
        """Upstream's condition mix of an output whose noise upstream drew ahead itself started
        (`key`: the visual call's; None: the audio call's): this output is now denoising, so the
        next one may be prepared (as after a take; the visual call confirms the shapes)."""
        plan = self._plans.get(key.seed if key is not None else seed)
        if plan is None or not plan.upstream or plan.names:
            return
        if key is not None and plan.condition is not None and key.guided != plan.condition.guided:
            return
        self._finish_output(plan, confirmed=key)

    def discard_condition_noise(self, seed: int) -> None:
        """Drop prepared condition noise the pipeline will not use (released now, not at exit)."""
        plan = self._plans.get(seed)
        if plan is not None and CONDITION in plan.names:
            plan.served[CONDITION].discard(plan.names.pop(CONDITION))
            self._finish_output(plan)

    def _take(self, plan: _Plan, field_name: str, actual: Any) -> torch.Tensor | None:
        """The prepared tensor of `field_name` when `actual` is its planned key, else None
        (upstream's serial code runs); a mismatch is a `PredictionEvent` per field, and under
        `on_mismatch=raise` a `PredictionMismatchError`."""
        name = plan.names.pop(field_name)
        served = plan.served[field_name]
        predicted = plan.initial if field_name in (VIDEO, AUDIO) else plan.condition
        requested = time.perf_counter()
        if actual != predicted:
            served.end(f"{name}: predicted {predicted!r}, actual {actual!r}")
            self._mismatch(name, predicted, actual)
            tensor = None
        else:
            tensor = served.serve(actual, label=name)
        taken = time.perf_counter()
        with self._lock:  # the draw has ended (taken): its record exists unless it failed
            record = self.records.get(name)
            if record is not None:
                self.records[name] = dataclasses.replace(
                    record, requested=requested, taken=taken, used=tensor is not None
                )
        return tensor

    def _mismatch(self, name: str, predicted: Any, actual: Any) -> None:
        """Record (and log) a missed prediction; raise it under `on_mismatch=raise`."""
        if self.settings.on_mismatch is MismatchPolicy.RAISE:
            raise PredictionMismatchError(name, predicted, actual)
        event = PredictionEvent(name, predicted, actual)
        event.log()
        self.executor.prediction_events.append(event)

    def _finish_output(self, plan: _Plan, confirmed: ConditionKey | None = None) -> None:
        """After output `seed` (or a window of it) took its noise: optionally prepare the next
        window, else output `seed + 1`, now."""
        seed = plan.initial.seed
        if plan.names:
            return
        self._plans.pop(seed, None)
        if not self.settings.prepare_next_output or self._first_seed is None:
            return
        if plan.window + 1 < len(plan.windows):
            window = plan.window + 1
            self._submit(*plan.windows[window], windows=plan.windows, window=window)
            return
        next_seed = seed + 1
        if next_seed >= self._first_seed + self._num_outputs or next_seed in self._plans:
            return
        if torch_seed(next_seed) is None:
            return  # upstream raises for it
        if plan.windows:  # a continuation request: the next output's windows, from the first
            windows = tuple(_with_seed(keys, next_seed) for keys in plan.windows)
            self._submit(*windows[0], windows=windows)
            return
        shapes = confirmed.condition_shapes if confirmed is not None else None
        if plan.condition is not None and shapes is None:
            return  # the condition shapes were not confirmed: leave the next output serial
        initial = InitialNoiseKey(next_seed, *_dims(plan.initial))
        condition = None
        if confirmed is not None and shapes:
            condition = ConditionKey(next_seed, initial.latent_t, shapes, confirmed.guided)
        self._submit(initial, condition)


def _with_seed(keys: WindowKeys, seed: int) -> WindowKeys:
    initial, condition = keys
    moved = dataclasses.replace(condition, seed=seed) if condition is not None else None
    return dataclasses.replace(initial, seed=seed), moved


def _seeded(
    work: Callable[[], torch.Tensor],
) -> Callable[[tuple[torch.Generator, ...]], torch.Tensor]:
    """A keyed draw's work for a draw that seeds its own generators (no caller generator)."""
    return lambda _clones: work()


def _label(index: int, draw: KeyedDraw) -> str:
    """A draw's job name is its record name (`initial_video_noise@7`, ...): unique per request."""
    return draw.label


def _dims(key: InitialNoiseKey) -> tuple[int, int, int, int]:
    return key.latent_t, key.latent_h, key.latent_w, key.audio_t


def _concat_streams(streams: Sequence[Any], cancel: CancelEvent) -> torch.Tensor:
    parts = [tensor for stream in streams for tensor in run_stream(stream, cancel=cancel).values()]
    return parts[0] if len(parts) == 1 else torch.cat(parts)
