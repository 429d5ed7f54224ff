"""The reviewed diffusers code: the source digest of every function a plan relies on, per release.

`digests.py` reads these tables (how a digest is made, and the gate). `REVIEWED` is keyed
`"module:qualname"` -> {digest: the releases whose source has it}; every key was read on every
release of `RELEASES` (tests/integrations/test_diffusers_versions.py checks that each release
has exactly one reviewed digest per key, and that the installed code has one of them).

Differences reviewed between releases (none touches a draw, a generator or a shape): 0.41.0 moves
the text-encoder, image-encoder and VAE inputs of Wan, Wan I2V and Flux to
`get_module_execution_device(...)`, passes step kwargs to Wan's `cache_context`, and calls
`scheduler.set_begin_index(0)` in HunyuanVideo and Mochi; 0.42.0 adds LTX-2's `motion_speed`
(positional embeddings only; a call passing it to an older release does not bind and runs the
plain call).

Which functions a class relies on (`digests.relied_on`): its own reviewed methods and the
reviewed module-level functions of its module, `COMMON`, and its `SHARED` list (code of other
modules its draws go through: VAE encoders, video processors, mixins, the scheduler it steps
between planned draws). The modular plans' tables are in `reviewed_modular.py`.
"""

from __future__ import annotations

__all__ = ["COMMON", "RANDN_TENSOR", "RELEASES", "REVIEWED", "SHARED"]

RELEASES = ("0.40.0", "0.41.0", "0.42.0", "0.42.1")
"""The diffusers releases every digest below was reviewed on."""
ALL = RELEASES
P = "diffusers.pipelines."
M = "diffusers.models.autoencoders."
S = "diffusers.schedulers."

