"""A tiny MiniMax-H3 modular pipeline (diffusers 0.42.1), built offline with seeded weights.

`minimax_h3()` builds a `MiniMaxH3ModularPipeline` from `MiniMaxH3Blocks()` (or one workflow of
it: `t2va`, `fl2va`, `ref2va`) with `init_pipeline()` + `update_components(...)`; every
component is built here from a small config, with no hub access. The geometry is the one of
diffusers' own fast test (`tests/modular_pipelines/minimax_h3/`), which loads its components
from a hub repository instead:

- a 32x32 canvas at the shortest admissible length, `num_frames=124` (`17 * 7 + 5`, 37 latent
  frames): the video VAE compresses /16 spatially and /4 temporally in 17-frame chunks (the
  `17 * n + 5` -> `5 * n + 2` arithmetic the blocks hard-code), and the transformer patch is
  `(1, 2, 2)`, so each latent frame of a 32x32 video (2x2 latents) is a single packed row;
- an audio VAE with a hop of 4 samples at a sample rate of 160 Hz: 40 latents per second, as the
  released 800-sample hop at 32 kHz, so a reference soundtrack built here at 160 Hz is never
  resampled (which would need torchaudio); 124 frames give 207 audio latents, 828 samples;
- a Qwen3-VL conditioner with 51 decoder layers (the blocks read `hidden_states[50]` and refuse
  a stack of 50 or fewer) of width 16, one head, and a one-layer vision tower of width 16 with
  4-pixel patches; the tokenizer is a byte-level `Qwen2Tokenizer` with no merges (every byte is
  one token) plus the four vision tokens the blocks look up.

Pipeline configs, set with `update_components` (given only the configs the selected blocks
declare; it would ignore any other with a warning): `reference_image_short_edge=64` (released:
2048, which packs thousands of conditioning rows per image reference), and
`canvas_short_edge=32` / `canvas_max_pixels=2048` (released: 768 / 768 * 1344): a request of
this module passes `height` and `width`, so the canvas rule only places *video references*,
which are put on the canvas of their own aspect ratio - at 768 pixels a video reference's VAE
encode and conditioning rows are hundreds of times larger. diffusers' upstream test
monkeypatches `MiniMaxH3Ref2VASetupStep.__init__` instead, because in its version the short
edge was a constructor argument; in 0.42.1 it is a `ConfigSpec` of the pipeline, so the
pipeline config is the supported route and no class is patched.

Processors without torchvision (not installed here): the image processor is transformers'
PIL backend (`Qwen2VLImageProcessorPil`). `Qwen3VLVideoProcessor` resizes, converts and
normalizes with torchvision, so `_VideoProcessor` replaces those three steps with torch
arithmetic (`smart_resize` + bicubic `F.interpolate`); and since `Qwen3VLProcessor` checks its
video processor against transformers' `BaseVideoProcessor`, which is a torchvision-requiring
placeholder here, `_Processor` skips that one check. Everything else is the transformers code.

Measured on this machine (2 CPU cores, torch 2.13.0 CPU, diffusers 0.42.1, transformers
5.25.0, nothing else running): importing diffusers and transformers takes 4-5 s; building the
full pipeline about 0.06 s (a workflow pipeline the same; 0.3 s seen once); one call, median of
5: `t2va` 0.06 s, `fl2va` 0.07 s (one or two keyframes), `ref2va` 0.08 s (one image
reference), 0.10 s (two image references, or a 48-frame video reference with its soundtrack),
0.09 s (an image and a 2 s audio reference). The whole test module runs in about 10 s. While
another torch process ran on the same two cores, single calls took 0.5 to 13 s (the two
processes' intra-op threads oversubscribe the cores), so time outliers are the machine's.

Randomness (checked in `test_tiny_minimax_h3.py`): a call draws from the request generator only
in `before_denoise.py` (`MiniMaxH3PrepareConditionLatentsStep`: one draw per visual condition,
then `MiniMaxH3PrepareLatentsStep`: video, then audio noise) and never from the global RNG. The
VAE encoding of a keyframe or reference *samples* its posterior, but from a private
`torch.Generator().manual_seed(42)` made for each condition (`encoders.encode_vae_condition`).
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from diffusers_tiny import _seeded

if TYPE_CHECKING:
    import PIL.Image
    from diffusers.modular_pipelines.minimax_h3 import (
        MiniMaxH3AudioReference,
        MiniMaxH3ImageReference,
        MiniMaxH3ModularPipeline,
        MiniMaxH3VideoReference,
    )

WORKFLOWS = ("t2va", "fl2va", "ref2va")
"""The workflows of `MiniMaxH3Blocks`."""

HEIGHT = WIDTH = 32
"""The canvas of a call: one `(1, 2, 2)` patch per latent frame."""
NUM_FRAMES = 124
"""The shortest admissible request: 5.17 s at 24 fps, `17 * 7 + 5` frames."""
NUM_LATENT_FRAMES = 37
"""Latent frames of `NUM_FRAMES` (`5 * 7 + 2`)."""
AUDIO_HOP_LENGTH = 4
"""Samples per audio latent of the tiny audio VAE (released: 800)."""
AUDIO_SAMPLE_RATE = 40 * AUDIO_HOP_LENGTH
"""The tiny audio VAE's sample rate: 40 latents per second, as released (32 kHz / 800)."""
NUM_AUDIO_LATENTS = 207
"""Audio latents per channel of `NUM_FRAMES` (`round(124 / 24 * 40)`)."""
NUM_AUDIO_SAMPLES = NUM_AUDIO_LATENTS * AUDIO_HOP_LENGTH
"""Samples per channel of the generated soundtrack."""
REFERENCE_IMAGE_SHORT_EDGE = 64
"""The short edge an image reference is encoded at (released: 2048)."""
CANVAS_SHORT_EDGE = 32
"""The short edge of the canvas rule, which places video references (released: 768)."""
CANVAS_MAX_PIXELS = 32 * 64
"""The area cap of the canvas rule (released: 768 * 1344)."""

