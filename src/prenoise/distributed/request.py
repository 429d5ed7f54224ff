"""Rank 0 resolves a request and broadcasts it; every rank then works from the same resolution.

Resolution = the validated recipe (as JSON data), its geometry, every output seed, the predicted
visual-condition shapes (from the very VAE methods the encoder uses) and a request id that names
the request's store keys and shared segments. If rank 0 fails to resolve, the other ranks raise
`RankFailedError` with its original error text instead of waiting.

Before that, before any rank loads a model, `broadcast_check` runs the single-process request
check (`check_request`: memory budget, media caps) on rank 0 and sends its verdict: a request it
refuses stops every rank (`RequestRefusedError` on the others) with rank 0's text.
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
from prenoise.ref2va.geometry import RequestGeometry
from prenoise.ref2va.media.caps import MediaError
from prenoise.ref2va.models import Ref2VAModels
from prenoise.ref2va.references import predict_reference_shape
from prenoise.ref2va.request_budget import check_request

__all__ = [
    "REQUEST_REFUSALS",
    "RequestRefusedError",
    "ResolvedRequest",
    "broadcast_check",
    "broadcast_request",
    "resolve_request",
]

LatentShape = tuple[int, int, int]

REQUEST_REFUSALS: tuple[type[Exception], ...] = (
    BudgetExceededError,
    MediaError,
    OutputWriteError,
)
"""How `check_request` refuses a request (a synthetic reference it writes: `OutputWriteError`):
user errors, which the single-process CLI reports in one line with exit status 2."""


@dataclass(frozen=True)
class ResolvedRequest:
    """What every rank needs to build identical denoise inputs."""

    request_id: str
    recipe_data: dict[str, Any]
    geometry: RequestGeometry
    seeds: tuple[int, ...]
    predicted_shapes: tuple[LatentShape, ...]

    def recipe(self) -> Recipe:
        """The recipe, re-validated from the broadcast data (identical on every rank)."""
        recipe = Recipe.model_validate(self.recipe_data)
        if recipe.geometry() != self.geometry:
            raise RuntimeError("the broadcast geometry differs from this rank's recipe geometry")
        return recipe


class RequestRefusedError(Exception):
    """Rank 0's request check refused the request; the message is rank 0's error text."""


def broadcast_check(ctx: DistContext, recipe: Recipe) -> None:
    """Rank 0 checks `recipe` as a single process does (`check_request`) and broadcasts the
    verdict; call it on every rank before any model is loaded.

    Returns on every rank when the check passed. When it raised, rank 0 re-raises its exception;
    the other ranks raise `RequestRefusedError` with its text when it is one of
    `REQUEST_REFUSALS`, else `RankFailedError` with `Type: text`. (Rank 0 checks again in
    `resolve_request` and every rank in the preparation, as a single process does in
    `Ref2VAPipeline.prepare`.)
    """
    payload: list[Any] = [None]  # None: accepted; (refused, text): rank 0's check raised
    error: Exception | None = None
    if ctx.rank == 0:
        try:
            check_request(recipe)
        except Exception as exc:
            error = exc
            refused = isinstance(exc, REQUEST_REFUSALS)
            payload[0] = (refused, str(exc) if refused else describe_error(exc))
    dist.broadcast_object_list(payload, src=0, group=ctx.cpu_group)
    if error is not None:
        raise error
    if payload[0] is not None:
        refused, text = payload[0]
        if refused:
            raise RequestRefusedError(text)
        raise RankFailedError(f"rank 0 failed to check the request: {text}")


def resolve_request(recipe: Recipe, models: Ref2VAModels) -> ResolvedRequest:
    """Resolve on this process: check the request (budget, media caps), predict condition shapes."""
    headers = check_request(recipe).headers
    width, height = recipe.size()
    vae = models.video_vae
    predicted = tuple(
        shape
        for spec, header in zip(recipe.references, headers, strict=True)
        if (shape := predict_reference_shape(spec, vae, width, height, header)) is not None
    )
    return ResolvedRequest(
        request_id=uuid.uuid4().hex[:12],
        recipe_data=recipe.model_dump(mode="json"),
        geometry=recipe.geometry(),
        seeds=tuple(recipe.output_seed(i) for i in range(recipe.outputs)),
        predicted_shapes=predicted,
    )


def broadcast_request(
    ctx: DistContext, recipe: Recipe | None, models: Ref2VAModels
) -> ResolvedRequest:
    """Rank 0 resolves `recipe` and sends the result; other ranks pass None and receive it.

    Raises on every rank when rank 0's resolution failed (the original exception on rank 0).
    """
    payload: list[Any] = [None]
    error: BaseException | None = None
    if ctx.rank == 0:
        if recipe is None:
            raise ValueError("rank 0 needs the recipe")
        try:
            payload[0] = resolve_request(recipe, models)
        except Exception as exc:
            error = exc
            payload[0] = describe_error(exc)
    dist.broadcast_object_list(payload, src=0, group=ctx.cpu_group)
    if error is not None:
        raise error
    if isinstance(payload[0], str):
        raise RankFailedError(f"rank 0 failed to resolve the request: {payload[0]}")
    assert isinstance(payload[0], ResolvedRequest)
    return payload[0]
