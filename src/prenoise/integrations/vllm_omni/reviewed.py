"""The reviewed vLLM-Omni code: the source digest of every function a plugin path relies on.

`digests.py` computes the installed digests and gates each path (`PATHS`) on them; `REVIEWED` is
keyed `"module:qualname"` -> {digest: the releases whose source has it}, every key read on every
release of `RELEASES` (`scripts/vllm_omni_digests.py` prints the entries from the wheels;
`tests/vllm_omni_plugin/test_release_support.py` checks the installed code against them).

What changed between the releases, as reviewed (read in the wheels):

- 0.31.0rc1: the noise functions (`_initial_noise`, both condition-noise functions) and the
  plugin loader are byte-identical to 0.30.0. `forward` adds an optional latent upscale and a
  second *refine* denoise pass (`_refined_latents` calls `diffuse` again with the output's seed:
  its `_initial_noise` and condition noise are drawn again, serially, through the same
  functions); `_build_denoise_inputs` re-noises `init_latents` for it (no new draw);
  `_encode_visual_conditions` lets every VAE rank encode images (shapes unchanged);
  `_prepare_request_inputs` / `_prepare_encoder_conditioning_inputs` / `prepare_encode` read
  the refine settings; `diffuse` passes the sampler. Reference images keep their native size on
  the 32-px grid (`preprocessing`, not relied on: prenoise reads the prepared images' sizes).
- 0.32.0rc1: `_prepare_local_conditioning` draws a Ref2VA request's first output ahead itself
  when it has no continuation: `_initial_noise` and `minimax_h3_imgvid_cond_noise_rows` on a
  one-thread `ThreadPoolExecutor` (`minimax_h3_initial_noise`) while the prompt and the media
  encode, stores them in the request context (after checking its predicted condition shapes,
  `_predict_visual_condition_shapes` / `MiniMaxH3VideoVAE.predict_video_latent_shape`, against
  the encoded ones: a mismatch raises); `diffuse` / `prepare_encode` pop them into
  `_build_denoise_inputs`, which then skips `_initial_noise` and passes the rows to the
  condition function as `precomputed_noise_rows`. Timeline-guided requests
  (`prepare_encoder_inputs` reads `minimax_h3_timeline_guides`) get only their target noise drawn
  ahead; their conditions use the `guided` recipe: `(rows, 96)` drawn per condition, each from
  a generator seeded with the output seed, mixed with Python-float coefficients. The visual mix
  runs on the output device when that is an NPU, with CPU float32 coefficients. `forward`
  returns latents when the stage has no VAE decoder. The audio-condition function's `guided`
  flag changes only its mix; at upstream's `noise_aug` of 1.0 (every release) it draws nothing.
  Wan2.2's `forward` runs per *stage role* (`self.stage_role`, `DiffusionStageRole`): FULL, the
  default, is the whole request as before; disaggregated DENOISE / DENOISE_DECODE stages take
  their prompt embeddings (and a TI2V image condition) from an ENCODE stage. Its height, width
  and num_frames come from `conditioning.effective_wan_dimensions` (0.31.0rc1's arithmetic, moved
  there unchanged), images from `_request_image`; before `prepare_latents` nothing else changed
  for a FULL T2V request (`_validate_generation_batch` only validates; `encode_prompt`'s change
  maps a None negative prompt to "", its rows unchanged), and `prepare_latents` is unchanged.
"""

from __future__ import annotations

__all__ = [
    "ABSENT",
    "DRAW_SITES",
    "H3_AHEAD",
    "H3_STREAMS",
    "PATHS",
    "RELEASES",
    "REVIEWED",
    "UPSTREAM_PREPARES_REF2VA",
    "WAN_AHEAD",
    "WAN_STAGED_FORWARD",
]

RELEASES = ("0.30.0", "0.31.0rc1", "0.32.0rc1")
"""The vllm-omni releases every digest below was reviewed on."""
ABSENT = "absent"
"""The digest recorded for a release whose module does not define the function."""

_V30 = ("0.30.0",)
_V31 = ("0.31.0rc1",)
_V32 = ("0.32.0rc1",)
_V30_31 = ("0.30.0", "0.31.0rc1")
_V31_32 = ("0.31.0rc1", "0.32.0rc1")
_ALL = RELEASES

