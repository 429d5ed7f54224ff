"""`PRENOISE_SGLANG_NOISE_STREAM` for SGLang's Wan, HunyuanVideo and LTX-2 pipelines.

Under `x86` / `libm`, a request of exactly `WanPipeline`, `HunyuanVideoPipeline`, `LTX2Pipeline`,
`LTX2TwoStagePipeline` or `LTX2TwoStageHQPipeline` (`latents_ahead.KINDS`) draws every normal
draw SGLang 0.5.23 makes for it in that stream (the audit: docs/background/sglang-latents.md):

- the initial latents (`LatentPreparationStage.forward` / `_prepare_grouped_latents`,
  `LTX2AVLatentPreparationStage.forward`): prepared on the request's worker in the stream
  (`latents_ahead`), served on key and exact generator state, else drawn by upstream's own
  call inside a `StreamDrawMode`;
- the sites below (`SITE_HOOKS`), each upstream's own function run inside a `StreamDrawMode`:
  the flow-match scheduler's stochastic step (`FlowMatchEulerDiscreteScheduler._transition`),
  LTX-2's step / renoise noise on the request generators
  (`LTX2DenoisingStage._randn_like_with_batch_generators`), its res2s SDE noise
  (`_ltx2_res2s_new_noise`), the LTX-2.3 stage-2 renoise generator's burn draws and noise
  (`LTX2RefinementStage._build_stage2_renoise_generator`, `_ltx2_renoise_like`), the TI2V
  image's VAE posterior sample (`LTX2ImageEncodingStage._vae_encode`) and the whole decode
  stage (`LTX2AVDecodingStage.forward`: a noise-injecting VAE, the diffusion decoder).

Device generators: the streams draw on a CPU generator. A request whose generators are not on
the CPU (Wan's and HunyuanVideo's default `generator_device`) fails when its input validation
made them, before anything is drawn, with `NoiseStreamError` saying to pass
`generator_device='cpu'` or use the native stream; a draw on a generator upstream itself makes
on the latents' device (LTX-2 res2s, LTX-2.3 stage 2, the diffusion decoder: the GPU in a
served deployment) fails at that draw, naming it (use the native stream). No stand-in generator
is used: those generators are the request's or upstream's own, seeded and consumed across
stages, so a CPU stand-in would be a second stream beside the one upstream advances.

Refused at the request's entry (`NoiseStreamError`, nothing drawn): a rollout request (its
variance noise is drawn by upstream's `FlowRolloutController`), a Wan progressive-resolution
request (`progressive_mode` `dct` / `dct_rewind`: fresh generators on the device and an
upsampling draw this path does not wrap), and a pipeline whose scheduler is not one of the
audited classes (`FlowUniPCMultistepScheduler`, `FlowMatchEulerDiscreteScheduler`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prenoise.integrations.sglang.reviewed import (
    LTX2_STREAMS_PATH,
    LTX2_TWO_STAGE_STREAMS_PATH,
    STANDARD_STREAMS_PATH,
)
from prenoise.integrations.sglang.streams import NOISE_STREAM_ENV, current_stream, run_in_stream
from prenoise.integrations.sglang.support import enabled
from prenoise.noise.streams import NATIVE, NoiseStreamError

__all__ = [
    "SITE_HOOKS",
    "check_entry",
    "check_generators",
    "site_stream",
]

_RT = "sglang.multimodal_gen.runtime."
_LTX2 = _RT + "pipelines_core.stages.model_specific_stages.ltx_2."
_TRANSITION = (
    _RT + "models.schedulers.scheduling_flow_match_euler_discrete."
    "FlowMatchEulerDiscreteScheduler._transition"
)
_RANDN_LIKE = _LTX2 + "denoising.LTX2DenoisingStage._randn_like_with_batch_generators"
_RES2S = _LTX2 + "denoising.LTX2DenoisingStage._ltx2_res2s_new_noise"
_BURN = _LTX2 + "denoising_av.LTX2RefinementStage._build_stage2_renoise_generator"
_RENOISE = _LTX2 + "denoising_av.LTX2RefinementStage._ltx2_renoise_like"
_VAE_ENCODE = _RT + "pipelines_core.stages.image_encoding.LTX2ImageEncodingStage._vae_encode"
_DECODE = _LTX2 + "decoding_av.LTX2AVDecodingStage.forward"

_DEVICE_HINT = {
    _RES2S: "the res2s SDE noise generator upstream makes on the latents' device",
    _BURN: "the LTX-2.3 stage-2 renoise generator upstream makes on the latents' device",
    _RENOISE: "the LTX-2.3 stage-2 renoise generator upstream makes on the latents' device",
    _DECODE: "the decoder's generator (or global RNG) on the latents' device",
}

_SCHEDULERS = {
    (_RT + "models.schedulers.scheduling_flow_unipc_multistep", "FlowUniPCMultistepScheduler"),
    (_RT + "models.schedulers.scheduling_flow_match_euler_discrete",
     "FlowMatchEulerDiscreteScheduler"),
    (_RT + "pipelines.ltx_2_pipeline", "LTX2FlowMatchScheduler"),  # LTX-2's (a subclass)
}  # fmt: skip
"""The scheduler classes audited: no draw but `FlowMatchEulerDiscreteScheduler._transition`."""


def site_stream() -> str:
    """The stream of this thread's draws at a wrapped site (`native` with the plugin off)."""
    return current_stream() if enabled() is True else NATIVE


