"""What a modular pipeline call will draw, and when that becomes known.

A modular pipeline's inputs are resolved block by block, so its draws are planned part-way
through the call: at the start of the first leaf block of `ModularPlan.triggers` to run (the
first encoder block: the draws come after every encoder), from the live `PipelineState`'s values.
`ModularPlan.confirms` checks, at the start of a later block, what the encoders produced against
the plan, before any planned draw is taken.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from prenoise.integrations.diffusers.plan import PlannedDraw

__all__ = [
    "Confirm",
    "ModularPlan",
    "ModularPlanner",
    "PlanLater",
    "block_path",
    "declared_default",
    "prompt_count",
    "state_values",
]


class PlanLater(Exception):
    """Raised by a planner at a trigger block whose state does not settle the draws yet (e.g. an
    image-to-video call before its resize block ran): the next trigger block plans instead."""


ModularPlanner = Callable[[Any, Mapping[str, Any], tuple[torch.Generator, ...]], list[PlannedDraw]]
"""(pipe, the state's values at the trigger, the call's CPU generators) -> the draws in order;
raises `plan.Unpredictable` when they cannot be predicted."""

Confirm = Callable[[Mapping[str, Any], Sequence[PlannedDraw]], str | None]
"""(the state's values at a block's start, the plan) -> why the plan is wrong, or None."""


@dataclass(frozen=True)
class ModularPlan:
    """The noise plan of one modular pipeline class.

    `triggers` and the keys of `confirms` are leaf block classes as "module.QualName".
    """

    family: str
    triggers: frozenset[str]
    planner: ModularPlanner
    confirms: Mapping[str, Confirm] = field(default_factory=dict)


def block_path(block: object) -> str:
    """A block's class as "module.QualName"."""
    cls = type(block)
    return f"{cls.__module__}.{cls.__qualname__}"


def state_values(state: Any) -> Mapping[str, Any]:
    """The values of a diffusers `PipelineState` (read-only use)."""
    values = getattr(state, "values", None)
    return values if isinstance(values, dict) else {}


def declared_default(pipe: Any, block: str, name: str) -> Any:
    """The default the leaf block class `block` ("module.QualName") of `pipe`'s blocks declares
    for its input `name` (what that block reads when the state holds None); `plan.Unpredictable`
    when the pipeline has no such block."""
    from prenoise.integrations.diffusers.plan import Unpredictable

    pending = [getattr(pipe, "blocks", None)]
    while pending:
        current = pending.pop(0)
        if current is None:
            continue
        children = getattr(current, "sub_blocks", None)
        if children:
            pending.extend(children.values())
        elif block_path(current) == block:
            for param in current.inputs:
                if param.name == name:
                    return param.default
    raise Unpredictable(f"no {block.rsplit('.', 1)[-1]} block declares {name}", "blocks")


def prompt_count(values: Mapping[str, Any]) -> int:
    """The prompt batch a text encoder block sees: 1 for a string, the length of a list."""
    from prenoise.integrations.diffusers.plan import Unpredictable

    prompt = values.get("prompt")
    if isinstance(prompt, str):
        return 1
    if isinstance(prompt, list) and prompt:
        return len(prompt)
    raise Unpredictable(f"prompt of type {type(prompt).__name__}", "batch-size")
