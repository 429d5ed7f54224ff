"""The reviewed diffusers code the modular plans rely on, per `ModularPipeline` class.

A modular plan relies on `MODULAR_COMMON` and its `MODULAR_REVIEWED` table, keyed by the
`ModularPipeline` class ("module.QualName"): add one table per modular plan, with the digest of
each function (or whole class: `digests.code_digest`) on each release of `reviewed.RELEASES` it
was reviewed on, at least the newest (`scripts/diffusers_digests.py KEY...` prints the entries;
tests/integrations/test_diffusers_versions.py checks the tables). On a release whose code was not
reviewed the digest does not match, and the plan runs plain, naming the function.
`digests.register_reviewed_code` does the same at run time.
"""

from __future__ import annotations

from prenoise.integrations.diffusers.reviewed import ALL, RANDN_TENSOR

__all__ = ["MODULAR_COMMON", "MODULAR_REVIEWED"]

_MODULAR = "diffusers.modular_pipelines.modular_pipeline:"
MODULAR_COMMON = (
    RANDN_TENSOR,
    _MODULAR + "ModularPipeline.__call__",
    _MODULAR + "ModularPipelineBlocks.get_block_state",  # prenoise's block hook wraps it
)
"""What every modular plan relies on: the draw, the pipeline's call, the block-state read."""

_H3 = "diffusers.modular_pipelines.minimax_h3."
_H3_DRAWS = _H3 + "before_denoise:"
_H3_ENCODERS = _H3 + "encoders:"
_H3_GEOMETRY = _H3 + "modular_pipeline:"

MODULAR_REVIEWED: dict[str, dict[str, dict[str, tuple[str, ...]]]] = {
    # MiniMax-H3 (modular/minimax_h3.py): the draws, the encoded condition shapes, the setup
    # steps that normalize references and the canvas, the geometry functions, the pipeline's
    # properties. 0.41.0 changes only the layout steps' position ids' dtype on MPS/NPU/Neuron
    # (`maybe_adjust_dtype_for_device`) and their return annotations: no draw, no shape.
    _H3 + "modular_pipeline.MiniMaxH3ModularPipeline": {
        _H3_DRAWS + "MiniMaxH3PrepareConditionLatentsStep.__call__": {"4575794c0508": ALL},
        _H3_DRAWS + "MiniMaxH3PrepareLatentsStep.__call__": {"67926cb29b17": ALL},
        _H3_DRAWS + "MiniMaxH3PrepareLayoutStep.__call__": {
            "9aff8bae01ec": ("0.40.0",),
            "afbfea59d2c7": ("0.41.0", "0.42.0", "0.42.1"),
        },
        _H3_DRAWS + "MiniMaxH3PrepareLayoutStep.inputs": {"3611554604d5": ALL},  # num_frames
        _H3_DRAWS + "MiniMaxH3Ref2VAPrepareLayoutStep.__call__": {
            "afd3516d113d": ("0.40.0",),
            "a74f9f6b6e34": ("0.41.0", "0.42.0", "0.42.1"),
        },
        _H3_DRAWS + "MiniMaxH3Ref2VAPrepareLayoutStep.inputs": {"5cf633cf2231": ALL},
        _H3_ENCODERS + "encode_vae_condition": {"34d5d85020c1": ALL},  # its own generator
        _H3_ENCODERS + "MiniMaxH3Ref2VAReferenceEncoderStep.__call__": {"bac5a302eb81": ALL},
        _H3_ENCODERS + "MiniMaxH3KeyframeVaeEncoderStep.__call__": {"f7043dddfa4f": ALL},
        _H3 + "before_encoder:MiniMaxH3ResizeStep": {"99bd669b9866": ALL},  # whole class
        _H3 + "before_encoder:MiniMaxH3Ref2VASetupStep": {"c3603b0c01b8": ALL},  # whole class
        _H3_GEOMETRY + "resolve_canvas_size": {"cff097670c09": ALL},
        _H3_GEOMETRY + "align_num_frames": {"9ed7ebcd2dc7": ALL},
        _H3_GEOMETRY + "video_latent_num_frames": {"244c0f62090e": ALL},
        _H3_GEOMETRY + "audio_latent_num_frames": {"8be0cc25fe32": ALL},
        _H3_GEOMETRY + "MiniMaxH3ModularPipeline": {"a44655a77154": ALL},  # whole class
        # a video reference shorter than one chunk + tail: padded to whole clips, token_drop
        "diffusers.models.autoencoders.autoencoder_kl_minimax_h3:AutoencoderKLMiniMaxH3._encode": {
            "4f6a9a8b46ea": ALL
        },
        _MODULAR + "ModularPipeline.__call__": {"462057be1ebc": ALL},
        _MODULAR + "ModularPipelineBlocks.get_block_state": {"8b21857ee731": ALL},
    },
}
"""Per `ModularPipeline` class ("module.QualName") with a modular plan: every function (or
whole class) the plan relies on, {digest: releases}. `MODULAR_COMMON` is relied on too."""


