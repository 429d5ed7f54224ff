"""What `pipelines` hooks in vLLM-Omni's other pipelines: one row per hooked name.

Each row was checked against vllm-omni 0.30.0, diffusers 0.40.0 and torchsde 0.2.6 (the versions
`.venv-vllm-omni` pins), and re-checked on 0.31.0rc1 and 0.32.0rc1 by the same tests in their
venvs (every hooked module's draw sites; 0.32.0rc1 adds `LTX2TextToAudioPipeline`, not listed:
refused in a named stream). Three kinds of name are hooked:

* a pipeline's entry (`forward`): marks the call as that pipeline's (a context variable, for the
  rows `scoped` to it) and, in a named stream, refuses the request up front when one of the
  pipeline's draws could not be hooked; Wan2.2 T2V's entry also prepares its first draw ahead
  (`wan_ahead`);
* a draw: the module global `randn_tensor` a pipeline module imported by name from diffusers
  (every call site of that module goes through it: initial latents and per-step noise alike; it
  must still be diffusers' function), or a function of the module's own that calls `torch.randn`
  (it must still be the module's own). A name that is neither was replaced by another plugin:
  prenoise leaves it alone;
* the runner's guard (`RUNNER_GUARD`): the method every request's generator is made in, where a
  named stream refuses a seeded request of a pipeline class not in `COVERED_CLASSES`.

The stream's torch function mode (`prenoise.noise.stream_mode`) is active only while a draw runs,
never for a denoising loop or a model.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "AHEAD",
    "COVERED_CLASSES",
    "DRAW",
    "ENTRY",
    "GUARD",
    "NOT_COVERED",
    "PIPELINES",
    "RUNNER_GUARD",
    "TARGETS",
    "StreamTarget",
]

ENTRY = "entry"
"""Kind: a pipeline class's `forward` (marks the pipeline's scope; refuses an uncovered one)."""
AHEAD = "ahead"
"""Kind: an entry that also prepares the first draw ahead (`wan_ahead`)."""
NOT_COVERED = "not covered"
"""Kind: the `forward` of a pipeline whose draws prenoise does not put in a stream: a named
stream refuses its requests (never silently native)."""
DRAW = "draw"
"""Kind: a module-level function that draws (`randn_tensor`, or a function of the module's own)."""
GUARD = "guard"
"""Kind: vLLM-Omni's runner method that makes every request's generator: in a named stream it
refuses a seeded request of a pipeline class that is not in `COVERED_CLASSES` (Flux, SD3, the
diffusers adapter, ...), whose draws would otherwise stay local torch's."""

_M = "vllm_omni.diffusion.models."


@dataclass(frozen=True)
class StreamTarget:
    """One hooked name: where it lives, what it draws, and which pipeline it serves."""

    pipeline: str
    module: str
    name: str
    kind: str
    draws: str
    owner: str | None = None
    """The class holding `name` (entries); None: a module global."""
    generator_arg: tuple[int, str] | None = (1, "generator")
    """(position, keyword) of the generator argument; None: the function seeds its own."""
    device_arg: tuple[int, str] | None = None
    """(position, keyword) of the device a self-seeding function draws on."""
    own_generators: bool = False
    """The generators are upstream's own, made on a device upstream picks (not the request's):
    a draw on another device than the CPU is the device's arithmetic, left to upstream (said
    once), since no setting of the request can move it. False: the request's generator, and one
    that is not on the CPU refuses the request in a named stream."""
    scoped: bool = False
    """Served only inside this pipeline's entry: the module is shared with code prenoise does not
    cover (diffusers' own pipelines, other torchsde users)."""

    @property
    def key(self) -> str:
        """`module:owner.name`: how logs and `served_counts` name the target."""
        return f"{self.module}:{self.owner + '.' if self.owner else ''}{self.name}"


def _entry(pipeline: str, module: str, owner: str, kind: str = ENTRY) -> StreamTarget:
    return StreamTarget(pipeline, _M + module, "forward", kind, "the request", owner, None)


def _randn(pipeline: str, module: str, draws: str) -> StreamTarget:
    return StreamTarget(pipeline, _M + module, "randn_tensor", DRAW, draws)


WAN_T2V = "Wan2.2 T2V/TI2V/VACE"
WAN_I2V = "Wan2.2 I2V"
LTX2 = "LTX-2"
STABLE_AUDIO = "Stable Audio"
MINIMAX_H3 = "MiniMax-H3"
RUNNER = "every vLLM-Omni pipeline"

RUNNER_GUARD = StreamTarget(
    RUNNER,
    "vllm_omni.diffusion.worker.diffusion_model_runner",
    "_initialize_generator",
    GUARD,
    "every request's generator (both execution modes: whole forward and step-wise)",
    "DiffusionModelRunner",
    None,
)
"""The one name every request passes, whatever its pipeline: where a named stream refuses the
pipelines prenoise does not cover. The last row of `TARGETS`."""

TARGETS: tuple[StreamTarget, ...] = (
    _entry(WAN_T2V, "wan2_2.pipeline_wan2_2", "Wan22Pipeline", AHEAD),
    _randn(
        WAN_T2V,
        "wan2_2.pipeline_wan2_2",
        "Wan22Pipeline.prepare_latents: initial latents (T2V, TI2V, and VACE, which inherits "
        "it); Wan22Pipeline.diffuse (FastWan DMD checkpoints): per-step noise",
    ),
    _entry(WAN_T2V, "wan2_2.pipeline_wan2_2_vace", "Wan22VACEPipeline"),
    StreamTarget(
        "Wan2.2 S2V",
        _M + "wan2_2.pipeline_wan2_2_s2v",
        "forward",
        NOT_COVERED,
        "its per-clip generators are made on the pipeline's device and its scheduler is given "
        "them (a draw in diffusers' scheduler module, not hooked)",
        "Wan22S2VPipeline",
        None,
    ),
    _entry(WAN_I2V, "wan2_2.pipeline_wan2_2_i2v", "Wan22I2VPipeline"),
    _randn(WAN_I2V, "wan2_2.pipeline_wan2_2_i2v", "Wan22I2VPipeline.prepare_latents"),
    _entry(LTX2, "ltx2.ltx2_request", "LTXRequestMixin"),
    _randn(
        LTX2,
        "ltx2.ltx2_latents",
        "prepare_latents / prepare_audio_latents: initial video and audio latents; "
        "create_noised_state / create_conditioned_noised_state: noise on given latents "
        "(two-stage, image conditioning)",
    ),
    _randn(LTX2, "ltx2.ltx2_conditioning", "LTXI2VConditioningMixin.prepare_latents: noise"),
    _randn(LTX2, "ltx2.ltx2_runtime", "LTXRuntime._decode_output: decode-timestep noise"),
    _randn(LTX2, "ltx2.vae.distributed", "LTX-2.5 diffusion decoder, distributed tiles: noise"),
    StreamTarget(
        LTX2,
        "diffusers.models.autoencoders.ltx2_diffusion_decoder",
        "randn_tensor",
        DRAW,
        "LTX-2.5 diffusion decoder (diffusers' code, one rank): decoder noise",
        scoped=True,
    ),
    StreamTarget(
        LTX2,
        _M + "ltx2.ltx2_denoise",
        "_randn_like_with_generators",
        DRAW,
        "euler_ancestral sampler: per-step noise from generators seeded with the request "
        "generator's initial seed + 10000, made on the pipeline's device",
        generator_arg=(1, "generators"),
        own_generators=True,
    ),
    _entry(
        "HunyuanVideo-1.5 T2V", "hunyuan_video.pipeline_hunyuan_video_1_5", "HunyuanVideo15Pipeline"
    ),
    _randn(
        "HunyuanVideo-1.5 T2V",
        "hunyuan_video.pipeline_hunyuan_video_1_5",
        "HunyuanVideo15Pipeline.prepare_latents",
    ),
    _entry(
        "HunyuanVideo-1.5 I2V",
        "hunyuan_video.pipeline_hunyuan_video_1_5_i2v",
        "HunyuanVideo15I2VPipeline",
    ),
    _randn(
        "HunyuanVideo-1.5 I2V",
        "hunyuan_video.pipeline_hunyuan_video_1_5_i2v",
        "HunyuanVideo15I2VPipeline.prepare_latents",
    ),
    _entry("Qwen-Image", "qwen_image.pipeline_qwen_image", "QwenImagePipeline"),
    _randn("Qwen-Image", "qwen_image.pipeline_qwen_image", "QwenImagePipeline.prepare_latents"),
    _entry("Qwen-Image-Edit", "qwen_image.pipeline_qwen_image_edit", "QwenImageEditPipeline"),
    _randn(
        "Qwen-Image-Edit",
        "qwen_image.pipeline_qwen_image_edit",
        "QwenImageEditPipeline.prepare_latents",
    ),
    _entry(
        "Qwen-Image-Edit-Plus",
        "qwen_image.pipeline_qwen_image_edit_plus",
        "QwenImageEditPlusPipeline",
    ),
    _randn(
        "Qwen-Image-Edit-Plus",
        "qwen_image.pipeline_qwen_image_edit_plus",
        "QwenImageEditPlusPipeline.prepare_latents",
    ),
    _entry(
        "Qwen-Image-Layered", "qwen_image.pipeline_qwen_image_layered", "QwenImageLayeredPipeline"
    ),
    _randn(
        "Qwen-Image-Layered",
        "qwen_image.pipeline_qwen_image_layered",
        "QwenImageLayeredPipeline.prepare_latents",
    ),
    _entry(STABLE_AUDIO, "stable_audio.pipeline_stable_audio", "StableAudioPipeline"),
    _randn(
        STABLE_AUDIO,
        "stable_audio.pipeline_stable_audio",
        "StableAudioPipeline.prepare_latents: initial latents",
    ),
    StreamTarget(
        STABLE_AUDIO,
        "torchsde._brownian.brownian_interval",
        "_randn",
        DRAW,
        "CosineDPMSolverMultistepScheduler's Brownian tree (torchsde): per-step noise from "
        "generators seeded from the request generator's initial seed, made on the latents' device",
        generator_arg=None,
        device_arg=(2, "device"),
        own_generators=True,
        scoped=True,
    ),
    RUNNER_GUARD,
)
"""Every hooked name. If any name of a pipeline is missing or was replaced by another plugin,
that pipeline is *uncovered*: its requests in a named stream fail rather than mix streams."""

PIPELINES: tuple[str, ...] = tuple(
    dict.fromkeys(t.pipeline for t in TARGETS if t.kind not in (NOT_COVERED, GUARD))
)
"""The covered pipelines, in table order (MiniMax-H3 is the plugin's own: `plugin`)."""


def _classes(module: str, pipeline: str, *names: str) -> dict[str, str]:
    return {f"{_M}{module}.{name}": pipeline for name in names}


COVERED_CLASSES: dict[str, str] = {
    **_classes("minimax_h3.pipeline_minimax_h3", MINIMAX_H3, "MiniMaxH3Pipeline"),
    **_classes("wan2_2.pipeline_wan2_2", WAN_T2V, "Wan22Pipeline", "WanT2VDMD2Pipeline"),
    **_classes("wan2_2.pipeline_wan2_2_vace", WAN_T2V, "Wan22VACEPipeline"),
    **_classes("wan2_2.pipeline_wan2_2_i2v", WAN_I2V, "Wan22I2VPipeline", "WanI2VDMD2Pipeline"),
    **_classes(
        "ltx2.pipeline_ltx2",
        LTX2,
        "LTX2Pipeline",
        "LTX2DistilledOneStagePipeline",
        "LTX2T2VDMD2Pipeline",
        "LTX2I2VDMD2Pipeline",
    ),
    **_classes(
        "ltx2.pipeline_ltx2_two_stage",
        LTX2,
        "LTX2TwoStagePipeline",
        "LTX2DistilledTwoStagePipeline",
    ),
    **_classes(
        "hunyuan_video.pipeline_hunyuan_video_1_5", "HunyuanVideo-1.5 T2V", "HunyuanVideo15Pipeline"
    ),
    **_classes(
        "hunyuan_video.pipeline_hunyuan_video_1_5_i2v",
        "HunyuanVideo-1.5 I2V",
        "HunyuanVideo15I2VPipeline",
    ),
    **_classes(
        "qwen_image.pipeline_qwen_image", "Qwen-Image", "QwenImagePipeline", "QwenImageDMD2Pipeline"
    ),
    **_classes("qwen_image.pipeline_qwen_image_edit", "Qwen-Image-Edit", "QwenImageEditPipeline"),
    **_classes(
        "qwen_image.pipeline_qwen_image_edit_plus",
        "Qwen-Image-Edit-Plus",
        "QwenImageEditPlusPipeline",
    ),
    **_classes(
        "qwen_image.pipeline_qwen_image_layered", "Qwen-Image-Layered", "QwenImageLayeredPipeline"
    ),
    **_classes("stable_audio.pipeline_stable_audio", STABLE_AUDIO, "StableAudioPipeline"),
}
"""Pipeline classes (`module.qualname`, exact: a subclass is not covered until it is listed)
whose every CPU-generator draw a named stream serves, checked against vllm-omni 0.30.0's
registry: each is a hooked entry's class or a subclass that adds no draw of its own (the DMD2
variants add a scheduler that is not given the generator; the LTX-2 variants only pick stages).
In a named stream, a seeded request of any other class is refused by `RUNNER_GUARD`."""