_H3 = "vllm_omni.diffusion.models.minimax_h3."
_PIPE = _H3 + "pipeline_minimax_h3:"
_CLS = _PIPE + "MiniMaxH3Pipeline."
_NOISE = _H3 + "condition_noise:"
_VAE = _H3 + "vae:"
_ENC = "vllm_omni.model_executor.models.minimax_h3.encoder_processing:"
_WAN = "vllm_omni.diffusion.models.wan2_2.pipeline_wan2_2:Wan22Pipeline."
_WAN_DIMENSIONS = "vllm_omni.diffusion.models.wan2_2.conditioning:effective_wan_dimensions"
_STAGE_ROLE = "vllm_omni.config.stage_config:DiffusionStageRole"

REVIEWED: dict[str, dict[str, tuple[str, ...]]] = {
    # -- MiniMax-H3: the draws and the functions that call them --------------------------------
    _CLS + "_initial_noise": {"7adbcb05d717": _ALL},
    _NOISE + "minimax_h3_imgvid_cond_noise_aug_rows": {
        "795ceb99e5fa": _V30_31,
        "6aca046d39e9": _V32,
    },
    _NOISE + "minimax_h3_audio_cond_noise_aug_rows": {
        "ffcc7630ed95": _V30_31,
        "eb711aed5822": _V32,
    },
    _NOISE + "minimax_h3_imgvid_cond_noise_rows": {ABSENT: _V30_31, "e3e5bcabf2f0": _V32},
    _NOISE + "_draw_imgvid_condition_noise_rows": {ABSENT: _V30_31, "b8b29fa121a6": _V32},
    _CLS + "_build_denoise_inputs": {
        "d5e8631a7180": _V30,
        "e15ff166aa94": _V31,
        "1349eb575e6a": _V32,
    },
    _CLS + "diffuse": {"b0f29836296c": _V30, "6a76921376d4": _V31, "207408ca113c": _V32},
    _CLS + "_prepare_local_conditioning": {"efddb02a8bf1": _V30_31, "559d1613b174": _V32},
    _CLS + "forward": {"0b60deb43051": _V30, "612c38905cef": _V31, "912f56f1497b": _V32},
    _CLS + "prepare_encode": {"eff19c564b91": _V30, "d47b9d02c993": _V31, "c93f1231e10c": _V32},
    # -- MiniMax-H3: what the prepared-ahead path reasons about ----------------------------------
    _CLS + "encode_prompt": {"40223f2bb10b": _ALL},
    _CLS + "_prepare_request_inputs": {
        "100b4919ec4c": _V30,
        "b1fc1ba8a2d8": _V31,
        "b4c3a0509c72": _V32,
    },
    _CLS + "_prepare_encoder_conditioning_inputs": {
        "c2e4c7cd3f70": _V30,
        "c0d899905387": _V31,
        "ac6d526af756": _V32,
    },
    _CLS + "_denoise_kwargs": {"c580c53cacd2": _V30, "525a18f18450": _V31_32},
    _CLS + "_encode_local_media": {"eae162f28b80": _ALL},
    _CLS + "_encode_visual_conditions": {"4a2400c9b211": _V30, "dafc271ec75f": _V31_32},
    _CLS + "_predict_visual_condition_shapes": {ABSENT: _V30_31, "425bce23e197": _V32},
    _PIPE + "_minimax_h3_output_seeds": {"4b06d20de2f9": _ALL},
    _PIPE + "_resolve_minimax_h3_num_outputs": {"22ad29b923ef": _ALL},
    _PIPE + "_dit_rank_world": {"447ae52f2227": _ALL},
    _ENC + "prepare_encoder_inputs": {"3b69c874468f": _V30_31, "9ae3a958e46b": _V32},
    _ENC + "encode_media": {"bb9eb4538b20": _V30_31, "6ee0239e71a5": _V32},
    _H3 + "continuation:resolve_continuation": {"207be1e7297b": _ALL},
    _H3 + "continuation:plan_continuation_windows": {"d7158e7e28ae": _ALL},
    _H3 + "continuation:diffuse_continuation": {"b6aaa7a6b54a": _ALL},
    _H3 + "continuation:_video_t": {"573945a2416d": _ALL},
    _H3 + "continuation:_audio_t": {"9e917fc87c54": _ALL},
    _H3 + "continuation:ContinuationWindow": {"051687ce9f01": _ALL},
    _H3 + "packed_tokens:minimax_h3_patchify_video_latent": {"45147f3282aa": _ALL},
    _VAE + "MiniMaxH3VideoVAE._stream_prepare_video_tensor": {
        "567e87191b6a": _V30_31,
        "18c19459639c": _V32,
    },
    _VAE + "MiniMaxH3VideoVAE._stream_video_prep_metadata": {
        ABSENT: _V30_31,
        "dc80bf4a34d9": _V32,
    },
    _VAE + "MiniMaxH3VideoVAE.predict_video_latent_shape": {ABSENT: _V30_31, "b3649a0cf381": _V32},
    _VAE + "_legacy_encode_prep_enabled": {"bc9e0baf2da5": _ALL},
    # -- Wan2.2 T2V: the initial latents prepared ahead (`wan_ahead`) ----------------------------
    # 0.32.0rc1's forward (`WAN_STAGED_FORWARD`): predicted on the FULL stage role only
    _WAN + "forward": {"276b1bc2ee9a": _V30_31, "baf08a9519de": _V32},
    _WAN + "prepare_latents": {"e12648661a11": _ALL},
    _WAN + "encode_prompt": {"6fa5031bc02d": _V30_31, "8b96ea049f15": _V32},
    _WAN + "_request_image": {ABSENT: _V30_31, "ba3bc67425c2": _V32},
    _WAN_DIMENSIONS: {ABSENT: _V30_31, "73e48d424ebe": _V32},
    _STAGE_ROLE: {ABSENT: _V30_31, "f5c68a241b17": _V32},
}