def _around(target: str) -> Callable[..., Any]:
    hint = _DEVICE_HINT.get(target)
    site = target.rsplit(".", 2)[-2] + "." + target.rsplit(".", 1)[-1]

    def around_stream_site(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """AROUND a draw site: upstream's function with its normal draws in this request's
        named stream (`native`: a plain call); a draw the stream cannot serve raises
        `NoiseStreamError` naming the site."""
        stream = site_stream()
        if stream == NATIVE:
            return original(*args, **kwargs)
        try:
            return run_in_stream(stream, original, *args, **kwargs)
        except NoiseStreamError as error:
            why = f" ({hint}: on a GPU it cannot be drawn in a named stream)" if hint else ""
            raise NoiseStreamError(
                f"prenoise: {NOISE_STREAM_ENV}={stream}: {site}{why}: {error}; use the native "
                "stream for this request"
            ) from error

    around_stream_site.__qualname__ = f"around_stream_site[{site}]"
    return around_stream_site


_HOOKS = {t: _around(t) for t in (_TRANSITION, _RANDN_LIKE, _RES2S, _BURN, _RENOISE,
                                  _VAE_ENCODE, _DECODE)}  # fmt: skip
_LTX2_SITES = tuple((t, _HOOKS[t]) for t in (_TRANSITION, _RANDN_LIKE, _RES2S, _VAE_ENCODE,
                                             _DECODE))  # fmt: skip

SITE_HOOKS: dict[str, tuple[tuple[str, Callable[..., Any]], ...]] = {
    STANDARD_STREAMS_PATH: ((_TRANSITION, _HOOKS[_TRANSITION]),),
    LTX2_STREAMS_PATH: _LTX2_SITES,
    LTX2_TWO_STAGE_STREAMS_PATH: (*_LTX2_SITES, (_BURN, _HOOKS[_BURN]),
                                  (_RENOISE, _HOOKS[_RENOISE])),
}  # fmt: skip
"""Stream path -> its draw sites (registered with the latents path's hooks; once per target)."""


def check_entry(kind: str, pipeline: Any, batches: list[Any], stream: str) -> None:
    """`NoiseStreamError` for a request of pipeline `kind` whose draws the stream does not
    cover: a scheduler of a class not audited, a rollout request, a Wan progressive-resolution
    request."""
    modules = getattr(pipeline, "modules", None)
    scheduler = modules.get("scheduler") if isinstance(modules, dict) else None
    if scheduler is not None:
        cls = type(scheduler)
        if (cls.__module__, cls.__qualname__) not in _SCHEDULERS:
            raise NoiseStreamError(
                f"prenoise: {NOISE_STREAM_ENV}={stream}: {type(pipeline).__name__}'s scheduler "
                f"{cls.__qualname__} is not one whose draws prenoise covers; use the native "
                "stream for it"
            )
    for batch in batches:
        if getattr(batch, "rollout", False):
            raise NoiseStreamError(
                f"prenoise: {NOISE_STREAM_ENV}={stream}: a rollout request of "
                f"{type(pipeline).__name__} draws its variance noise in upstream's rollout "
                "controller, which the named streams do not cover; use the native stream"
            )
    for batch in batches if kind == "Wan" else ():  # the others run no progressive stage
        mode = getattr(batch, "progressive_mode", "fullres") or "fullres"
        if mode != "fullres":
            raise NoiseStreamError(
                f"prenoise: {NOISE_STREAM_ENV}={stream}: progressive_mode={mode!r} draws on "
                "fresh device generators the named streams do not cover; use "
                "progressive_mode='fullres' or the native stream"
            )


def check_generators(pipeline: Any, batch: Any, stream: str) -> None:
    """After input validation made the request's generators: `NoiseStreamError` unless each is
    a CPU generator (a stream draws on the CPU), saying what to change."""
    given = getattr(batch, "generator", None)
    listed = given if isinstance(given, list | tuple) else [given]
    for generator in listed:
        device = getattr(getattr(generator, "device", None), "type", "cpu")
        if generator is not None and device != "cpu":
            raise NoiseStreamError(
                f"prenoise: {NOISE_STREAM_ENV}={stream} draws on CPU generators, and "
                f"{type(pipeline).__name__}'s request has a {device} generator: pass "
                "generator_device='cpu' (the request's sampling params or the pipeline "
                "config), or use the native stream"
            )
