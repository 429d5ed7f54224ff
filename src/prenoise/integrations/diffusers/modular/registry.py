"""Which modular pipeline classes have a noise plan.

Classes are matched exactly (module and qualified name), as for classic pipelines: a subclass
may draw differently, so it runs the plain call until a plan is registered for it.
"""

from __future__ import annotations

from prenoise.integrations.diffusers.modular import hunyuan_video15, ltx2, minimax_h3, wan
from prenoise.integrations.diffusers.modular.plan import ModularPlan

__all__ = ["modular_plan_for", "register_modular_plan", "supported"]

_PLANS: dict[str, ModularPlan] = {
    minimax_h3.PIPELINE_CLASS: minimax_h3.MINIMAX_H3,
    **dict.fromkeys(wan.PIPELINE_CLASSES, wan.WAN),
    ltx2.PIPELINE_CLASS: ltx2.LTX2,
    hunyuan_video15.PIPELINE_CLASS: hunyuan_video15.HUNYUAN_VIDEO15,
}


def modular_plan_for(cls: type) -> ModularPlan | None:
    """The plan of exactly this modular pipeline class (None when it has none)."""
    return _PLANS.get(f"{cls.__module__}.{cls.__qualname__}")


def register_modular_plan(class_path: str, plan: ModularPlan) -> None:
    """Register (or replace) the plan of the modular pipeline class at `module.QualName`."""
    _PLANS[class_path] = plan


def supported() -> tuple[str, ...]:
    """Qualified names of the modular pipeline classes with a plan."""
    return tuple(sorted(_PLANS))
