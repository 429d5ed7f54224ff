"""MiniMax-H3's noise records (`prenoise rollout-check`) for SGLang: names, groups and sites.

Only while `noise_record.recording()` (`PRENOISE_NOISE_RECORD` set): off, every function here
returns after that one look-up. Recording reads tensors, never changes one.

- Sites: `h3.initial.video` / `h3.initial.audio` (the denoise state's initial rows, read after
  upstream's `_prepare_denoise_state_from_plan` returned: prepared by prenoise or drawn by
  upstream, the same rows), `h3.condition.<i>` (the i-th visual condition's noise rows
  `[t*h/2*w/2, 96]`, before the mix: the served rows, or, where upstream draws, its own draws
  read by a torch function mode that returns every result unchanged, cut to the condition's
  frames and patchified as upstream does — a permutation, the same values), `h3.rollout` (each
  stochastic step, `h3_rollout`). Warmup requests (`batch.is_warmup`) are not recorded: their
  fixed seeds would collide with real requests'.
- `request`: `<group>#N` (`sglang#N` outside a distributed run), N counting the requests this
  process recorded into the directory, in the order they first record. Every rank of a replica
  runs the same requests in the same order, so they name them alike; a rerun that sends the
  same requests in the same order to the same replicas names them alike too (`rollout-check A
  B` matches them without `--match seed`). SGLang's own request ids are random uuids.
- `group`: the rank's replica — SGLang's `get_replica_group()` (every rank that shares a request:
  tensor, sequence, pipeline and CFG parallel ranks; data-parallel replicas are separate
  groups), named `replica:<its global ranks>`; None outside a distributed run, or where that
  code is not the reviewed code (`reviewed.H3_RECORD_PATH`).
"""

from __future__ import annotations

import contextvars
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from prenoise.noise.layouts import Patchify
from prenoise.observe import noise_record

__all__ = [
    "captured_condition_noise",
    "record",
    "record_conditions",
    "record_initial",
    "replica_group",
    "request_name",
    "request_names",
]

_PARALLEL_STATE = "sglang.multimodal_gen.runtime.distributed.parallel_state"
_DENOISE_STATE_KEY = "minimax_h3_denoise_state"

logger = logging.getLogger("prenoise.sglang")
_said_off = False  # the one WARNING where the replica-group code is not the reviewed code

_names: contextvars.ContextVar[dict[int, tuple[Any, str]] | None] = contextvars.ContextVar(
    "prenoise_sglang_record_names", default=None
)


def replica_group() -> str | None:
    """`replica:<global ranks>` of this rank's SGLang replica group; None where SGLang's world
    group is not initialized (one process) or the code is not the reviewed code."""
    from prenoise.integrations.sglang import reviewed, support

    module = sys.modules.get(_PARALLEL_STATE)  # not imported: no distributed run here
    if module is None:
        return None
    code = support.current()
    if not code.runs(reviewed.H3_RECORD_PATH):
        global _said_off
        if not _said_off:
            _said_off = True
            path = reviewed.H3_RECORD_PATH
            logger.warning(
                "prenoise: sglang: %s: off, noise records carry no group: %s",
                path,
                code.problems[path],
            )
        return None
    try:
        if not module.world_group_is_initialized():
            return None
        ranks = sorted(int(r) for r in module.get_replica_group().ranks)
    except Exception:  # a half-initialized parallel state: no group rather than a wrong one
        return None
    return "replica:" + ",".join(map(str, ranks))


@contextmanager
def request_names() -> Iterator[None]:
    """The scope of one `forward` / `forward_batch` call: each batch keeps one name in it."""
    token = _names.set({})
    try:
        yield
    finally:
        _names.reset(token)


def request_name(batch: Any) -> str:
    """The record name of `batch` (see the module docstring); outside a `request_names` scope
    its `request_id` (else `batch-<id>`)."""
    names = _names.get()
    if names is None:
        request = getattr(batch, "request_id", None)
        return str(request) if request is not None else f"batch-{id(batch)}"
    entry = names.get(id(batch))
    if entry is None or entry[0] is not batch:
        entry = (batch, noise_record.request_label(replica_group() or "sglang"))
        names[id(batch)] = entry
    return entry[1]


