"""What `pipelines` hooks in vLLM-Omni 0.30.0's other pipelines: one row per hooked name.

Each row was checked against vllm-omni 0.30.0, diffusers 0.40.0 and torchsde 0.2.6 (the versions
`.venv-vllm-omni` pins). Two kinds of name are hooked:

* a pipeline's entry (`forward`): marks the call as that pipeline's (a context variable, for the
  rows `scoped` to it) and, in a named stream, refuses the request up front when one of the
  pipeline's draws could not be hooked; Wan2.2 T2V's entry also prepares its first draw ahead
  (`wan_ahead`);
* a draw: the module global `randn_tensor` a pipeline module imported by name from diffusers
  (every call site of that module goes through it: initial latents and per-step noise alike; it
  must still be diffusers' function), or a function of the module's own that calls `torch.randn`
  (it must still be the module's own). A name that is neither was replaced by another plugin:
  prenoise leaves it alone.

The stream's torch function mode (`prenoise.stream_mode`) is active only while a draw runs, never
for a denoising loop or a model.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AHEAD", "DRAW", "ENTRY", "NOT_COVERED", "PIPELINES", "TARGETS", "StreamTarget"]

ENTRY = "entry"
"""Kind: a pipeline class's `forward` (marks the pipeline's scope; refuses an uncovered one)."""
AHEAD = "ahead"
"""Kind: an entry that also prepares the first draw ahead (`wan_ahead`)."""
NOT_COVERED = "not covered"
"""Kind: the `forward` of a pipeline whose draws prenoise does not put in a stream: a named
stream refuses its requests (never silently native)."""
DRAW = "draw"
"""Kind: a module-level function that draws (`randn_tensor`, or a function of the module's own)."""

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
LTX2 = "LTX-2"
STABLE_AUDIO = "Stable Audio"

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
    _entry("Wan2.2 I2V", "wan2_2.pipeline_wan2_2_i2v", "Wan22I2VPipeline"),
    _randn("Wan2.2 I2V", "wan2_2.pipeline_wan2_2_i2v", "Wan22I2VPipeline.prepare_latents"),
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
)
"""Every hooked name. If any name of a pipeline is missing or was replaced by another plugin,
that pipeline is *uncovered*: its requests in a named stream fail rather than mix streams."""

PIPELINES: tuple[str, ...] = tuple(
    dict.fromkeys(t.pipeline for t in TARGETS if t.kind != NOT_COVERED)
)
"""The covered pipelines, in table order."""
