"""One Ref2VA request resolved once: the immutable plan every consumer receives.

`plan_request(recipe)` is the only place a request's geometry, memory-budget decision,
reference headers, predicted visual-condition shapes and every output's draw streams are worked
out, in this order (the refusals come in the order a user can act on them):

1. `admit(geometry)`, when given, with the geometry (`recipe.geometry()`: frames, canvas,
   latent and audio sizes): the service's own limits;
2. the request's own size against the memory budget (`require_size_fits`), before any reference
   is opened, so an impossible `--width`/`--duration` is refused as such, never blamed on a file;
3. every reference's headers against the media caps (`validate_references` unless `validate`
   is given: it writes a missing synthetic reference first);
4. each visual reference's latent shape predicted from its header with the video VAE's own
   alignment rule (`VideoProcessor`, the class its encoder calls), and every output's streams
   (`ref2va/noise.py`) for those shapes, in the recipe's noise stream;
5. the whole estimate, references included, against the budget (`require_references_fit`).

The resulting `Ref2VARequestPlan` is what `Ref2VAPipeline` (prepare, generate, denoise, decode),
`verify_recipe`, `run_bench`, the service's jobs and the torchrun ranks receive; none of them
computes any of it again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prenoise.ref2va.conditioning import validate_references
from prenoise.ref2va.config import Recipe, ReferenceSpec
from prenoise.ref2va.geometry import RequestGeometry
from prenoise.ref2va.limits import Limits
from prenoise.ref2va.media import VideoInfo
from prenoise.ref2va.model_size import model_nbytes
from prenoise.ref2va.noise import LatentShape, OutputDraws, output_draws
from prenoise.ref2va.references import predict_reference_shape
from prenoise.ref2va.request_budget import (
    RequestEstimate,
    estimate_request,
    require_references_fit,
    require_size_fits,
)
from prenoise.ref2va.video_processor import VideoProcessor

__all__ = ["Ref2VARequestPlan", "ReferenceValidator", "plan_request"]

ReferenceValidator = Callable[[Sequence[ReferenceSpec], Limits], list[VideoInfo | None]]
"""`(references, limits) -> headers`: checks every reference against the caps and returns each
one's video header (None for images and audio), as `validate_references` does."""


@dataclass(frozen=True)
class Ref2VARequestPlan:
    """Everything about one Ref2VA request that does not depend on encoding, resolved once.

    Immutable; built only by `plan_request`. `outputs[i]` are output i's streams (seed + i) for
    the predicted `condition_shapes`; an output whose encoded shapes differ takes
    `outputs[i].for_conditions(encoded)`.
    """

    recipe: Recipe
    geometry: RequestGeometry
    """Frames, canvas (`width` x `height`, floored to 32), latent `T`, `h`, `w` and `audio_t`."""
    estimate: RequestEstimate
    """The memory estimate the budget accepted (references included when checked)."""
    references_checked: bool
    """Whether the references were checked against the caps (False: conditioning that comes
    from elsewhere, `plan_request(..., references=False)`)."""
    headers: tuple[VideoInfo | None, ...]
    """Each reference's video header as validated (None for images and audio; empty unless
    `references_checked`)."""
    condition_shapes: tuple[LatentShape, ...]
    """Predicted latent `(t, h, w)` of each visual reference, in order."""
    outputs: tuple[OutputDraws, ...]
    """Every output's streams, output 0 first."""


def plan_request(
    recipe: Recipe,
    *,
    references: bool = True,
    admit: Callable[[RequestGeometry], None] | None = None,
    validate: ReferenceValidator | None = None,
) -> Ref2VARequestPlan:
    """Resolve and check `recipe` once, before any model work (see the module docstring).

    `validate` reads the references' headers (None: `validate_references`). Raises what
    `admit` raises, `BudgetExceededError` (the request's size: says what to shrink), or
    `MediaError` (a reference: names the file and the cap; `validate`'s own errors with another
    `validate`). `references=False` checks the size alone and opens no reference (conditioning
    that comes from elsewhere): the plan then predicts no condition.
    """
    geometry = recipe.geometry()
    if admit is not None:
        admit(geometry)
    model_bytes = model_nbytes(recipe.model)
    first = _draws(recipe, geometry, 0, ())  # the request alone: no condition yet
    alone = estimate_request(recipe, geometry, first, model_bytes=model_bytes)
    require_size_fits(recipe, geometry, alone)
    headers: tuple[VideoInfo | None, ...] = ()
    shapes: tuple[LatentShape, ...] = ()
    estimate = alone
    if references:
        read_headers = validate_references if validate is None else validate
        headers = tuple(read_headers(recipe.references, recipe.limits))
        shapes = _predicted_shapes(recipe, geometry, headers)
        first = first.for_conditions(shapes)
        pairs = list(zip(recipe.references, headers, strict=True))
        estimate = estimate_request(recipe, geometry, first, pairs, model_bytes=model_bytes)
        require_references_fit(recipe, geometry, alone, estimate)
    # the estimate's streams are output 0's own: the budget follows exactly what is drawn
    outputs = (first, *(_draws(recipe, geometry, i, shapes) for i in range(1, recipe.outputs)))
    return Ref2VARequestPlan(
        recipe=recipe,
        geometry=geometry,
        estimate=estimate,
        references_checked=references,
        headers=headers,
        condition_shapes=shapes,
        outputs=outputs,
    )


def _draws(
    recipe: Recipe, geo: RequestGeometry, index: int, shapes: Sequence[LatentShape]
) -> OutputDraws:
    return output_draws(
        index,
        recipe.output_seed(index),
        geo.T,
        geo.h,
        geo.w,
        geo.audio_t,
        shapes,
        noise_stream=recipe.noise_stream,
    )


def _predicted_shapes(
    recipe: Recipe, geo: RequestGeometry, headers: Sequence[VideoInfo | None]
) -> tuple[LatentShape, ...]:
    """Each visual reference's latent `(t, h, w)` from its header: the processor the recipe's
    video VAE builds (`VideoVAE.processor`), so the rule is the encoder's own."""
    processor = VideoProcessor(recipe.model.video_vae.spatial_factor)
    return tuple(
        shape
        for spec, header in zip(recipe.references, headers, strict=True)
        if (shape := predict_reference_shape(spec, processor, geo.width, geo.height, header))
        is not None
    )