H3_STREAMS: tuple[str, ...] = (
    _CLS + "_initial_noise",
    _NOISE + "minimax_h3_imgvid_cond_noise_aug_rows",
    _NOISE + "minimax_h3_audio_cond_noise_aug_rows",
    _NOISE + "minimax_h3_imgvid_cond_noise_rows",
    _NOISE + "_draw_imgvid_condition_noise_rows",
    _CLS + "_build_denoise_inputs",
    _CLS + "diffuse",
    _CLS + "_prepare_local_conditioning",
    _CLS + "forward",
    _CLS + "prepare_encode",
)
"""MiniMax-H3's noise in a named stream: every function that draws, and every caller of one (a
changed caller could draw somewhere prenoise does not wrap)."""

H3_AHEAD: tuple[str, ...] = (
    *H3_STREAMS,
    _CLS + "encode_prompt",
    _CLS + "_prepare_request_inputs",
    _CLS + "_prepare_encoder_conditioning_inputs",
    _CLS + "_denoise_kwargs",
    _CLS + "_encode_local_media",
    _CLS + "_encode_visual_conditions",
    _CLS + "_predict_visual_condition_shapes",
    _PIPE + "_minimax_h3_output_seeds",
    _PIPE + "_resolve_minimax_h3_num_outputs",
    _PIPE + "_dit_rank_world",
    _ENC + "prepare_encoder_inputs",
    _ENC + "encode_media",
    _H3 + "continuation:resolve_continuation",
    _H3 + "continuation:plan_continuation_windows",
    _H3 + "continuation:diffuse_continuation",
    _H3 + "continuation:_video_t",
    _H3 + "continuation:_audio_t",
    _H3 + "continuation:ContinuationWindow",
    _H3 + "packed_tokens:minimax_h3_patchify_video_latent",
    _VAE + "MiniMaxH3VideoVAE._stream_prepare_video_tensor",
    _VAE + "MiniMaxH3VideoVAE._stream_video_prep_metadata",
    _VAE + "MiniMaxH3VideoVAE.predict_video_latent_shape",
    _VAE + "_legacy_encode_prep_enabled",
)
"""MiniMax-H3's noise drawn ahead by prenoise: the stream path's functions, and those whose
behaviour the prediction and the hand-over reason about (the media plan, the encoded condition
shapes and their order, the output seeds, the multi-rank broadcast point, continuation windows
and what each draws)."""

WAN_AHEAD: tuple[str, ...] = (
    _WAN + "forward",
    _WAN + "prepare_latents",
    _WAN + "encode_prompt",
    _WAN + "_request_image",
    _WAN_DIMENSIONS,
    _STAGE_ROLE,
)
"""Wan2.2 T2V's initial latents drawn ahead: `wan_ahead` predicts `prepare_latents`' one draw
from what `forward` computes before it (its batch: `encode_prompt`'s rows; 0.32.0rc1: the stage
role, `effective_wan_dimensions`, called, and `_request_image`'s image test)."""

