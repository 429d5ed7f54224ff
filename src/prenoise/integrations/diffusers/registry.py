"""Which pipeline classes have a noise plan, and which diffusers versions the plans were tested on.

Classes are matched exactly (module and qualified name): a subclass may draw differently, so it
runs the plain call until a plan is registered for it. Only plans tested bitwise against the plain
call on tiny pipelines are registered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from prenoise.integrations.diffusers.pipelines.allegro import plan_allegro
from prenoise.integrations.diffusers.pipelines.cogvideox import plan_cogvideox, plan_cogvideox_i2v
from prenoise.integrations.diffusers.pipelines.flux import plan_flux
from prenoise.integrations.diffusers.pipelines.hunyuan_video import plan_hunyuan_video
from prenoise.integrations.diffusers.pipelines.latte import plan_latte
from prenoise.integrations.diffusers.pipelines.ltx import plan_ltx, plan_ltx_i2v
from prenoise.integrations.diffusers.pipelines.ltx2 import plan_ltx2
from prenoise.integrations.diffusers.pipelines.mochi import plan_mochi
from prenoise.integrations.diffusers.pipelines.stable_audio import plan_stable_audio
from prenoise.integrations.diffusers.pipelines.wan import plan_wan, plan_wan_i2v
from prenoise.integrations.diffusers.plan import BoundCall, PlannedDraw

__all__ = ["TESTED_DIFFUSERS_VERSIONS", "Planner", "planner_for", "register_plan", "supported"]

TESTED_DIFFUSERS_VERSIONS = frozenset({"0.40.0", "0.41.0", "0.42.0", "0.42.1"})
"""The diffusers releases whose draw code the plans were checked on: every release from 0.40.0
(vLLM-Omni 0.30.0's pin) to 0.42.1, as exact versions (a later patch release falls through until
it is checked). The plans are the same on all four (tests/integrations/test_diffusers_versions.py
records the reviewed source digests); `make test` runs the bitwise tests on 0.40.0 and 0.42.1."""

Planner = Callable[[Any, BoundCall, tuple[torch.Generator, ...]], list[PlannedDraw]]

_PLANS: dict[str, Planner] = {
    "diffusers.pipelines.wan.pipeline_wan.WanPipeline": plan_wan,
    "diffusers.pipelines.wan.pipeline_wan_i2v.WanImageToVideoPipeline": plan_wan_i2v,
    "diffusers.pipelines.flux.pipeline_flux.FluxPipeline": plan_flux,
    "diffusers.pipelines.ltx.pipeline_ltx.LTXPipeline": plan_ltx,
    "diffusers.pipelines.ltx.pipeline_ltx_image2video.LTXImageToVideoPipeline": plan_ltx_i2v,
    "diffusers.pipelines.cogvideo.pipeline_cogvideox.CogVideoXPipeline": plan_cogvideox,
    "diffusers.pipelines.cogvideo.pipeline_cogvideox_image2video.CogVideoXImageToVideoPipeline": (
        plan_cogvideox_i2v
    ),
    "diffusers.pipelines.hunyuan_video.pipeline_hunyuan_video.HunyuanVideoPipeline": (
        plan_hunyuan_video
    ),
    "diffusers.pipelines.stable_audio.pipeline_stable_audio.StableAudioPipeline": plan_stable_audio,
    "diffusers.pipelines.ltx2.pipeline_ltx2.LTX2Pipeline": plan_ltx2,
    "diffusers.pipelines.latte.pipeline_latte.LattePipeline": plan_latte,
    "diffusers.pipelines.mochi.pipeline_mochi.MochiPipeline": plan_mochi,
    "diffusers.pipelines.allegro.pipeline_allegro.AllegroPipeline": plan_allegro,
}


def _path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def planner_for(cls: type) -> Planner | None:
    """The plan of exactly this class (None when it has none)."""
    return _PLANS.get(_path(cls))


def register_plan(class_path: str, planner: Planner) -> None:
    """Register (or replace) the plan of the class at `module.QualName`."""
    _PLANS[class_path] = planner


def supported() -> tuple[str, ...]:
    """Qualified names of the classes with a plan."""
    return tuple(sorted(_PLANS))
