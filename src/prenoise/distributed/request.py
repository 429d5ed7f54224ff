"""Rank 0 plans a request and broadcasts the plan; every rank then works from that one plan.

Resolution = the request's `Ref2VARequestPlan` (`plan_request`: the single-process request check
of memory budget and media caps, which also resolves the geometry, the predicted visual-condition
shapes, from the very alignment rule the encoder uses, and every output's streams) and a request
id that names the request's store keys and shared segments. No rank resolves any of it again.

`broadcast_request` runs on every rank once the process group is up, before any rank loads a
model: rank 0 plans the request and sends the plan, or its refusal. A request the check refuses
stops every rank (`RequestRefusedError` on the others) with rank 0's text; any other failure of
rank 0 makes the other ranks raise `RankFailedError` with its original error text instead of
waiting.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from prenoise.distributed.group import DistContext
from prenoise.distributed.status import RankFailedError, describe_error
from prenoise.guards.atomic import OutputWriteError
from prenoise.guards.budget import BudgetExceededError
from prenoise.ref2va.config import Recipe
from prenoise.ref2va.media.caps import MediaError
from prenoise.ref2va.request_plan import Ref2VARequestPlan, plan_request

__all__ = [
    "REQUEST_REFUSALS",
    "RequestRefusedError",
    "ResolvedRequest",
    "broadcast_request",
    "resolve_request",
]

REQUEST_REFUSALS: tuple[type[Exception], ...] = (
    BudgetExceededError,
    MediaError,
    OutputWriteError,
)
"""How `plan_request` refuses a request (a synthetic reference it writes: `OutputWriteError`):
user errors, which the single-process CLI reports in one line with exit status 2."""


@dataclass(frozen=True)
class ResolvedRequest:
    """What every rank needs to build identical denoise inputs: rank 0's plan, under one id."""

    request_id: str
    plan: Ref2VARequestPlan


class RequestRefusedError(Exception):
    """Rank 0's request check refused the request; the message is rank 0's error text."""


def resolve_request(recipe: Recipe) -> ResolvedRequest:
    """Plan `recipe` on this process (`plan_request`: budget, media caps, geometry, predicted
    condition shapes, streams) under a fresh request id."""
    return ResolvedRequest(request_id=uuid.uuid4().hex[:12], plan=plan_request(recipe))


def broadcast_request(ctx: DistContext, recipe: Recipe | None) -> ResolvedRequest:
    """Rank 0 plans `recipe` (`resolve_request`) and sends the result; the other ranks pass None
    and receive it. Call it on every rank before any model is loaded.

    Returns the same `ResolvedRequest` on every rank when rank 0's check passed. When it
    raised, rank 0 re-raises its exception; the other ranks raise `RequestRefusedError` with
    its text when it is one of `REQUEST_REFUSALS`, else `RankFailedError` with `Type: text`.
    """
    payload: list[Any] = [None]  # the request, or (refused, text): rank 0's check raised
    error: Exception | None = None
    if ctx.rank == 0:
        if recipe is None:
            raise ValueError("rank 0 needs the recipe")
        try:
            payload[0] = resolve_request(recipe)
        except Exception as exc:
            error = exc
            refused = isinstance(exc, REQUEST_REFUSALS)
            payload[0] = (refused, str(exc) if refused else describe_error(exc))
    dist.broadcast_object_list(payload, src=0, group=ctx.cpu_group)
    if error is not None:
        raise error
    if isinstance(payload[0], tuple):
        refused, text = payload[0]
        if refused:
            raise RequestRefusedError(text)
        raise RankFailedError(f"rank 0 failed to check the request: {text}")
    assert isinstance(payload[0], ResolvedRequest)
    return payload[0]