_WAN = "diffusers.modular_pipelines.wan."
# Wan (modular/wan.py): the noise draw and its defaults, the batch the text encoder and input
# step settle, the resize that image-to-video runs before its VAE encoder (which takes argmax)
_WAN_TABLE: dict[str, dict[str, tuple[str, ...]]] = {
    _WAN + "before_denoise:WanPrepareLatentsStep": {"b1a3146211c7": ALL},  # whole class
    _WAN + "before_denoise:WanTextInputStep.__call__": {"a05f8ed5928f": ALL},
    _WAN + "before_denoise:WanAdditionalInputsStep.__call__": {"19c3eaa53223": ALL},
    _WAN + "encoders:WanTextEncoderStep.__call__": {"a7ae56367e71": ALL},
    _WAN + "encoders:WanTextEncoderStep.encode_prompt": {"0b7ba8707b10": ALL},
    _WAN + "encoders:WanImageResizeStep.__call__": {"d697e2388489": ALL},
    _WAN + "encoders:WanVaeEncoderStep.__call__": {"ec39cb71814e": ALL},
    _WAN + "encoders:WanFirstLastFrameVaeEncoderStep.__call__": {"92532a503f0e": ALL},
    _WAN + "modular_pipeline:WanModularPipeline": {"7fbc611a2440": ALL},
}
_WAN_CLASSES: dict[str, dict[str, tuple[str, ...]]] = {
    "WanModularPipeline": {},
    "WanImage2VideoModularPipeline": {"ee5077a9bc19": ALL},
    "Wan22ModularPipeline": {"f87636feeb69": ALL},
    "Wan22Image2VideoModularPipeline": {"9fba1e5a8028": ALL},
}
for _name, _own in _WAN_CLASSES.items():
    _table = dict(_WAN_TABLE)
    if _own:
        _table[_WAN + "modular_pipeline:" + _name] = _own
    MODULAR_REVIEWED[_WAN + "modular_pipeline." + _name] = _table

_LTX2 = "diffusers.modular_pipelines.ltx2."
# LTX-2 (modular/ltx2.py): the video and audio draws (whole classes: their declared defaults
# too), the batch, the text encoder the plan runs at, the image VAE encoder (argmax)
MODULAR_REVIEWED[_LTX2 + "modular_pipeline.LTX2ModularPipeline"] = {
    _LTX2 + "before_denoise:LTX2PrepareLatentsStep": {"5eff32d5d4e5": ALL},
    _LTX2 + "before_denoise:LTX2PrepareAudioLatentsStep": {"7e8ad8f1cf63": ALL},
    _LTX2 + "before_denoise:LTX2TextInputStep.__call__": {"69acbed6c56b": ALL},
    _LTX2 + "encoders:LTX2TextEncoderStep.__call__": {"603a66e46421": ALL},
    _LTX2 + "encoders:LTX2VaeEncoderStep.__call__": {"2a57496f7292": ALL},
    _LTX2 + "modular_pipeline:LTX2ModularPipeline": {"db9208ed8e2a": ALL},
}

_HV15 = "diffusers.modular_pipelines.hunyuan_video1_5."
# HunyuanVideo-1.5 (modular/hunyuan_video15.py): the draw and its size rule, the batch, the
# text encoder, the image-to-video VAE encoder that sizes the canvas (argmax)
MODULAR_REVIEWED[_HV15 + "modular_pipeline.HunyuanVideo15ModularPipeline"] = {
    _HV15 + "before_denoise:HunyuanVideo15PrepareLatentsStep": {"17116bac4d95": ALL},
    _HV15 + "before_denoise:HunyuanVideo15TextInputStep.__call__": {"a3c08a7cb3f7": ALL},
    _HV15 + "encoders:HunyuanVideo15TextEncoderStep.__call__": {"3006b1541eef": ALL},
    _HV15 + "encoders:HunyuanVideo15VaeEncoderStep.__call__": {"2057807d615f": ALL},
    _HV15 + "modular_pipeline:HunyuanVideo15ModularPipeline": {"bcfa4e7767f6": ALL},
}
