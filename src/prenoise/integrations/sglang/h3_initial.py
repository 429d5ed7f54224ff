"""MiniMax-H3's initial noise drawn ahead for one SGLang request (or one group of requests).

SGLang 0.5.23 draws a request's initial noise in `MiniMaxH3LatentPreparationStage.
_prepare_denoise_state_from_plan`, after the text, visual and audio encoders ran: video
`torch.randn(1, 24, T, H, W)` (float32) on `torch.Generator().manual_seed(seed)`, patchified to
rows `[T*H/2*W/2, 96]`, and audio `torch.randn(2*A, 32)` on a second generator seeded the same;
`seed` is the resolved plan's (42 when None). The dimensions come from the plan's `shape`
(`resolved_v2` geometry: `height // 16`, `width // 16`, `video_latent_t`, `audio_latent_t`).

`RequestDraws` reads the same plan at request entry, submits both draws (prenoise's
`initial_noise_streams`, the same bits) to a request-owned `PreparationExecutor` through
`ServedDraws`, and at the stage hands upstream a pre-filled `batch.extra["minimax_h3_denoise_
state"]` only when the key `(seed, T, H, W, A)` computed from the plan the stage is given equals
the planned one; otherwise (and whenever anything is unusual) upstream draws itself.

The same object also owns the request's visual-condition draws (`h3_conditions`): predicted at
entry, submitted after every batch's initial draws (`submit_conditions`), served to the
Denoising stage's `minimax_h3_imgvid_cond_noise_aug_rows` call by `serve_condition_rows`.
A group (`forward_batch`: the outputs of one prompt expanded by upstream, each with its own
seed, run stage by stage) gets one plan per batch on the one worker: every output's initial
draws first, in order, then every output's condition draws.

Bitwise: the served state holds tensors equal to upstream's in values, shape, dtype, device
(CPU) and strides (both contiguous), and the same ints; the served condition rows are what
upstream's function returns (see `h3_conditions`); the global RNG is never used. In a named
noise stream (`noise_stream`, from `PRENOISE_SGLANG_NOISE_STREAM`) every prepared draw is drawn
in that stream: the same bits as upstream's function run in the stream (`streams`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from prenoise.guards.cancel import CancelEvent
from prenoise.integrations.sglang import h3_conditions, h3_record
from prenoise.preparation.draws import Stream, run_stream
from prenoise.preparation.executor import PreparationExecutor
from prenoise.preparation.served import KeyedDraw, ServedDraws
from prenoise.ref2va.noise import initial_noise_streams

__all__ = [
    "DENOISE_STATE_KEY",
    "DrawObserver",
    "InitialKey",
    "RequestDraws",
    "ServeObserver",
    "initial_key",
    "observers",
    "serve_observers",
    "torch_seed",
]

logger = logging.getLogger("prenoise.sglang")

DENOISE_STATE_KEY = "minimax_h3_denoise_state"
"""The `batch.extra` key upstream's early return checks (`MINIMAX_H3_DENOISE_STATE_EXTRA_KEY`)."""
_PLAN_KEY = "minimax_h3_resolved_plan"
_CANONICAL_KEY = "minimax_h3_canonical_request"
_DEFAULT_SEED = 42  # upstream's pinned default when the plan has no seed

DrawObserver = Callable[[str, "InitialKey", str, torch.Tensor], None]
"""Told `(label, key, worker thread name, tensor)` after each prepared draw (tests, tools)."""
observers: list[DrawObserver] = []
ServeObserver = Callable[[str, bool], None]
"""Told `(what, served)` when a planned request's `"initial"` or `"conditions"` noise is asked
for: True when the prepared draws were handed over, False when upstream draws (tests)."""
serve_observers: list[ServeObserver] = []


def _told(what: str, served: bool) -> None:
    for observer in list(serve_observers):
        observer(what, served)


def torch_seed(seed: int) -> int | None:
    """The seed `torch.Generator.manual_seed(seed)` uses (a negative one wraps to 2^64 + s), or
    None where manual_seed raises (the request is left to upstream)."""
    if not -(2**63) <= seed <= 2**64 - 1:
        return None
    return seed % 2**64


@dataclass(frozen=True)
class InitialKey:
    """What upstream's initial draw depends on: the torch seed and the latent sizes."""

    seed: int
    latent_t: int
    latent_h: int
    latent_w: int
    audio_t: int