def _skipped(batch: Any) -> bool:
    return bool(getattr(batch, "is_warmup", False))


def record(batch: Any, site: str, seed: int | None, step: int | None, noise: Any) -> None:
    """One record of `batch`'s `noise` at `site` (a no-op unless recording; warmups skipped)."""
    if not noise_record.recording() or _skipped(batch) or not isinstance(noise, torch.Tensor):
        return
    noise_record.record_noise(
        engine="sglang",
        site=site,
        request=request_name(batch),
        seed=seed,
        step=step,
        noise=noise,
        group=replica_group(),
    )


def record_initial(batch: Any, plan_seed: Callable[[], int | None]) -> None:
    """`h3.initial.video` / `h3.initial.audio`: the rows of `batch`'s denoise state, read after
    upstream's `_prepare_denoise_state_from_plan(batch, plan)` returned; `plan_seed()` is the plan's
    (42 when None, as upstream draws; asked only while recording)."""
    if not noise_record.recording() or _skipped(batch):
        return
    extra = getattr(batch, "extra", None)
    state = extra.get(_DENOISE_STATE_KEY) if isinstance(extra, dict) else None
    if not isinstance(state, dict):
        return
    seed = plan_seed()
    record(batch, "h3.initial.video", seed, None, state.get("initial_video_rows"))
    record(batch, "h3.initial.audio", seed, None, state.get("initial_audio_rows"))


def record_conditions(batch: Any, keys: Sequence[Any], rows: Sequence[torch.Tensor]) -> None:
    """`h3.condition.<i>`: the i-th visual condition's noise rows, in the call's order. A
    condition whose key (`h3_conditions.ConditionKey`: seed, drawn length, shape) equals an
    earlier one's drew the same bits by upstream's recipe (a fresh generator per condition,
    one seed): recorded once, at the first index, so that rollout-check does not report
    upstream's deliberate repeat as noise repeated within a request."""
    if not noise_record.recording() or _skipped(batch):
        return
    seen: set[Any] = set()
    for i, (key, noise) in enumerate(zip(keys, rows, strict=True)):
        if key not in seen:
            seen.add(key)
            record(batch, f"h3.condition.{i}", key.seed, None, noise)


class _CaptureRandn(TorchFunctionMode):
    """Keeps every `torch.randn(..., generator=...)` result of the call; returns it unchanged."""

    def __init__(self) -> None:
        super().__init__()
        self.drawn: list[torch.Tensor] = []

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        if func is torch.randn and (kwargs or {}).get("generator") is not None:
            self.drawn.append(out)
        return out


def captured_condition_noise(
    batch: Any, original: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]
) -> Any:
    """Upstream's `minimax_h3_imgvid_cond_noise_aug_rows(*args, **kwargs)`, its own draws read
    (while recording, warmups aside) and recorded as `h3.condition.<i>`: each draw cut to its
    condition's frames and patchified as upstream does; its result is returned unchanged.
    Recorded only where the call drew one tensor per condition (else: nothing recorded)."""
    if not noise_record.recording() or _skipped(batch):
        return original(*args, **kwargs)
    mode = _CaptureRandn()
    with mode:
        out = original(*args, **kwargs)
    from prenoise.integrations.sglang.h3_conditions import ConditionKey

    shapes = [tuple(int(v) for v in s) for s in kwargs.get("condition_shapes") or ()]
    if len(mode.drawn) != len(shapes) or not shapes:
        return out  # upstream drew nothing (noise_aug 1.0) or something unforeseen
    seed = int(kwargs["seed"]) % 2**64
    full_t = int(kwargs["target_latent_t"]) + int(kwargs["imgvid_cond_num_frames"])
    keys = [ConditionKey(seed, full_t, t, h, w) for t, h, w in shapes]
    rows = [
        Patchify().apply(noise[:, :, : key.latent_t].contiguous())
        for noise, key in zip(mode.drawn, keys, strict=True)
    ]
    record_conditions(batch, keys, rows)
    return out
