"""Tiny conditioning / video-input pipelines of LTX, LTX-2 and CogVideoX, registered in
`diffusers_tiny`.

Each reuses the components of the matching tiny text-to-video pipeline (`diffusers_tiny.ltx()`,
`ltx2()`, `cogvideox()`), built afresh, in the conditioning class.
"""

from __future__ import annotations

import inspect
from typing import Any

import diffusers_tiny
from diffusers_tiny import LTX2_GUIDANCE, VIDEO, image


def _as(cls: type, pipe: Any) -> Any:
    """`cls` built from `pipe`'s components (those `cls.__init__` takes)."""
    names = inspect.signature(cls.__init__).parameters
    return cls(**{k: v for k, v in pipe.components.items() if k in names})


def cogvideox_v2v() -> Any:
    """`CogVideoXVideoToVideoPipeline` with the DPM scheduler (draws at every step)."""
    from diffusers import CogVideoXVideoToVideoPipeline

    return _as(CogVideoXVideoToVideoPipeline, diffusers_tiny.cogvideox())


def cogvideox_fun_control() -> Any:
    """`CogVideoXFunControlPipeline` (8 input channels: noise + control latents) with DDIM: it
    calls `scheduler.step(noise_pred, t, latents)`, which the CogVideoX DPM scheduler does not
    take; DDIM is given the generator too, and draws at every step with `eta > 0`."""
    from diffusers import CogVideoXFunControlPipeline, DDIMScheduler

    pipe = _as(CogVideoXFunControlPipeline, diffusers_tiny.cogvideox(image_to_video=True))
    pipe.scheduler = DDIMScheduler.from_config(pipe.scheduler.config)
    return pipe


def ltx2_i2v() -> Any:
    from diffusers import LTX2ImageToVideoPipeline

    return _as(LTX2ImageToVideoPipeline, diffusers_tiny.ltx2())


def ltx_condition() -> Any:
    from diffusers import LTXConditionPipeline

    return _as(LTXConditionPipeline, diffusers_tiny.ltx())


def ltx2_condition() -> Any:
    """`LTX2ConditionPipeline` whose video VAE really halves the frames, as its
    `temporal_compression_ratio` says (`diffusers_tiny.ltx2()`'s encoder downsamples only in
    space): a multi-frame keyframe condition's token count follows the encoded frames."""
    from diffusers import AutoencoderKLLTX2Video, LTX2ConditionPipeline

    pipe = diffusers_tiny.ltx2()
    with diffusers_tiny._seeded(1):
        vae = AutoencoderKLLTX2Video(
            **{**pipe.vae.config, "downsample_type": ("spatiotemporal",)}
        ).eval()
    vae.use_framewise_encoding = False
    vae.use_framewise_decoding = False
    pipe.vae = vae
    return _as(LTX2ConditionPipeline, pipe)


diffusers_tiny.BUILDERS.update(
    cogvideox_v2v=cogvideox_v2v,
    cogvideox_fun_control=cogvideox_fun_control,
    ltx2_i2v=ltx2_i2v,
    ltx_condition=ltx_condition,
    ltx2_condition=ltx2_condition,
)


def frames(seed: int, count: int = 9, size: int = 32) -> list[Any]:
    """A video: `count` PIL frames."""
    return [image(seed * 100 + i, size) for i in range(count)]


def _videos(prompts: int) -> Any:
    return frames(0) if prompts == 1 else [frames(p) for p in range(prompts)]


COGVIDEOX = {"height": 32, "width": 32, "negative_prompt": "bad", "guidance_scale": 6.0}
COGVIDEOX.update(max_sequence_length=16, output_type="pt")


def _cogvideox_v2v(prompts: int) -> dict[str, Any]:
    return {**COGVIDEOX, "video": _videos(prompts), "num_inference_steps": 3, "strength": 0.7}


def _cogvideox_fun_control(prompts: int) -> dict[str, Any]:
    return {**COGVIDEOX, "control_video": _videos(prompts), "num_inference_steps": 2}


def _ltx2(prompts: int) -> dict[str, Any]:
    kwargs: dict[str, Any] = {**VIDEO, **LTX2_GUIDANCE, "num_frames": 5, "height": 32}
    kwargs.update(width=32, frame_rate=25.0, negative_prompt="bad")
    kwargs.update(decode_timestep=0.05, decode_noise_scale=0.025)
    return kwargs


def _ltx2_i2v(prompts: int) -> dict[str, Any]:
    # `image_crf=0`: no H.264 re-compression (needs PyAV and a single PIL image)
    images = image() if prompts == 1 else [image(i) for i in range(prompts)]
    return {**_ltx2(prompts), "image": images, "image_crf": 0}


def _ltx_condition(prompts: int) -> dict[str, Any]:
    kwargs: dict[str, Any] = {**VIDEO, "height": 32, "width": 32, "image": image()}
    kwargs.update(decode_timestep=0.05, decode_noise_scale=0.025)
    return kwargs


def _ltx2_condition(prompts: int) -> dict[str, Any]:
    from diffusers.pipelines.ltx2.pipeline_ltx2_condition import LTX2VideoCondition

    return {**_ltx2(prompts), "conditions": [LTX2VideoCondition(frames=image(), crf=0)]}


diffusers_tiny.CALL_KWARGS.update(
    cogvideox_v2v=_cogvideox_v2v,
    cogvideox_fun_control=_cogvideox_fun_control,
    ltx2_i2v=_ltx2_i2v,
    ltx_condition=_ltx_condition,
    ltx2_condition=_ltx2_condition,
)