def initial_key(plan: Any) -> InitialKey | None:
    """The key of the draw upstream makes for `plan`, by upstream's arithmetic; None where
    upstream would raise or anything is unusual (then prenoise prepares nothing)."""
    try:
        shape = plan.shape
        if not isinstance(shape, Mapping) or str(shape["geometry"]) != "resolved_v2":
            return None
        if shape.get("video_latent_t") is None or shape.get("audio_latent_t") is None:
            return None
        seed = plan.seed
        seed = torch_seed(int(_DEFAULT_SEED if seed is None else seed))
        latent_h, latent_w = int(shape["height"]) // 16, int(shape["width"]) // 16
        latent_t, audio_t = int(shape["video_latent_t"]), int(shape["audio_latent_t"])
    except (AttributeError, KeyError, TypeError, ValueError, OverflowError):
        return None
    if seed is None or min(latent_t, latent_h, latent_w, audio_t) <= 0:
        return None
    if latent_h % 2 or latent_w % 2:  # upstream's patchify raises
        return None
    return InitialKey(seed, latent_t, latent_h, latent_w, audio_t)


def entry_plan(batch: Any) -> Any:
    """The plan upstream's stage will be given, read at request entry without changing the
    batch: the cached `minimax_h3_resolved_plan`, else `minimax_h3_resolve_plan` of the
    canonical request (upstream's own function, not cached here); None when there is none or
    upstream would raise."""
    extra = getattr(batch, "extra", None)
    if not isinstance(extra, Mapping):
        return None
    cached = extra.get(_PLAN_KEY)
    if cached is not None:
        return cached
    canonical = extra.get(_CANONICAL_KEY)
    if canonical is None:
        return None
    from sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.minimax_h3.resolved_plan import (  # noqa: E501
        minimax_h3_resolve_plan,
    )

    try:
        return minimax_h3_resolve_plan(canonical)
    except Exception:  # upstream raises its own error later, at the stage
        return None


_VIDEO = "initial_video_noise"
_AUDIO = "initial_audio_noise"