TEXT_HIDDEN_SIZE = 16
"""Width of the conditioner, hence of `prompt_embeds` (released: 5120)."""
TEXT_NUM_LAYERS = 51
"""Decoder layers of the conditioner: the blocks read `hidden_states[50]`."""
VISION_PATCH_SIZE = 4
"""Pixels per vision patch side (released: 16); a vision token merges 2x2 patches."""
VAE_LATENT_CHANNELS = 4
"""Latent channels of the video VAE (released: 24)."""
AUDIO_LATENT_CHANNELS = 8
"""Latent channels of the audio VAE (released: 32)."""

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")


def tokenizer() -> Any:
    """A byte-level `Qwen2Tokenizer` without merges (one token per UTF-8 byte), built offline,
    with the four vision tokens the blocks look up as special tokens."""
    from tokenizers import AddedToken, pre_tokenizers
    from transformers import Qwen2Tokenizer

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {"<|endoftext|>": 0, **{char: i + 1 for i, char in enumerate(alphabet)}}
    tok = Qwen2Tokenizer(vocab=vocab, merges=[])
    tok.add_tokens([AddedToken(t, special=True) for t in VISION_TOKENS], special_tokens=True)
    return tok


def _video_processor_class() -> type:
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import (
        Qwen3VLVideoProcessor,
        smart_resize,
    )

    class _VideoProcessor(Qwen3VLVideoProcessor):
        """`Qwen3VLVideoProcessor` whose torchvision steps are torch arithmetic."""

        def convert_to_rgb(self, video: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            if video.shape[-3] == 1:
                return video.expand(*video.shape[:-3], 3, *video.shape[-2:])
            return video

        def resize(  # type: ignore[override]
            self,
            videos: torch.Tensor,
            size: Any,
            resample: Any,
            factor: int | None = None,
            temporal_factor: int | None = None,
            **kwargs: Any,
        ) -> torch.Tensor:
            height, width = videos.shape[-2:]
            if factor is None:  # transformers < 5.16: the target size is given
                new_height, new_width = size.height, size.width
            else:
                new_height, new_width = smart_resize(
                    num_frames=videos.shape[1],
                    height=height,
                    width=width,
                    temporal_factor=temporal_factor,
                    factor=factor,
                    min_pixels=size.shortest_edge,
                    max_pixels=size.longest_edge,
                )
            if (new_height, new_width) == (height, width):
                return videos
            flat = videos.flatten(0, -4).float()
            flat = torch.nn.functional.interpolate(
                flat, size=(new_height, new_width), mode="bicubic", antialias=True
            )
            if videos.dtype == torch.uint8:
                flat = flat.round().clamp(0, 255).to(torch.uint8)
            return flat.reshape(*videos.shape[:-2], new_height, new_width)

        def normalize(  # type: ignore[override]
            self, image: torch.Tensor, mean: Any, std: Any, inplace: bool = False, **kwargs: Any
        ) -> torch.Tensor:
            mean = torch.as_tensor(mean, dtype=image.dtype, device=image.device).view(-1, 1, 1)
            std = torch.as_tensor(std, dtype=image.dtype, device=image.device).view(-1, 1, 1)
            return (image - mean) / std

    return _VideoProcessor


def _processor_class() -> type:
    from transformers import Qwen3VLProcessor

    class _Processor(Qwen3VLProcessor):
        """`Qwen3VLProcessor` that accepts the torch-only video processor."""

        def check_argument_for_proper_class(self, argument_name: str, argument: Any) -> Any:
            if argument_name == "video_processor":
                return type(argument)
            return super().check_argument_for_proper_class(argument_name, argument)

    return _Processor


def processor(tok: Any | None = None) -> Any:
    """A `Qwen3VLProcessor` (4-pixel patches merged 2x2, temporal patch 2) around `tok`."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    image_processor = Qwen2VLImageProcessorPil(
        patch_size=VISION_PATCH_SIZE,
        merge_size=2,
        temporal_patch_size=2,
        min_pixels=16 * 16,
        max_pixels=64 * 96,
    )
    video_processor = _video_processor_class()(
        patch_size=VISION_PATCH_SIZE,
        merge_size=2,
        temporal_patch_size=2,
        size={"shortest_edge": 16 * 16, "longest_edge": 32 * 64 * 16},
        cap_pixels_per_frame=False,
    )
    tok = tokenizer() if tok is None else tok
    return _processor_class()(
        image_processor=image_processor, tokenizer=tok, video_processor=video_processor
    )


def text_encoder(tok: Any) -> Any:
    """A 51-layer, width-16 `Qwen3VLForConditionalGeneration` with a one-layer vision tower.
    Call inside `_seeded()`."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    ids = {t: tok.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    config = Qwen3VLConfig(
        text_config={
            "vocab_size": len(tok),
            "hidden_size": TEXT_HIDDEN_SIZE,
            "intermediate_size": 32,
            "num_hidden_layers": TEXT_NUM_LAYERS,
            "num_attention_heads": 1,
            "num_key_value_heads": 1,
            "head_dim": TEXT_HIDDEN_SIZE,
            "max_position_embeddings": 4096,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [4, 2, 2],
                "mrope_interleaved": True,
            },
        },
        vision_config={
            "depth": 1,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_heads": 1,
            "patch_size": VISION_PATCH_SIZE,
            "temporal_patch_size": 2,
            "spatial_merge_size": 2,
            "out_hidden_size": TEXT_HIDDEN_SIZE,
            "num_position_embeddings": 16,
            "deepstack_visual_indexes": [0],
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    return Qwen3VLForConditionalGeneration(config).eval()


def vae() -> Any:
    """`AutoencoderKLMiniMaxH3`: /16 spatial, /4 temporal in 17-frame chunks (3 latents dropped
    per chunk), a one-layer ViT decoder. Call inside `_seeded()`."""
    from diffusers import AutoencoderKLMiniMaxH3

    model: Any = AutoencoderKLMiniMaxH3(
        latent_channels=VAE_LATENT_CHANNELS,
        block_out_channels=(4, 8, 8, 8),
        layers_per_block=1,
        spatial_downsample_factors=(2, 2, 2, 2),
        temporal_downsample_factors=(1, 2, 2, 1),
        norm_num_groups=4,
        decoder_num_layers=1,
        decoder_num_attention_heads=1,
        decoder_attention_head_dim=8,
        decoder_num_register_tokens=1,
        decoder_ffn_mult=2,
        clip_length=17,
        token_drop=3,
        latents_mean=(0.0,) * VAE_LATENT_CHANNELS,
        latents_std=(1.0,) * VAE_LATENT_CHANNELS,
    )
    return model.eval()


def audio_vae() -> Any:
    """`AutoencoderKLMiniMaxH3Audio` with a hop of 4 samples at 160 Hz. Call inside `_seeded()`."""
    from diffusers import AutoencoderKLMiniMaxH3Audio

    with warnings.catch_warnings():  # diffusers builds it with the deprecated `weight_norm`
        warnings.filterwarnings(
            "ignore", "`torch.nn.utils.weight_norm` is deprecated", FutureWarning
        )
        model: Any = AutoencoderKLMiniMaxH3Audio(
            encoder_dim=2,
            encoder_rates=(2, 2),
            latent_dim=16,
            latent_channels=AUDIO_LATENT_CHANNELS,
            num_attention_heads=1,
            decoder_dim=8,
            decoder_rates=(2, 2),
            decoder_kernel_sizes=(4, 4),
            resblock_kernel_sizes=(3,),
            resblock_dilation_sizes=((1,),),
            sampling_rate=AUDIO_SAMPLE_RATE,
            latents_mean=[0.0] * AUDIO_LATENT_CHANNELS,
            latents_std=[1.0] * AUDIO_LATENT_CHANNELS,
        )
    return model.eval()


def transformer() -> Any:
    """A one-block, width-16 `MiniMaxH3Transformer3DModel`. Call inside `_seeded()`."""
    from diffusers import MiniMaxH3Transformer3DModel

    model: Any = MiniMaxH3Transformer3DModel(
        num_attention_heads=1,
        attention_head_dim=16,
        hidden_size=16,
        num_layers=1,
        num_refiner_layers=1,
        ffn_dim=32,
        in_channels=VAE_LATENT_CHANNELS,
        audio_in_channels=AUDIO_LATENT_CHANNELS,
        patch_size=(1, 2, 2),
        text_dim=TEXT_HIDDEN_SIZE,
        freq_dim=16,
        time_embed_hidden_dim=16,
        time_embed_dim=16,
        rope_freq_dim=2,
    )
    return model.eval()


def minimax_h3(workflow: str | None = None) -> MiniMaxH3ModularPipeline:
    """The tiny `MiniMaxH3ModularPipeline`: of `MiniMaxH3Blocks()`, or of its `workflow`
    (`t2va`, `fl2va` or `ref2va`) when given.

    The full pipeline holds both transformer partitions (`transformer` for `t2va`/`fl2va`,
    `transformer_ref` for `ref2va`), so all three workflows run on one pipe; a workflow pipeline
    holds the components its own blocks declare, with the same weights as the full one's.
    Weights are seeded inside
    `torch.random.fork_rng()`, so building leaves the global RNG alone and two builds are
    identical.
    """
    from diffusers import MiniMaxH3Scheduler
    from diffusers.modular_pipelines import MiniMaxH3Blocks

    blocks: Any = MiniMaxH3Blocks()
    if workflow is not None:
        blocks = blocks.get_workflow(workflow)
    pipe: Any = blocks.init_pipeline()

    tok = tokenizer()
    with _seeded():
        components: dict[str, Any] = {
            "text_encoder": text_encoder(tok),
            "vae": vae(),
            "audio_vae": audio_vae(),
            "transformer": transformer(),
            "transformer_ref": transformer(),
        }
    components.update(
        tokenizer=tok,
        processor=processor(tok),
        scheduler=MiniMaxH3Scheduler(shift=12.0),
        audio_scheduler=MiniMaxH3Scheduler(shift=3.0),
    )
    configs = {
        "reference_image_short_edge": REFERENCE_IMAGE_SHORT_EDGE,
        "canvas_short_edge": CANVAS_SHORT_EDGE,
        "canvas_max_pixels": CANVAS_MAX_PIXELS,
    }
    wanted = {**components, **configs}
    declared = set(pipe._component_specs) | set(pipe._config_specs)
    pipe.update_components(**{name: value for name, value in wanted.items() if name in declared})
    return pipe


def _pixels(height: int, width: int, seed: int, num_frames: int | None = None) -> np.ndarray:
    shape = (height, width, 3) if num_frames is None else (num_frames, height, width, 3)
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


def keyframe(width: int = 80, height: int = 48, seed: int = 0) -> PIL.Image.Image:
    """A deterministic RGB keyframe for `fl2va` (`image` / `last_image`)."""
    import PIL.Image

    return PIL.Image.fromarray(_pixels(height, width, seed))


def image_reference(width: int, height: int, seed: int = 0) -> MiniMaxH3ImageReference:
    """An image reference: a deterministic `width` x `height` RGB image."""
    from diffusers.modular_pipelines.minimax_h3 import MiniMaxH3ImageReference

    return MiniMaxH3ImageReference(image=keyframe(width, height, seed))


def _waveform(num_samples: int, seed: int) -> torch.Tensor:
    generator = torch.Generator("cpu").manual_seed(seed)
    return torch.rand(2, num_samples, generator=generator) * 2 - 1


def video_reference(
    num_frames: int,
    width: int,
    height: int,
    fps: float = 24.0,
    with_audio: bool = False,
    seed: int = 0,
) -> MiniMaxH3VideoReference:
    """A video reference: deterministic `(num_frames, height, width, 3)` uint8 frames at `fps`,
    with a stereo soundtrack of the same duration at `AUDIO_SAMPLE_RATE` when `with_audio`.

    The conditioner reads it at 2 fps in pairs, so it needs at least 13 frames at 24 fps.
    """
    from diffusers.modular_pipelines.minimax_h3 import MiniMaxH3VideoReference

    frames = _pixels(height, width, seed, num_frames)
    if not with_audio:
        return MiniMaxH3VideoReference(frames=frames, fps=fps)
    num_samples = math.ceil(num_frames / fps * AUDIO_SAMPLE_RATE)
    return MiniMaxH3VideoReference(
        frames=frames,
        fps=fps,
        audio=_waveform(num_samples, seed + 1),
        sample_rate=AUDIO_SAMPLE_RATE,
    )


def audio_reference(seconds: float, seed: int = 0) -> MiniMaxH3AudioReference:
    """An audio reference: a deterministic stereo waveform of `seconds` at `AUDIO_SAMPLE_RATE`
    (pair it with an image or video reference: audio references cannot stand alone)."""
    from diffusers.modular_pipelines.minimax_h3 import MiniMaxH3AudioReference

    num_samples = round(seconds * AUDIO_SAMPLE_RATE)
    return MiniMaxH3AudioReference(
        audio=_waveform(num_samples, seed), sample_rate=AUDIO_SAMPLE_RATE
    )


def call_kwargs(workflow: str, seed: int = 0, **overrides: Any) -> dict[str, Any]:
    """Keyword arguments of one call of `workflow`: a 32x32, 124-frame request of two sigmas
    (one transformer pass), returned as tensors, from a fresh `torch.Generator` seeded `seed`.

    `fl2va` starts from an 80x48 keyframe (pass `last_image=keyframe(seed=1)` to end on one
    too); `ref2va` conditions on one 64x48 image reference. `overrides` replace or add entries.
    """
    if workflow not in WORKFLOWS:
        raise ValueError(f"unknown MiniMax-H3 workflow {workflow!r}; expected one of {WORKFLOWS}")
    kwargs: dict[str, Any] = {
        "prompt": "a robot dancing on the moon",
        "generator": torch.Generator("cpu").manual_seed(seed),
        "num_inference_steps": 2,
        "height": HEIGHT,
        "width": WIDTH,
        "num_frames": NUM_FRAMES,
        "output_type": "pt",
    }
    if workflow == "fl2va":
        kwargs["image"] = keyframe()
    elif workflow == "ref2va":
        kwargs["references"] = [image_reference(64, 48)]
    kwargs.update(overrides)
    return kwargs