REVIEWED: dict[str, dict[str, tuple[str, ...]]] = {
    # AnimateDiff video-to-video ControlNet: `prepare_latents` / `encode_video` are the
    # video-to-video ones (same digests); its conditioning frames are resized after the latents
    P + "animatediff.pipeline_animatediff_video2video_controlnet:"
    "AnimateDiffVideoToVideoControlNetPipeline.__call__": {"301cf521822c": ALL},
    P + "animatediff.pipeline_animatediff_video2video_controlnet:"
    "AnimateDiffVideoToVideoControlNetPipeline.prepare_latents": {"467bc086ea4c": ALL},
    P + "animatediff.pipeline_animatediff_video2video_controlnet:"
    "AnimateDiffVideoToVideoControlNetPipeline.encode_video": {"77ea5e322dce": ALL},
    P + "animatediff.pipeline_animatediff_video2video_controlnet:retrieve_latents": {
        "07a30101d3ee": ALL
    },
    # AnimateDiff SparseCtrl: the text-to-video noise; `prepare_image` samples the VAE posterior
    # on the global RNG (`retrieve_latents` without a generator), not the caller's generator
    P + "animatediff.pipeline_animatediff_sparsectrl:"
    "AnimateDiffSparseControlNetPipeline.__call__": {"2a821a3791e4": ALL},
    P + "animatediff.pipeline_animatediff_sparsectrl:"
    "AnimateDiffSparseControlNetPipeline.prepare_latents": {"6a4981c4645e": ALL},
    P + "animatediff.pipeline_animatediff_sparsectrl:"
    "AnimateDiffSparseControlNetPipeline.encode_prompt": {"021c623184ca": ALL},  # the dtype
    P + "animatediff.pipeline_animatediff_sparsectrl:"
    "AnimateDiffSparseControlNetPipeline.prepare_image": {"a2e0239409ea": ALL},
    P + "animatediff.pipeline_animatediff_sparsectrl:retrieve_latents": {"07a30101d3ee": ALL},
    # conditioning / video-input LTX, LTX-2 and CogVideoX (pipelines/cogvideox_video.py and
    # ltx_condition.py); LTX-2's 0.42.0 `__call__` change is `motion_speed` (positions only)
    P + "cogvideo.pipeline_cogvideox_video2video:CogVideoXVideoToVideoPipeline.__call__": {
        "45514b4e3270": ALL
    },
    P + "cogvideo.pipeline_cogvideox_video2video:CogVideoXVideoToVideoPipeline.prepare_latents": {
        "640535d9c86c": ALL
    },
    P + "cogvideo.pipeline_cogvideox_video2video:retrieve_latents": {"07a30101d3ee": ALL},
    "diffusers.video_processor:VideoProcessor.preprocess_video": {"73404bd38a18": ALL},  # frames
    M + "autoencoder_kl_cogvideox:AutoencoderKLCogVideoX.encode": {"403635a3277b": ALL},
    M + "autoencoder_kl_cogvideox:AutoencoderKLCogVideoX._encode": {"9c20c0ee2261": ALL},
    P + "cogvideo.pipeline_cogvideox_fun_control:CogVideoXFunControlPipeline.__call__": {
        "4e48602daf37": ALL
    },
    P + "cogvideo.pipeline_cogvideox_fun_control:CogVideoXFunControlPipeline.prepare_latents": {
        "91796bc04e4b": ALL
    },
    P + "cogvideo.pipeline_cogvideox_fun_control:CogVideoXFunControlPipeline"
    ".prepare_control_latents": {"9e20c0ffb4c9": ALL},  # mode(): no draw
    P + "ltx2.pipeline_ltx2_image2video:LTX2ImageToVideoPipeline.__call__": {
        "1b5e8fd084f2": ("0.40.0", "0.41.0"),
        "85b35d3a4092": ("0.42.0", "0.42.1"),
    },
    P + "ltx2.pipeline_ltx2_image2video:LTX2ImageToVideoPipeline.prepare_latents": {
        "e87c565b7173": ALL
    },
    P + "ltx2.pipeline_ltx2_image2video:LTX2ImageToVideoPipeline.prepare_audio_latents": {
        "9e63f4b302ef": ALL
    },
    P + "ltx2.pipeline_ltx2_image2video:LTX2ImageToVideoPipeline._create_noised_state": {
        "61db48afafc8": ALL
    },
    P + "ltx2.pipeline_ltx2_image2video:retrieve_latents": {"07a30101d3ee": ALL},
    P + "ltx.pipeline_ltx_condition:LTXConditionPipeline.__call__": {"dca5e4ddf65e": ALL},
    P + "ltx.pipeline_ltx_condition:LTXConditionPipeline.prepare_latents": {"26503b57164c": ALL},
    P + "ltx.pipeline_ltx_condition:LTXConditionPipeline.trim_conditioning_sequence": {
        "4e4d95000d4a": ALL
    },
    P + "ltx.pipeline_ltx_condition:LTXConditionPipeline.add_noise_to_image_conditioning_latents": {
        "f8b5a261eb63": ALL  # the per-step draws the plan stops before
    },
    P + "ltx.pipeline_ltx_condition:retrieve_latents": {"07a30101d3ee": ALL},
    M + "autoencoder_kl_ltx:AutoencoderKLLTXVideo.encode": {"403635a3277b": ALL},
    P + "ltx2.pipeline_ltx2_condition:LTX2ConditionPipeline.__call__": {
        "fd6524776e2a": ("0.40.0", "0.41.0"),
        "3e64d4aebf7e": ("0.42.0", "0.42.1"),
    },
    P + "ltx2.pipeline_ltx2_condition:LTX2ConditionPipeline.prepare_latents": {"ce3d1b78ff98": ALL},
    P + "ltx2.pipeline_ltx2_condition:LTX2ConditionPipeline.prepare_audio_latents": {
        "61ffa1ce4937": ALL
    },
    P + "ltx2.pipeline_ltx2_condition:LTX2ConditionPipeline.preprocess_conditions": {
        "4392b7069581": ALL
    },
    P + "ltx2.pipeline_ltx2_condition:LTX2ConditionPipeline.trim_conditioning_sequence": {
        "4e4d95000d4a": ALL
    },
    P + "ltx2.pipeline_ltx2_condition:LTX2ConditionPipeline._pack_latents": {"b462133fafeb": ALL},
    P + "easyanimate.pipeline_easyanimate:EasyAnimatePipeline.__call__": {"f05fce93b2ec": ALL},
    P + "easyanimate.pipeline_easyanimate:EasyAnimatePipeline.prepare_latents": {
        "78a597794606": ALL
    },
    P + "easyanimate.pipeline_easyanimate_inpaint:EasyAnimateInpaintPipeline.__call__": {
        "0320c5b8cf76": ALL
    },
    P + "easyanimate.pipeline_easyanimate_inpaint:EasyAnimateInpaintPipeline.prepare_latents": {
        "484d4af623cf": ALL  # the video posterior `.sample()` without a generator (global RNG)
    },
    P + "easyanimate.pipeline_easyanimate_inpaint:"
    "EasyAnimateInpaintPipeline.prepare_mask_latents": {
        "8ca7cafdd22b": ALL  # the raw masked-video draw, after the noise
    },
    P + "easyanimate.pipeline_easyanimate_inpaint:add_noise_to_reference_video": {
        "3b59335a5829": ALL
    },
    M + "autoencoder_kl_magvit:AutoencoderKLMagvit._encode": {"75e2cdd1ffe4": ALL},
    P + "consisid.pipeline_consisid:ConsisIDPipeline.__call__": {"47a82ee907e0": ALL},
    P + "consisid.pipeline_consisid:ConsisIDPipeline.prepare_latents": {"e5951c020fff": ALL},
    P + "consisid.pipeline_consisid:ConsisIDPipeline.encode_prompt": {"2e591bd207bc": ALL},
    P + "consisid.pipeline_consisid:ConsisIDPipeline._get_t5_prompt_embeds": {  # the dtype
        "cd3e0f4edb9d": ALL
    },
    P + "consisid.pipeline_consisid:retrieve_latents": {"07a30101d3ee": ALL},
    P + "sana_video.pipeline_sana_video:SanaVideoPipeline.__call__": {
        "10bd86170574": ("0.40.0",),  # 0.41.0: the decode's out-of-memory handling only
        "ea6d38c672bf": ("0.41.0", "0.42.0", "0.42.1"),
    },
    P + "sana_video.pipeline_sana_video:SanaVideoPipeline.__init__": {"2c38848b4ecb": ALL},
    P + "sana_video.pipeline_sana_video:SanaVideoPipeline.prepare_latents": {"0eb068b70ffe": ALL},
    P + "sana_video.pipeline_sana_video:SanaVideoPipeline.prepare_extra_step_kwargs": {
        "8604a85370d9": ALL
    },
    "diffusers.video_processor:VideoProcessor.classify_height_width_bin": {"a21a9a25d793": ALL},
    P + "sana_video.pipeline_sana_video_i2v:SanaImageToVideoPipeline.__call__": {
        "01a41f1d9cbe": ("0.40.0",),  # 0.41.0: the decode's out-of-memory handling only
        "8661f79950c9": ("0.41.0", "0.42.0", "0.42.1"),
    },
    P + "sana_video.pipeline_sana_video_i2v:SanaImageToVideoPipeline.__init__": {
        "3c104661302d": ALL
    },
    P + "sana_video.pipeline_sana_video_i2v:SanaImageToVideoPipeline.prepare_latents": {
        "ee862150fdad": ALL
    },
    P + "sana_video.pipeline_sana_video_i2v:SanaImageToVideoPipeline.prepare_extra_step_kwargs": {
        "8604a85370d9": ALL
    },
    P + "sana_video.pipeline_sana_video_i2v:retrieve_latents": {"07a30101d3ee": ALL},
    P + "hunyuan_video1_5.pipeline_hunyuan_video1_5:HunyuanVideo15Pipeline.__call__": {
        "e3deb9ecb24e": ALL
    },
    P + "hunyuan_video1_5.pipeline_hunyuan_video1_5:HunyuanVideo15Pipeline.__init__": {
        "53abaa686a78": ALL
    },
    P + "hunyuan_video1_5.pipeline_hunyuan_video1_5:HunyuanVideo15Pipeline.prepare_latents": {
        "4a5a185e3639": ALL
    },
    P + "hunyuan_video1_5.image_processor:HunyuanVideo15ImageProcessor."
    "calculate_default_height_width": {"15d2a78cabeb": ALL},
    P + "hunyuan_video1_5.image_processor:generate_crop_size_list": {"6cd6e50f7e39": ALL},
    P + "hunyuan_video1_5.image_processor:get_closest_ratio": {"3216d53cd13b": ALL},
    P + "hunyuan_video1_5.pipeline_hunyuan_video1_5_image2video:"
    "HunyuanVideo15ImageToVideoPipeline.__call__": {"ddec15174c11": ALL},
    P + "hunyuan_video1_5.pipeline_hunyuan_video1_5_image2video:"
    "HunyuanVideo15ImageToVideoPipeline.__init__": {"8d334cf94318": ALL},
    P + "hunyuan_video1_5.pipeline_hunyuan_video1_5_image2video:"
    "HunyuanVideo15ImageToVideoPipeline.prepare_latents": {"4a5a185e3639": ALL},
    P + "hunyuan_video1_5.pipeline_hunyuan_video1_5_image2video:"
    "HunyuanVideo15ImageToVideoPipeline.prepare_cond_latents_and_mask": {"6c65a0570e0f": ALL},
    P + "hunyuan_video1_5.pipeline_hunyuan_video1_5_image2video:"
    "HunyuanVideo15ImageToVideoPipeline._get_image_latents": {"6ca4c7282a4a": ALL},
    P + "hunyuan_video1_5.pipeline_hunyuan_video1_5_image2video:retrieve_latents": {
        "07a30101d3ee": ALL
    },
    # Wan variants and SkyReels-V2: every VAE encode is `retrieve_latents(..., "argmax")` (no
    # draw); 0.41.0 changes only devices / dtype casts (DF image-to-video's decode cast, DF
    # video-to-video's VAE-dtype input and output concat, Animate's print -> logger.warning)
    P + "wan.pipeline_wan_video2video:WanVideoToVideoPipeline.__call__": {"c2ff44859af0": ALL},
    P + "wan.pipeline_wan_video2video:WanVideoToVideoPipeline.prepare_latents": {
        "2022db1ea246": ALL
    },
    P + "wan.pipeline_wan_video2video:retrieve_latents": {"07a30101d3ee": ALL},
    P + "wan.pipeline_wan_vace:WanVACEPipeline.__call__": {"1479624e3c42": ALL},
    P + "wan.pipeline_wan_vace:WanVACEPipeline.prepare_latents": {"b3e55fffe3f4": ALL},
    P + "wan.pipeline_wan_vace:WanVACEPipeline.preprocess_conditions": {"6e803a1923e2": ALL},
    P + "wan.pipeline_wan_vace:WanVACEPipeline.prepare_video_latents": {"ed2e8a4cd422": ALL},
    P + "wan.pipeline_wan_vace:WanVACEPipeline.prepare_masks": {"9effb3b5c156": ALL},
    P + "wan.pipeline_wan_vace:retrieve_latents": {"07a30101d3ee": ALL},
    P + "wan.pipeline_wan_animate:WanAnimatePipeline.__call__": {"3badb82bf6e5": ALL},
    P + "wan.pipeline_wan_animate:WanAnimatePipeline.prepare_latents": {"6c2619299982": ALL},
    P + "wan.pipeline_wan_animate:WanAnimatePipeline.prepare_reference_image_latents": {
        "149436ce8828": ALL
    },
    P + "wan.pipeline_wan_animate:WanAnimatePipeline.prepare_prev_segment_cond_latents": {
        "f8db07e34377": ("0.40.0",),
        "6b770e307d14": ("0.41.0", "0.42.0", "0.42.1"),
    },
    P + "wan.pipeline_wan_animate:WanAnimatePipeline.prepare_pose_latents": {"8f54241a5aac": ALL},
    P + "wan.pipeline_wan_animate:retrieve_latents": {"07a30101d3ee": ALL},
    P + "skyreels_v2.pipeline_skyreels_v2:SkyReelsV2Pipeline.__call__": {"6aa31f18c53a": ALL},
    P + "skyreels_v2.pipeline_skyreels_v2:SkyReelsV2Pipeline.prepare_latents": {
        "b3e55fffe3f4": ALL
    },
    P + "skyreels_v2.pipeline_skyreels_v2_i2v:SkyReelsV2ImageToVideoPipeline.__call__": {
        "a32842b14d5a": ALL
    },
    P + "skyreels_v2.pipeline_skyreels_v2_i2v:SkyReelsV2ImageToVideoPipeline.prepare_latents": {
        "27a4b62039a0": ALL
    },
    P + "skyreels_v2.pipeline_skyreels_v2_i2v:retrieve_latents": {"07a30101d3ee": ALL},
    P + "skyreels_v2.pipeline_skyreels_v2_diffusion_forcing:"
    "SkyReelsV2DiffusionForcingPipeline.__call__": {"3067af3dbaa8": ALL},
    P + "skyreels_v2.pipeline_skyreels_v2_diffusion_forcing:"
    "SkyReelsV2DiffusionForcingPipeline.prepare_latents": {"c698b549e2b8": ALL},
    P + "skyreels_v2.pipeline_skyreels_v2_diffusion_forcing_i2v:"
    "SkyReelsV2DiffusionForcingImageToVideoPipeline.__call__": {
        "f44553656954": ("0.40.0",),
        "e9a5ea629722": ("0.41.0", "0.42.0", "0.42.1"),
    },
    P + "skyreels_v2.pipeline_skyreels_v2_diffusion_forcing_i2v:"
    "SkyReelsV2DiffusionForcingImageToVideoPipeline.prepare_latents": {"2fdbaada6328": ALL},
    P + "skyreels_v2.pipeline_skyreels_v2_diffusion_forcing_i2v:retrieve_latents": {
        "07a30101d3ee": ALL
    },
    P + "skyreels_v2.pipeline_skyreels_v2_diffusion_forcing_v2v:"
    "SkyReelsV2DiffusionForcingVideoToVideoPipeline.__call__": {
        "6c9ed42926e4": ("0.40.0",),
        "1dce7415f525": ("0.41.0", "0.42.0", "0.42.1"),
    },
    P + "skyreels_v2.pipeline_skyreels_v2_diffusion_forcing_v2v:"
    "SkyReelsV2DiffusionForcingVideoToVideoPipeline.prepare_latents": {
        "04d8c7454598": ("0.40.0",),
        "96a2aac04279": ("0.41.0", "0.42.0", "0.42.1"),
    },
    P + "skyreels_v2.pipeline_skyreels_v2_diffusion_forcing_v2v:retrieve_latents": {
        "07a30101d3ee": ALL
    },
    M + "autoencoder_kl_wan:AutoencoderKLWan.encode": {"403635a3277b": ALL},  # no draw in it
    M + "autoencoder_kl_wan:AutoencoderKLWan._encode": {"164d120740d2": ALL},
    S + "scheduling_unipc_multistep:UniPCMultistepScheduler.step": {"c3d5d3183459": ALL},
    P + "animatediff.pipeline_animatediff:AnimateDiffPipeline.__call__": {"d0563af35996": ALL},
    P + "animatediff.pipeline_animatediff:AnimateDiffPipeline.prepare_latents": {
        "1d194729c900": ALL
    },
    P + "animatediff.pipeline_animatediff:AnimateDiffPipeline.encode_prompt": {
        "021c623184ca": ALL  # the dtype
    },
    P + "free_noise_utils:AnimateDiffFreeNoiseMixin.free_noise_enabled": {
        "fb07b226f55a": ALL  # FreeNoise falls through (AnimateDiffPipeline)
    },
    P + "free_init_utils:FreeInitMixin._apply_free_init": {
        "706feca70405": ALL  # FreeInit's draws come after each denoising loop
    },
    P + "animatediff.pipeline_animatediff_video2video:AnimateDiffVideoToVideoPipeline.__call__": {
        "806359897adc": ALL
    },
    P + "animatediff.pipeline_animatediff_video2video:"
    "AnimateDiffVideoToVideoPipeline.prepare_latents": {"467bc086ea4c": ALL},
    P + "animatediff.pipeline_animatediff_video2video:"
    "AnimateDiffVideoToVideoPipeline.encode_video": {"77ea5e322dce": ALL},
    P + "animatediff.pipeline_animatediff_video2video:retrieve_latents": {"07a30101d3ee": ALL},
    M + "autoencoder_kl:AutoencoderKL.encode": {"403635a3277b": ALL},  # one posterior per call
    P + "animatediff.pipeline_animatediff_controlnet:AnimateDiffControlNetPipeline.__call__": {
        "7c2f7030ee82": ALL
    },
    P + "animatediff.pipeline_animatediff_controlnet:"
    "AnimateDiffControlNetPipeline.prepare_latents": {"1d194729c900": ALL},
    P + "animatediff.pipeline_animatediff_controlnet:AnimateDiffControlNetPipeline.encode_prompt": {
        "021c623184ca": ALL
    },  # the dtype
    P + "animatediff.pipeline_animatediff_sdxl:AnimateDiffSDXLPipeline.__call__": {
        "deb317edeff3": ALL
    },
    P + "animatediff.pipeline_animatediff_sdxl:AnimateDiffSDXLPipeline.prepare_latents": {
        "6a4981c4645e": ALL
    },
    P + "animatediff.pipeline_animatediff_sdxl:AnimateDiffSDXLPipeline.encode_prompt": {
        # the dtype; 0.41.0 moves the token ids to `get_module_execution_device(text_encoder)`
        "332f78599f38": ("0.40.0",),
        "dba36fc38cfb": ("0.41.0", "0.42.0", "0.42.1"),
    },
    "diffusers.utils.torch_utils:randn_tensor": {"4757aa79ad39": ALL},
    # the per-step draws `step_noise.STEP_DRAWS` counts (one `randn_tensor` of the sample's shape
    # per draw, and when a step draws): the same `step` on all four releases
    S + "scheduling_dpm_cogvideox:CogVideoXDPMScheduler.step": {"53da04141e04": ALL},
    S + "scheduling_ddim:DDIMScheduler.step": {"faf5a0829892": ALL},
    S + "scheduling_euler_ancestral_discrete:EulerAncestralDiscreteScheduler.step": {
        "ea16d617266d": ALL
    },
    S + "scheduling_ddpm:DDPMScheduler.step": {"a87cc2bfd2a7": ALL},
    S + "scheduling_lcm:LCMScheduler.step": {"8d1fbac5e894": ALL},
    S + "scheduling_tcd:TCDScheduler.step": {"1e9391757ff6": ALL},
    S + "scheduling_dpmsolver_multistep:DPMSolverMultistepScheduler.step": {"1fa2927cc1c3": ALL},
    S + "scheduling_dpmsolver_singlestep:DPMSolverSinglestepScheduler.step": {"bc5b48312afc": ALL},
    S + "scheduling_flow_match_euler_discrete:FlowMatchEulerDiscreteScheduler.step": {
        "b5e9637d5d4e": ALL
    },
    S + "scheduling_flow_match_lcm:FlowMatchLCMScheduler.step": {"af2d87b5ba73": ALL},
    M + "vae:DiagonalGaussianDistribution.sample": {"9e2623826684": ALL},
    M + "autoencoder_oobleck:OobleckDiagonalGaussianDistribution.sample": {"9e2623826684": ALL},
    P + "wan.pipeline_wan:WanPipeline.__call__": {
        "f766caf86b92": ("0.40.0",),
        "9a7d92e9c84c": ("0.41.0", "0.42.0", "0.42.1"),
    },
    P + "wan.pipeline_wan:WanPipeline.prepare_latents": {"b3e55fffe3f4": ALL},
    P + "wan.pipeline_wan_i2v:WanImageToVideoPipeline.__call__": {
        "d09a4d3359de": ("0.40.0",),
        "2672b038bb0a": ("0.41.0", "0.42.0", "0.42.1"),
    },
    P + "wan.pipeline_wan_i2v:WanImageToVideoPipeline.prepare_latents": {
        # the image condition: `.to(dtype)` on 0.40.0, `.to(device, dtype)` from 0.41.0
        "67ae4b552588": ("0.40.0",),
        "c7aa1a75861b": ("0.41.0", "0.42.0", "0.42.1"),
    },
    P + "flux.pipeline_flux:FluxPipeline.__call__": {
        "bcb61c74c60c": ("0.40.0",),
        "7e0991c1ba0d": ("0.41.0", "0.42.0", "0.42.1"),
    },
    P + "flux.pipeline_flux:FluxPipeline.prepare_latents": {"a24bcef6f1ff": ALL},
    P + "allegro.pipeline_allegro:AllegroPipeline.__call__": {"b0b8ae41391e": ALL},
    P + "allegro.pipeline_allegro:AllegroPipeline.prepare_latents": {"70281ec216b9": ALL},
    P + "allegro.pipeline_allegro:AllegroPipeline.encode_prompt": {"1cc56efc1958": ALL},
    P + "mochi.pipeline_mochi:MochiPipeline.__call__": {
        "7b9f28a7295f": ("0.40.0",),
        "f048d5045d01": ("0.41.0", "0.42.0", "0.42.1"),  # + scheduler.set_begin_index(0)
    },
    P + "mochi.pipeline_mochi:MochiPipeline.prepare_latents": {"dd7f1076ba60": ALL},
    P + "latte.pipeline_latte:LattePipeline.__call__": {"251a21d3ca82": ALL},
    P + "latte.pipeline_latte:LattePipeline.prepare_latents": {"6a4981c4645e": ALL},
    P + "latte.pipeline_latte:LattePipeline.encode_prompt": {"7ea805d12a20": ALL},  # the dtype
    P + "ltx.pipeline_ltx:LTXPipeline.__call__": {"eb83a266096c": ALL},
    P + "ltx.pipeline_ltx:LTXPipeline.prepare_latents": {"3971778c5b04": ALL},
    P + "ltx.pipeline_ltx_image2video:LTXImageToVideoPipeline.__call__": {"ddbf8dac72e0": ALL},
    P + "ltx.pipeline_ltx_image2video:LTXImageToVideoPipeline.prepare_latents": {
        "c596e9556ea9": ALL
    },
    P + "ltx.pipeline_ltx_image2video:LTXImageToVideoPipeline._denormalize_latents": {
        "c08fce9e9bee": ALL  # opens the decode-noise window (raw_draws.py)
    },
    P + "ltx.pipeline_ltx_image2video:retrieve_latents": {"07a30101d3ee": ALL},
    P + "cogvideo.pipeline_cogvideox:CogVideoXPipeline.__call__": {"03672fc5b76a": ALL},
    P + "cogvideo.pipeline_cogvideox:CogVideoXPipeline.prepare_latents": {"91796bc04e4b": ALL},
    P + "cogvideo.pipeline_cogvideox_image2video:CogVideoXImageToVideoPipeline.__call__": {
        "6f4a6b4d0a69": ALL
    },
    P + "cogvideo.pipeline_cogvideox_image2video:CogVideoXImageToVideoPipeline.prepare_latents": {
        "32b975990bc3": ALL
    },
    P + "cogvideo.pipeline_cogvideox_image2video:retrieve_latents": {"07a30101d3ee": ALL},
    P + "hunyuan_video.pipeline_hunyuan_video:HunyuanVideoPipeline.__call__": {
        "bc543b4ff3d0": ("0.40.0",),
        "ced7430c0b68": ("0.41.0", "0.42.0", "0.42.1"),
    },
    P + "hunyuan_video.pipeline_hunyuan_video:HunyuanVideoPipeline.prepare_latents": {
        "4a5a185e3639": ALL
    },
    P + "stable_audio.pipeline_stable_audio:StableAudioPipeline.__call__": {"ece1c2238c3d": ALL},
    P + "stable_audio.pipeline_stable_audio:StableAudioPipeline.prepare_latents": {
        "47e488f7be60": ALL
    },
    P + "ltx2.pipeline_ltx2:LTX2Pipeline.__call__": {
        "55c52927db9a": ("0.40.0", "0.41.0"),
        "4566cab05d6a": ("0.42.0", "0.42.1"),
    },
    P + "ltx2.pipeline_ltx2:LTX2Pipeline.prepare_latents": {"ffcd5d6ad1f8": ALL},
    P + "ltx2.pipeline_ltx2:LTX2Pipeline.prepare_audio_latents": {"9e63f4b302ef": ALL},
    P + "ltx2.pipeline_ltx2:LTX2Pipeline._create_noised_state": {"61db48afafc8": ALL},
}

