"""Which pipeline classes have a noise plan.

Classes are matched exactly (module and qualified name): a subclass may draw differently, so it
runs the plain call until a plan is registered for it. Only plans tested bitwise against the plain
call on tiny pipelines are registered. A registered plan is used only where the diffusers code it
relies on is the reviewed code (`digests.py`; `TESTED_DIFFUSERS_VERSIONS`, re-exported here, are
the releases the digests were reviewed on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from prenoise.integrations.diffusers.digests import TESTED_DIFFUSERS_VERSIONS
from prenoise.integrations.diffusers.pipelines.allegro import plan_allegro
from prenoise.integrations.diffusers.pipelines.animatediff import (
    plan_animatediff,
    plan_animatediff_sdxl,
    plan_animatediff_v2v,
)
from prenoise.integrations.diffusers.pipelines.cogvideox import plan_cogvideox, plan_cogvideox_i2v
from prenoise.integrations.diffusers.pipelines.cogvideox_video import (
    plan_cogvideox_fun_control,
    plan_cogvideox_v2v,
)
from prenoise.integrations.diffusers.pipelines.consisid import plan_consisid
from prenoise.integrations.diffusers.pipelines.easyanimate import (
    plan_easyanimate,
    plan_easyanimate_inpaint,
)
from prenoise.integrations.diffusers.pipelines.flux import plan_flux
from prenoise.integrations.diffusers.pipelines.hunyuan_video import plan_hunyuan_video
from prenoise.integrations.diffusers.pipelines.hunyuan_video15 import (
    plan_hunyuan_video15,
    plan_hunyuan_video15_i2v,
)
from prenoise.integrations.diffusers.pipelines.latte import plan_latte
from prenoise.integrations.diffusers.pipelines.ltx import plan_ltx, plan_ltx_i2v
from prenoise.integrations.diffusers.pipelines.ltx2 import plan_ltx2
from prenoise.integrations.diffusers.pipelines.ltx_condition import (
    plan_ltx2_condition,
    plan_ltx2_i2v,
    plan_ltx_condition,
)
from prenoise.integrations.diffusers.pipelines.mochi import plan_mochi
from prenoise.integrations.diffusers.pipelines.sana_video import (
    plan_sana_video,
    plan_sana_video_i2v,
)
from prenoise.integrations.diffusers.pipelines.skyreels_v2 import (
    plan_skyreels_v2,
    plan_skyreels_v2_df,
    plan_skyreels_v2_df_i2v,
    plan_skyreels_v2_df_v2v,
    plan_skyreels_v2_i2v,
)
from prenoise.integrations.diffusers.pipelines.stable_audio import plan_stable_audio
from prenoise.integrations.diffusers.pipelines.wan import plan_wan, plan_wan_i2v
from prenoise.integrations.diffusers.pipelines.wan_variants import (
    plan_wan_animate,
    plan_wan_v2v,
    plan_wan_vace,
)
from prenoise.integrations.diffusers.plan import BoundCall, PlannedDraw

__all__ = ["TESTED_DIFFUSERS_VERSIONS", "Planner", "planner_for", "register_plan", "supported"]


Planner = Callable[[Any, BoundCall, tuple[torch.Generator, ...]], list[PlannedDraw]]

_PLANS: dict[str, Planner] = {
    "diffusers.pipelines.animatediff.pipeline_animatediff_video2video_controlnet."
    "AnimateDiffVideoToVideoControlNetPipeline": plan_animatediff_v2v,
    "diffusers.pipelines.animatediff.pipeline_animatediff_sparsectrl."
    "AnimateDiffSparseControlNetPipeline": plan_animatediff,
    "diffusers.pipelines.cogvideo.pipeline_cogvideox_video2video.CogVideoXVideoToVideoPipeline": (
        plan_cogvideox_v2v
    ),
    "diffusers.pipelines.cogvideo.pipeline_cogvideox_fun_control.CogVideoXFunControlPipeline": (
        plan_cogvideox_fun_control
    ),
    "diffusers.pipelines.ltx2.pipeline_ltx2_image2video.LTX2ImageToVideoPipeline": plan_ltx2_i2v,
    "diffusers.pipelines.ltx.pipeline_ltx_condition.LTXConditionPipeline": plan_ltx_condition,
    "diffusers.pipelines.ltx2.pipeline_ltx2_condition.LTX2ConditionPipeline": plan_ltx2_condition,
    "diffusers.pipelines.easyanimate.pipeline_easyanimate.EasyAnimatePipeline": plan_easyanimate,
    "diffusers.pipelines.easyanimate.pipeline_easyanimate_inpaint.EasyAnimateInpaintPipeline": (
        plan_easyanimate_inpaint
    ),
    "diffusers.pipelines.consisid.pipeline_consisid.ConsisIDPipeline": plan_consisid,
    "diffusers.pipelines.sana_video.pipeline_sana_video.SanaVideoPipeline": plan_sana_video,
    "diffusers.pipelines.sana_video.pipeline_sana_video_i2v.SanaImageToVideoPipeline": (
        plan_sana_video_i2v
    ),
    "diffusers.pipelines.hunyuan_video1_5.pipeline_hunyuan_video1_5.HunyuanVideo15Pipeline": (
        plan_hunyuan_video15
    ),
    "diffusers.pipelines.hunyuan_video1_5.pipeline_hunyuan_video1_5_image2video."
    "HunyuanVideo15ImageToVideoPipeline": plan_hunyuan_video15_i2v,
    "diffusers.pipelines.wan.pipeline_wan_video2video.WanVideoToVideoPipeline": plan_wan_v2v,
    "diffusers.pipelines.wan.pipeline_wan_vace.WanVACEPipeline": plan_wan_vace,
    "diffusers.pipelines.wan.pipeline_wan_animate.WanAnimatePipeline": plan_wan_animate,
    "diffusers.pipelines.skyreels_v2.pipeline_skyreels_v2.SkyReelsV2Pipeline": plan_skyreels_v2,
    "diffusers.pipelines.skyreels_v2.pipeline_skyreels_v2_i2v.SkyReelsV2ImageToVideoPipeline": (
        plan_skyreels_v2_i2v
    ),
    "diffusers.pipelines.skyreels_v2.pipeline_skyreels_v2_diffusion_forcing."
    "SkyReelsV2DiffusionForcingPipeline": plan_skyreels_v2_df,
    "diffusers.pipelines.skyreels_v2.pipeline_skyreels_v2_diffusion_forcing_i2v."
    "SkyReelsV2DiffusionForcingImageToVideoPipeline": plan_skyreels_v2_df_i2v,
    "diffusers.pipelines.skyreels_v2.pipeline_skyreels_v2_diffusion_forcing_v2v."
    "SkyReelsV2DiffusionForcingVideoToVideoPipeline": plan_skyreels_v2_df_v2v,
    "diffusers.pipelines.animatediff.pipeline_animatediff.AnimateDiffPipeline": plan_animatediff,
    "diffusers.pipelines.animatediff.pipeline_animatediff_controlnet."
    "AnimateDiffControlNetPipeline": plan_animatediff,
    "diffusers.pipelines.animatediff.pipeline_animatediff_sdxl.AnimateDiffSDXLPipeline": (
        plan_animatediff_sdxl
    ),
    "diffusers.pipelines.animatediff.pipeline_animatediff_video2video."
    "AnimateDiffVideoToVideoPipeline": plan_animatediff_v2v,
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
    """Register (or replace) the plan of the class at `module.QualName`.

    Its calls are gated by the digests of the code it relies on (`digests.relied_on`): with none
    recorded for the class, only `reviewed.COMMON` (`randn_tensor`, the VAE posterior); record
    the rest with `digests.register_reviewed_code(class_path, {...})`."""
    _PLANS[class_path] = planner


def supported() -> tuple[str, ...]:
    """Qualified names of the classes with a plan."""
    return tuple(sorted(_PLANS))
