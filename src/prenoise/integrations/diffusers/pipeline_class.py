"""Which class a pipeline really is: its own class before `enable`, whether it is a modular
pipeline, and the instance check every entry point runs first (`enable`, `overlapped_call`, ...)."""

from __future__ import annotations

from typing import Any

__all__ = [
    "ORIGINAL_CLASS_ATTR",
    "check_pipeline",
    "is_enabled",
    "is_modular",
    "original_class",
]

ORIGINAL_CLASS_ATTR = "_prenoise_original_class"
"""Set on `enable`'s subclass: the class it was made from."""


def original_class(pipe: Any) -> type:
    """The pipeline's own class (its class before `enable`)."""
    cls = type(pipe)
    original = cls.__dict__.get(ORIGINAL_CLASS_ATTR)
    return original if isinstance(original, type) else cls


def is_enabled(pipe: Any) -> bool:
    """True if plain calls of `pipe` go through `overlapped_call`."""
    return original_class(pipe) is not type(pipe)


def check_pipeline(pipe: Any, what: str) -> None:
    """Raise `TypeError` saying what to pass unless `pipe` is a diffusers pipeline instance.

    `what` names the function the user called (e.g. "enable"). Without diffusers installed this
    raises `prenoise.guards.extras.MissingExtraError` instead.
    """
    from prenoise.guards.extras import require

    if isinstance(pipe, type):
        raise TypeError(
            f"{what}() takes a pipeline instance, not the class {pipe.__name__}: load one first, "
            f"e.g. pipe = {pipe.__name__}.from_pretrained(...); {what}(pipe)"
        )
    require("diffusers", f"prenoise.integrations.diffusers.{what}()")
    from diffusers import DiffusionPipeline

    if not isinstance(pipe, DiffusionPipeline) and not is_modular(pipe):
        got = "None" if pipe is None else f"a {type(pipe).__module__}.{type(pipe).__qualname__}"
        raise TypeError(
            f"{what}() takes a diffusers pipeline instance (a diffusers.DiffusionPipeline, "
            f"e.g. WanPipeline.from_pretrained(...), or a diffusers ModularPipeline, e.g. "
            f"MiniMaxH3Blocks().init_pipeline(...)), got {got}"
        )


def is_modular(pipe: Any) -> bool:
    """True if `pipe` is a diffusers `ModularPipeline` instance (its draws are planned during
    the call, `integrations.diffusers.modular`)."""
    try:
        from diffusers.modular_pipelines import ModularPipeline
    except ImportError:  # a diffusers without modular pipelines
        return False
    return isinstance(pipe, ModularPipeline)