RANDN_TENSOR = "diffusers.utils.torch_utils:randn_tensor"
COMMON = (RANDN_TENSOR, M + "vae:DiagonalGaussianDistribution.sample")
"""What every planned class relies on: the draw itself and the VAE posterior sample."""

_FREE = (
    P + "free_noise_utils:AnimateDiffFreeNoiseMixin.free_noise_enabled",
    P + "free_init_utils:FreeInitMixin._apply_free_init",
)
_FRAMES = ("diffusers.video_processor:VideoProcessor.preprocess_video",)
_KL = (M + "autoencoder_kl:AutoencoderKL.encode",)
_COGX = (
    M + "autoencoder_kl_cogvideox:AutoencoderKLCogVideoX.encode",
    M + "autoencoder_kl_cogvideox:AutoencoderKLCogVideoX._encode",
)
_LTX_VAE = (M + "autoencoder_kl_ltx:AutoencoderKLLTXVideo.encode",)
_WAN_VAE = (
    M + "autoencoder_kl_wan:AutoencoderKLWan.encode",
    M + "autoencoder_kl_wan:AutoencoderKLWan._encode",
)
_UNIPC = (S + "scheduling_unipc_multistep:UniPCMultistepScheduler.step",)  # stepped between draws
_SANA = ("diffusers.video_processor:VideoProcessor.classify_height_width_bin",)
_HV15 = tuple(
    P + "hunyuan_video1_5.image_processor:" + name
    for name in (
        "HunyuanVideo15ImageProcessor.calculate_default_height_width",
        "generate_crop_size_list",
        "get_closest_ratio",
    )
)
_SKY = P + "skyreels_v2.pipeline_skyreels_v2"