WAN_STAGED_FORWARD: dict[str, str] = {"baf08a9519de": "0.32.0rc1"}
"""Digests of `Wan22Pipeline.forward` that run per stage role and take height, width and
num_frames from `effective_wan_dimensions`: `wan_ahead` predicts only on the FULL stage there,
calling that function (the pipeline module's, as forward does)."""

H3_STREAMS_PATH = "MiniMax-H3 noise streams"
H3_AHEAD_PATH = "MiniMax-H3 noise prepared ahead"
WAN_AHEAD_PATH = "Wan2.2 T2V latents prepared ahead"
PATHS: dict[str, tuple[str, ...]] = {
    H3_STREAMS_PATH: H3_STREAMS,
    H3_AHEAD_PATH: H3_AHEAD,
    WAN_AHEAD_PATH: WAN_AHEAD,
}
"""Each path of the plugin and the functions it relies on: it runs only where every one has a
reviewed digest."""

UPSTREAM_PREPARES_REF2VA: dict[str, str] = {"559d1613b174": "0.32.0rc1"}
"""Digests of `MiniMaxH3Pipeline._prepare_local_conditioning` whose code draws a Ref2VA request's
first output ahead itself (no continuation; a timeline-guided request: its target noise only).
prenoise then never draws those (never twice)."""

SEEN_NOT_REVIEWED: dict[str, dict[str, tuple[str, ...]]] = {}
"""Digests a reviewed release has that were deliberately not reviewed for the path relying on
them (that path runs upstream's code there): what the tests expect the gate to refuse."""

_MODELS = "vllm_omni.diffusion.models."
_NONE = "e3b0c44298fc"  # the digest of no drawing function at all

DRAW_SITES: dict[str, dict[str, tuple[str, ...]]] = {
    _MODELS + "hunyuan_video.pipeline_hunyuan_video_1_5": {"9e0a98b7cd1e": _ALL},
    _MODELS + "hunyuan_video.pipeline_hunyuan_video_1_5_i2v": {"5e7f00e9c5c5": _ALL},
    _MODELS + "ltx2.ltx2_conditioning": {"a4208f09b783": _ALL},
    _MODELS + "ltx2.ltx2_denoise": {"9fc85acc0517": _ALL},
    _MODELS + "ltx2.ltx2_latents": {"565398a0c3bd": _ALL},
    _MODELS + "ltx2.ltx2_request": {_NONE: _ALL},
    _MODELS + "ltx2.ltx2_runtime": {"c1c7ff342445": _ALL},
    _MODELS + "ltx2.vae.distributed": {"08709f758df6": _ALL},
    _MODELS + "qwen_image.pipeline_qwen_image": {"d33bd5f762e0": _ALL},
    _MODELS + "qwen_image.pipeline_qwen_image_edit": {"d87069ba3301": _ALL},
    _MODELS + "qwen_image.pipeline_qwen_image_edit_plus": {"6868135c2681": _ALL},
    _MODELS + "qwen_image.pipeline_qwen_image_layered": {"3f6c92956e56": _ALL},
    _MODELS + "stable_audio.pipeline_stable_audio": {"efec44938d1b": _ALL},
    _MODELS + "wan2_2.pipeline_wan2_2": {"2fd54b3e7722": _ALL},
    _MODELS + "wan2_2.pipeline_wan2_2_i2v": {"b8812d4f4ad7": _ALL},
    _MODELS + "wan2_2.pipeline_wan2_2_s2v": {"15b82b5dac2c": _ALL},
    _MODELS + "wan2_2.pipeline_wan2_2_vace": {_NONE: _ALL},
    "vllm_omni.diffusion.worker.diffusion_model_runner": {_NONE: _ALL},
}
"""vLLM-Omni module -> {the digest of its drawing functions (`digests.draw_sites_digest`): the
releases}: the modules whose draws the named-stream hooks of the other pipelines cover
(`pipeline_targets.TARGETS`). A module whose drawing functions are not these is *uncovered*: a
named stream refuses its pipelines' requests; native runs them untouched; Wan2.2 T2V is not
prepared ahead."""
