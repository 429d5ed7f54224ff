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
        _MODULAR + "ModularPipeline.__call__": {"462057be1ebc": ALL},
        _MODULAR + "ModularPipelineBlocks.get_block_state": {"8b21857ee731": ALL},
    },
}
"""Per `ModularPipeline` class ("module.QualName") with a modular plan: every function (or
whole class) the plan relies on, {digest: releases}. `MODULAR_COMMON` is relied on too."""