class RequestDraws:
    """The request-owned preparation of one `forward` (or `forward_batch`) call.

    A context manager: entering opens a one-thread `PreparationExecutor`; leaving ends every
    plan not served (pending draws cancelled, a running one joined) and shuts the worker down;
    an exception raised inside (an encoder failing) propagates unchanged."""

    def __init__(
        self, *, initial: bool = True, conditions: bool = False, noise_stream: str = "native"
    ) -> None:
        self.executor = PreparationExecutor(name="prenoise-sglang")
        self._initial, self._with_conditions = initial, conditions
        self.noise_stream = noise_stream
        """The noise stream every prepared draw is drawn in (`native`: upstream's bits)."""
        self._plans: dict[int, tuple[InitialKey, ServedDraws]] = {}
        self._conditions: dict[int, ServedDraws] = {}
        self._lock = threading.Lock()
        self._submitted = 0
        self._later: list[tuple[Any, Any, str]] = []
        self._names = h3_record.request_names()  # the noise records' request names
        self.skipped: dict[int, str] = {}
        """id(batch) -> why nothing was prepared for it."""
        self.conditions_skipped: dict[int, str] = {}
        """id(batch) -> why its visual-condition noise was not prepared."""

    def __enter__(self) -> RequestDraws:
        self.executor.__enter__()
        self._names.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._names.__exit__(*exc)
        try:
            for _key, served in self._plans.values():
                served.finish()
            for served in self._conditions.values():
                served.finish()
            self._plans.clear()
            self._conditions.clear()
        finally:
            self.executor.__exit__(*exc)

    def owns(self, batch: Any) -> bool:
        return id(batch) in self._plans or id(batch) in self.skipped

    def submit(self, batch: Any) -> InitialKey | None:
        """Plan and submit `batch`'s initial draws and note its visual-condition draws for
        `submit_conditions`; None: nothing prepared, see `skipped`."""
        extra = getattr(batch, "extra", None)
        if isinstance(extra, Mapping) and DENOISE_STATE_KEY in extra:
            self.skipped[id(batch)] = "the denoise state is pre-filled already"
            return None
        plan = entry_plan(batch)
        key = initial_key(plan)
        if key is None:
            self.skipped[id(batch)] = "no resolved_v2 plan at request entry"
            return None
        tag = f"@{self._submitted}"
        self._submitted += 1
        if self._initial:
            self._submit_initial(batch, key, tag)
        if self._with_conditions:
            self._later.append((batch, plan, tag))
        return key

    def submit_conditions(self) -> None:
        """Submit the visual-condition draws of every batch submitted so far, after all their
        initial draws (the latent stage of each output comes before any condition noise)."""
        later, self._later = self._later, []
        for batch, plan, tag in later:
            keys, why = h3_conditions.predict(batch, plan)
            if keys:
                served = h3_conditions.submit(
                    self.executor, keys, tag, observers, noise_stream=self.noise_stream
                )
                self._conditions[id(batch)] = served
            else:
                self.conditions_skipped[id(batch)] = why

    def _submit_initial(self, batch: Any, key: InitialKey, tag: str) -> None:
        video, audio = initial_noise_streams(
            key.seed,
            key.latent_t,
            key.latent_h,
            key.latent_w,
            key.audio_t,
            noise_stream=self.noise_stream,
        )
        cancel = self.executor.cancel_event
        draws = [
            KeyedDraw(label + tag, key, self._work(label, key, stream, cancel))
            for label, stream in ((_VIDEO, video), (_AUDIO, audio))
        ]
        served = ServedDraws(self.executor, job_name=lambda _i, d: d.label)
        served.submit(draws)
        self._plans[id(batch)] = (key, served)

    @staticmethod
    def _work(
        label: str, key: InitialKey, stream: Stream, cancel: CancelEvent
    ) -> Callable[[tuple[torch.Generator, ...]], torch.Tensor]:
        def work(_clones: tuple[torch.Generator, ...]) -> torch.Tensor:
            tensor = run_stream(stream, cancel=cancel)[label]
            for observer in list(observers):
                observer(label, key, threading.current_thread().name, tensor)
            return tensor

        return work

    def serve_state(self, batch: Any, plan: Any) -> dict[str, Any] | None:
        """The denoise state for `batch` given `plan` (the stage's), or None: upstream draws.

        Served only when the key of `plan` equals the planned key and both draws succeeded;
        the state is the dict upstream builds, with the prepared tensors."""
        with self._lock:
            entry = self._plans.pop(id(batch), None)
        if entry is None:
            return None
        planned, served = entry
        actual = initial_key(plan)
        labels = [d.label for d in served.planned]
        video = served.serve(actual, label=labels[0])
        audio = served.serve(actual, label=labels[1]) if video is not None else None
        why = served.finish()
        _told("initial", video is not None and audio is not None)
        if video is None or audio is None:
            logger.info("prenoise: MiniMax-H3 initial noise drawn by upstream: %s", why)
            return None
        return {
            "initial_video_rows": video,
            "initial_audio_rows": audio,
            "latent_t": planned.latent_t,
            "latent_h": planned.latent_h,
            "latent_w": planned.latent_w,
            "audio_t": planned.audio_t,
        }

    def serve_condition_rows(
        self, batch: Any, clean_rows: Any, kwargs: Mapping[str, Any]
    ) -> torch.Tensor | None:
        """What `minimax_h3_imgvid_cond_noise_aug_rows(clean_rows, **kwargs)` returns for
        `batch`, from the prepared noise; None: upstream's function runs (draws and mixes).

        Served only when the call's key of every condition equals the planned one (same count,
        seed, `T + n` and shapes); anything else ends the plan (pending draws cancelled, a
        running one joined)."""
        with self._lock:
            served = self._conditions.pop(id(batch), None)
        if served is None:
            return None
        keys, noise_aug = h3_conditions.call_keys(clean_rows, kwargs)
        labels = [d.label for d in served.planned]
        noise: list[torch.Tensor] = []
        if not keys:
            served.end("the call is not one prenoise serves (no condition noise drawn, or "
                       "arguments upstream refuses)")  # fmt: skip
        elif len(keys) != len(labels):
            served.end(f"the call has {len(keys)} visual conditions, {len(labels)} were planned")
        else:
            for key, label in zip(keys, labels, strict=True):
                rows = served.serve(key, label=label)
                if rows is None:
                    break
                noise.append(rows)
        why = served.finish()
        _told("conditions", bool(keys) and len(noise) == len(labels))
        if len(noise) != len(labels) or not keys:
            logger.info("prenoise: MiniMax-H3 condition noise drawn by upstream: %s", why)
            return None
        h3_record.record_conditions(batch, keys, noise)
        return h3_conditions.mix(clean_rows, noise, noise_aug)
