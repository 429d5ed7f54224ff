"""One `randn_tensor` call seen by a replay queue: its arguments, and whether it is a planned draw.

Shared by the classic replay queue (`queue.py`), the modular one (`modular/queue.py`) and the
per-step look-ahead (`step_noise.py`), so that "the call matches the plan" means one thing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from prenoise.integrations.diffusers.plan import PlannedDraw
from prenoise.preparation.draws import Draw, HalfDrawRule

__all__ = [
    "bind_randn_tensor",
    "call_problem",
    "generators_of",
    "planned_rows",
    "target_device",
    "unique_generators",
]


def bind_randn_tensor(
    shape: Any,
    generator: Any = None,
    device: Any = None,
    dtype: Any = None,
    layout: Any = None,
) -> tuple[Any, Any, Any, Any, Any]:
    """diffusers' `randn_tensor(shape, generator, device, dtype, layout)` arguments by position
    or keyword (`TypeError` as the call itself would raise)."""
    return shape, generator, device, dtype, layout


def generators_of(generator: object) -> tuple[torch.Generator, ...] | None:
    """A call's `generator=` as a tuple (a list's items, or the one generator); None for None or
    anything else (such a call is never served)."""
    if generator is None:
        return None
    if isinstance(generator, list):
        return tuple(generator)
    if isinstance(generator, torch.Generator):
        return (generator,)
    return None


def unique_generators(generators: Sequence[torch.Generator]) -> list[torch.Generator]:
    """The generators in first-seen order, each once (by identity)."""
    seen: dict[int, torch.Generator] = {}
    for g in generators:
        seen.setdefault(id(g), g)
    return list(seen.values())


def target_device(device: Any) -> torch.device:
    """The device `randn_tensor` returns its tensor on (None: the CPU)."""
    if isinstance(device, str):
        device = torch.device(device)
    return device or torch.device("cpu")


def planned_rows(planned: PlannedDraw) -> tuple[Draw, ...]:
    """The `Draw`s that make a planned call: the whole tensor on one generator, or one `(1, ...)`
    row per generator of a list (then concatenated), as `randn_tensor` draws them."""
    row = planned.shape if len(planned.generators) == 1 else (1, *planned.shape[1:])
    return tuple(
        Draw(f"{planned.label}.{i}", row, planned.dtype, half_rule=HalfDrawRule.NATIVE)
        for i in range(len(planned.generators))
    )


def call_problem(
    planned: PlannedDraw,
    shape: Any,
    gens: tuple[torch.Generator, ...],
    device: Any,
    dtype: Any,
    layout: Any,
) -> str | None:
    """Why the call `randn_tensor(shape, gens, device, dtype, layout)` is not the planned draw
    (None: it is: the same shape, dtype and generator objects, strided, on a device the CPU
    tensor can be moved to)."""
    if not isinstance(shape, tuple | torch.Size):
        return f"shape {shape!r} is not a tuple"
    actual_dtype = dtype if dtype is not None else torch.get_default_dtype()
    actual = (tuple(shape), actual_dtype, tuple(id(g) for g in gens))
    if actual != planned.key:
        return (
            f"expected {planned.describe()}, the call drew {list(shape)} {actual_dtype} "
            f"on {len(gens)} generator(s)"
        )
    if layout not in (None, torch.strided):
        return f"layout {layout}"
    if device is None and torch.get_default_device().type != "cpu":
        return f"device=None with default device {torch.get_default_device()}"
    return None
