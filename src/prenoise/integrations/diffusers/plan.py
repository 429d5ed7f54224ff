"""What a pipeline call will draw: its ordered `randn_tensor` calls, and helpers to predict them.

A plan module (one per pipeline) turns the bound `__call__` arguments into `PlannedDraw`s, in
the order the pipeline makes them, or raises `Unpredictable` with a reason. A plan never needs
to be right for the output to be right: each draw is checked against the real call when it is
consumed, and a mismatch discards the prepared draws (see `served_calls.RandnTensorServer`). It
only needs to list draws that come before any other use of the caller's generators.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "BoundCall",
    "PlannedDraw",
    "Unpredictable",
    "call_generators",
    "draw_generators",
    "is_default_generator",
    "per_prompt",
    "prompt_batch_size",
    "require_attr",
]


class Unpredictable(Exception):
    """The draws of this call cannot be predicted safely; the plain call runs instead."""

    def __init__(self, reason: str, key: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.key = key or reason


BoundCall = Mapping[str, Any]
"""The pipeline `__call__` arguments by name, defaults applied."""


@dataclass(frozen=True)
class PlannedDraw:
    """One `randn_tensor(shape, generator=..., dtype=dtype)` call the pipeline will make.

    `generators` has one element for a single generator (or a list of one, which `randn_tensor`
    treats alike); with more, row `i` of `shape` is drawn from `generators[i]` as a `(1, ...)`
    tensor and the rows are concatenated, as `randn_tensor` does for a generator list.
    `module` names the diffusers module whose `randn_tensor` makes the call (None: the
    pipeline's own module); it must hold the original function or the prenoise dispatcher.
    """

    label: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    generators: tuple[torch.Generator, ...]
    module: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        if not self.generators:
            raise ValueError(f"planned draw {self.label!r} has no generator")
        if len(self.generators) > 1 and len(self.generators) != self.shape[0]:
            raise ValueError(
                f"planned draw {self.label!r}: {len(self.generators)} generators for batch "
                f"{self.shape[0]}"
            )

    @property
    def key(self) -> tuple[tuple[int, ...], torch.dtype, tuple[int, ...]]:
        """What a real call must match: shape, dtype and the identity of each generator."""
        return (self.shape, self.dtype, tuple(id(g) for g in self.generators))

    def describe(self) -> str:
        gens = "generator" if len(self.generators) == 1 else f"{len(self.generators)} generators"
        return f"{self.label} {list(self.shape)} {self.dtype} on {gens}"


def is_default_generator(generator: torch.Generator) -> bool:
    """True if `generator` is a device's default generator (the global RNG), e.g. the object
    `torch.manual_seed(seed)` returns.

    Other code on the request thread draws from it without naming it (dropout in an encoder
    left in train mode, `torch.randn` without `generator=`, `randn_tensor(generator=None)`), so
    drawing it on a worker at the same time would reorder its stream.
    """
    if generator is torch.default_generator:
        return True
    if generator.device.type == "cpu":
        return False
    return any(generator is d for d in _device_default_generators(generator.device.type))


def _device_default_generators(device_type: str) -> tuple[torch.Generator, ...]:
    """The default generators torch keeps for an accelerator type (those it has created).

    Backends without a `default_generators` tuple (e.g. MPS) give none; their generators are
    refused anyway, as every non-CPU generator is.
    """
    try:
        module = torch.get_device_module(device_type)
    except (RuntimeError, AttributeError, ValueError):
        return ()
    return tuple(getattr(module, "default_generators", ()))


def call_generators(generator: object) -> tuple[torch.Generator, ...]:
    """The caller's `generator=` argument as a tuple of private CPU generators.

    Raises `Unpredictable` for None (the device's global RNG), a device's default generator
    (alone or in a list: `torch.manual_seed(seed)` returns the CPU one), a non-CPU generator,
    an empty list or anything that is not a `torch.Generator`.

    This is the only shared generator a supported pipeline draws from while its noise is
    prepared: none of the plans' pipelines hands the caller's generator to code that draws
    from it directly during the overlapped window. Their other uses of it go through
    `randn_tensor` and are planned in call order (the image-to-video VAE posterior samples)
    or come after every planned draw (schedulers, LTX image-to-video decode noise), so the
    request thread never draws from it while the worker does.
    """
    if generator is None:
        raise Unpredictable("generator is None: noise comes from the device RNG", "generator-none")
    gens = tuple(generator) if isinstance(generator, list | tuple) else (generator,)
    if not gens:
        raise Unpredictable("empty generator list", "generator-empty")
    for g in gens:
        if not isinstance(g, torch.Generator):
            raise Unpredictable(f"generator of type {type(g).__name__}", "generator-type")
        if type(g) is not torch.Generator:  # its get_state/set_state may not be torch's
            raise Unpredictable(
                f"generator of type {type(g).__name__}, a torch.Generator subclass: its state "
                "cannot be proven equal",
                "generator-subclass",
            )
        if is_default_generator(g):
            raise Unpredictable(
                f"generator is torch's default {g.device} generator: other code on this "
                "thread (e.g. encoder dropout) draws from it too",
                "generator-default",
            )
        if g.device.type != "cpu":
            raise Unpredictable(
                f"generator on {g.device}: only CPU generators are prepared", "generator-device"
            )
    return gens


def prompt_batch_size(args: BoundCall) -> int:
    """`batch_size` as the pipelines compute it from `prompt` / `prompt_embeds`."""
    prompt = args.get("prompt")
    if isinstance(prompt, str):
        return 1
    if isinstance(prompt, list):
        return len(prompt)
    embeds = args.get("prompt_embeds")
    if prompt is None and isinstance(embeds, torch.Tensor):
        return int(embeds.shape[0])
    raise Unpredictable("cannot tell the batch size from prompt / prompt_embeds", "batch-size")


def per_prompt(args: BoundCall, name: str) -> int:
    """`num_videos_per_prompt` / `num_images_per_prompt` as an int (None counts as 1)."""
    value = args.get(name)
    if value is None:
        return 1
    if not isinstance(value, int) or value < 1:
        raise Unpredictable(f"{name}={value!r}", f"{name}-value")
    return value


def draw_generators(gens: tuple[torch.Generator, ...], batch: int) -> tuple[torch.Generator, ...]:
    """Generators of a whole-batch `randn_tensor` call (a list must have one per batch row)."""
    if len(gens) > 1 and len(gens) != batch:
        raise Unpredictable(
            f"{len(gens)} generators for an effective batch of {batch}", "generator-count"
        )
    return gens


def require_attr(obj: object, name: str) -> Any:
    """`getattr(obj, name)`, or `Unpredictable` when the pipeline lacks that component."""
    value = getattr(obj, name, None)
    if value is None:
        raise Unpredictable(f"pipeline has no {name}", f"missing-{name}")
    return value