SHARED: dict[str, tuple[str, ...]] = {
    P + "animatediff.pipeline_animatediff.AnimateDiffPipeline": _FREE,
    P + "animatediff.pipeline_animatediff_controlnet.AnimateDiffControlNetPipeline": _FREE,
    P + "animatediff.pipeline_animatediff_sdxl.AnimateDiffSDXLPipeline": _FREE,
    P + "animatediff.pipeline_animatediff_sparsectrl.AnimateDiffSparseControlNetPipeline": (
        *_FREE,
        *_KL,
    ),
    P + "animatediff.pipeline_animatediff_video2video.AnimateDiffVideoToVideoPipeline": (
        *_FREE,
        *_KL,
        *_FRAMES,
    ),
    P + "animatediff.pipeline_animatediff_video2video_controlnet."
    "AnimateDiffVideoToVideoControlNetPipeline": (*_FREE, *_KL, *_FRAMES),
    P + "cogvideo.pipeline_cogvideox_image2video.CogVideoXImageToVideoPipeline": _COGX,
    P + "cogvideo.pipeline_cogvideox_video2video.CogVideoXVideoToVideoPipeline": (*_COGX, *_FRAMES),
    P + "cogvideo.pipeline_cogvideox_fun_control.CogVideoXFunControlPipeline": (*_COGX, *_FRAMES),
    P + "consisid.pipeline_consisid.ConsisIDPipeline": _COGX,
    P + "ltx.pipeline_ltx_image2video.LTXImageToVideoPipeline": _LTX_VAE,
    P + "ltx.pipeline_ltx_condition.LTXConditionPipeline": (*_LTX_VAE, *_FRAMES),
    P + "ltx2.pipeline_ltx2_condition.LTX2ConditionPipeline": _FRAMES,
    P + "easyanimate.pipeline_easyanimate_inpaint.EasyAnimateInpaintPipeline": (
        M + "autoencoder_kl_magvit:AutoencoderKLMagvit._encode",
        *_FRAMES,
    ),
    P + "sana_video.pipeline_sana_video.SanaVideoPipeline": _SANA,
    P + "sana_video.pipeline_sana_video_i2v.SanaImageToVideoPipeline": _SANA,
    P + "hunyuan_video1_5.pipeline_hunyuan_video1_5.HunyuanVideo15Pipeline": _HV15,
    P + "hunyuan_video1_5.pipeline_hunyuan_video1_5_image2video."
    "HunyuanVideo15ImageToVideoPipeline": _HV15,
    P + "wan.pipeline_wan_i2v.WanImageToVideoPipeline": _WAN_VAE,
    P + "wan.pipeline_wan_video2video.WanVideoToVideoPipeline": (*_WAN_VAE, *_FRAMES, *_UNIPC),
    P + "wan.pipeline_wan_vace.WanVACEPipeline": (*_WAN_VAE, *_FRAMES, *_UNIPC),
    P + "wan.pipeline_wan_animate.WanAnimatePipeline": (*_WAN_VAE, *_FRAMES, *_UNIPC),
    _SKY + ".SkyReelsV2Pipeline": _UNIPC,
    _SKY + "_i2v.SkyReelsV2ImageToVideoPipeline": (*_WAN_VAE, *_UNIPC),
    _SKY + "_diffusion_forcing.SkyReelsV2DiffusionForcingPipeline": _UNIPC,
    _SKY + "_diffusion_forcing_i2v.SkyReelsV2DiffusionForcingImageToVideoPipeline": (
        *_WAN_VAE,
        *_UNIPC,
    ),
    _SKY + "_diffusion_forcing_v2v.SkyReelsV2DiffusionForcingVideoToVideoPipeline": (
        *_WAN_VAE,
        *_FRAMES,
        *_UNIPC,
    ),
    P + "stable_audio.pipeline_stable_audio.StableAudioPipeline": (
        M + "autoencoder_oobleck:OobleckDiagonalGaussianDistribution.sample",
    ),
}
"""Per planned class: the reviewed functions of other modules its draws depend on (a class
without an entry relies on `COMMON` and its own module's reviewed code only)."""
