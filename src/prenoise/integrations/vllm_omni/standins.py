"""Tiny stand-in components for driving the REAL upstream `MiniMaxH3Pipeline` without weights.

Only the model components are stand-ins (tokenizer, Qwen processor, text encoder, the video VAE's
checkpoint model behind upstream's own `MiniMaxH3VideoVAE` adapter, the audio VAE, the DiT); the
pipeline code that runs (`forward`, `_prepare_local_conditioning`, `prepare_encoder_inputs`,
`encode_media`, `diffuse`, `_build_denoise_inputs`, the denoise loop) is upstream's. Every
stand-in is deterministic and never touches the global RNG.

The video VAE's checkpoint model follows the Ref2VA contract (`docs/background/ref2va-contract.md`):
frames padded to the next `17k + 5`, latent length `((F - 5) // 17) · 5 + 2`, 16x spatial
compression with canvases aligned to 32 — through the processor methods upstream's adapter calls
(`align_video_length`, `_align_to_total_patch_size`, `get_latent_length`).
"""

from __future__ import annotations

import subprocess
import wave
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from PIL import Image

__all__ = [
    "StandInHooks",
    "build_pipeline",
    "synthetic_audio",
    "synthetic_image",
    "synthetic_video",
]

LATENT_CHANNELS = 24
TEXT_HIDDEN = 5120
VAE_RATIO = 16
CLIP_LENGTH = 17


@dataclass
class StandInHooks:
    """Test hooks: failures to inject and observations of the components."""

    fail_text_encoder: BaseException | None = None
    fail_media_encoder: BaseException | None = None
    video_latent_t_offset: int = 0
    """Added to every encoded reference video's latent length (a shape the prediction misses)."""
    on_text_encode: Callable[[], None] | None = None
    """Called when the text encoder starts (lets a test hold the request in encoding)."""
    on_transformer_call: Callable[[int], None] | None = None
    transformer_calls: int = 0


# -- processor + tokenizer --------------------------------------------------------------------


class _Tokenizer:
    """Bytes as token ids; special tokens get fixed ids above the byte range."""

    def __init__(self) -> None:
        self._special: dict[str, int] = {}

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [b + 1 for b in text.encode("utf-8")]}

    def convert_tokens_to_ids(self, token: str) -> int:
        return self._special.setdefault(token, 1000 + len(self._special))


class _ImageProcessor:
    merge_size = 2
    patch = 32  # pixels per merged Qwen token (stand-in)

    def __call__(self, images: Sequence[Image.Image], return_tensors: str = "pt") -> dict[str, Any]:
        grids = [(1, 2 * max(1, im.height // 256), 2 * max(1, im.width // 256)) for im in images]
        pixels = torch.stack(
            [torch.from_numpy(np.asarray(im.resize((8, 8)), dtype=np.float32)) for im in images]
        )
        return {"pixel_values": pixels, "image_grid_thw": torch.tensor(grids, dtype=torch.long)}


class _VideoProcessor:
    def __call__(
        self,
        videos: Sequence[np.ndarray],
        do_sample_frames: bool = False,
        return_tensors: str = "pt",
    ) -> dict[str, Any]:
        grids = [(-(-len(v) // 2), 2, 2) for v in videos]  # Qwen temporal patch 2
        pixels = torch.stack([torch.from_numpy(v[:1, :8, :8].astype(np.float32)) for v in videos])
        return {"pixel_values_videos": pixels, "video_grid_thw": torch.tensor(grids)}


# -- text encoder -------------------------------------------------------------------------------


class _TextEncoder(torch.nn.Module):
    def __init__(self, hooks: StandInHooks) -> None:
        super().__init__()
        self.hooks = hooks
        self.anchor = torch.nn.Parameter(torch.zeros(1), requires_grad=False)

    def load_to_device(self) -> None:
        pass

    def offload_to_cpu(self) -> None:
        pass

    def encode_ids(self, input_ids: torch.Tensor, **vision: torch.Tensor) -> torch.Tensor:
        if self.hooks.on_text_encode is not None:
            self.hooks.on_text_encode()
        if self.hooks.fail_text_encoder is not None:
            raise self.hooks.fail_text_encoder
        ids = input_ids.reshape(-1).to(torch.float32)
        columns = torch.arange(TEXT_HIDDEN, dtype=torch.float32)
        return torch.sin(ids[:, None] * 0.01 + columns[None, :] * 0.001).to(torch.bfloat16)


# -- video VAE: the checkpoint model behind upstream's MiniMaxH3VideoVAE adapter ---------------


def _aligned_17k5(frames: int) -> int:
    return max(5, frames + (-(frames - 5)) % CLIP_LENGTH)


class _VideoProcessorContract:
    """The checkpoint processor's alignment methods, per the Ref2VA contract."""

    frame_overlap = 4
    isolated_last_frame = True
    transform = SimpleNamespace(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))

    def align_video_length(
        self, num_frames: int, mode: str = "pad", granularity: str = "chunk"
    ) -> int:
        return _aligned_17k5(num_frames) - num_frames

    def get_latent_length(self, num_frames: int) -> int:
        frames = _aligned_17k5(num_frames)
        return 2 if frames <= 5 else ((frames - 5) // CLIP_LENGTH) * 5 + 2

    def _align_to_total_patch_size(self, height: int, width: int) -> tuple[int, int]:
        return -(-height // 32) * 32, -(-width // 32) * 32


class _VideoVAEModel(torch.nn.Module):
    """Deterministic 'encoder': 16x16 average pooling, then a fixed 3 -> 24 channel map."""

    vae_ratio = VAE_RATIO
    clip_length = CLIP_LENGTH
    isolated_first_frame = False
    frame_pre_padding = 0
    parallel_tiling = False

    def __init__(self, hooks: StandInHooks) -> None:
        super().__init__()
        self.hooks = hooks
        self.processor = _VideoProcessorContract()
        mix = torch.linspace(-1.0, 1.0, LATENT_CHANNELS * 3).reshape(LATENT_CHANNELS, 3)
        self.channel_map = torch.nn.Parameter(mix, requires_grad=False)

    def split_tiles(self, size: int, decode: bool) -> tuple[list[int], None, None]:
        return [0], None, None

    def _latent(self, pixels: torch.Tensor, latent_t: int) -> torch.Tensor:
        # pixels: (3, T, H, W) float32 in [-1, 1]
        height, width = self.processor._align_to_total_patch_size(
            int(pixels.shape[-2]), int(pixels.shape[-1])
        )
        pixels = torch.nn.functional.pad(
            pixels, (0, width - pixels.shape[-1], 0, height - pixels.shape[-2])
        )
        pooled = torch.nn.functional.avg_pool2d(pixels, VAE_RATIO)  # (3, T, h, w)
        groups = torch.tensor_split(pooled, latent_t, dim=1)
        frames = torch.stack([g.mean(dim=1) for g in groups], dim=1)  # (3, t, h, w)
        return torch.einsum("kc,cthw->kthw", self.channel_map, frames)

    def encode_images(self, image: Image.Image, use_fp16_latent: bool = True) -> list[torch.Tensor]:
        if self.hooks.fail_media_encoder is not None:
            raise self.hooks.fail_media_encoder
        array = torch.from_numpy(np.asarray(image.convert("RGB"), dtype=np.float32))
        pixels = (array.permute(2, 0, 1)[:, None] / 127.5) - 1.0
        return [self._latent(pixels, 1)]

    def encode_videos(self, videos: list[Any], use_fp16_latent: bool = True) -> list[torch.Tensor]:
        if self.hooks.fail_media_encoder is not None:
            raise self.hooks.fail_media_encoder
        video = videos[0]
        if isinstance(video, np.ndarray):  # upstream's legacy path hands raw uint8 frames
            frames = torch.from_numpy(video.astype(np.float32))
            video = (frames.permute(3, 0, 1, 2) / 127.5) - 1.0
        latent_t = self.processor.get_latent_length(int(video.shape[1]))
        latent_t += self.hooks.video_latent_t_offset
        return [self._latent(video, latent_t)]


def _video_vae(hooks: StandInHooks) -> Any:
    """Upstream's own `MiniMaxH3VideoVAE` adapter around the stand-in checkpoint model."""
    from vllm_omni.diffusion.models.minimax_h3.vae import MiniMaxH3VideoVAE, _VideoVAEPartProxy

    vae = object.__new__(MiniMaxH3VideoVAE)
    torch.nn.Module.__init__(vae)
    vae.model = _VideoVAEModel(hooks)
    vae.remote = SimpleNamespace(model=vae.model)
    vae.config_dict = {
        "latent_channels": LATENT_CHANNELS,
        "latents_mean": [0.1] * LATENT_CHANNELS,
        "latents_std": [0.5] * LATENT_CHANNELS,
    }
    vae.encode_only = False
    vae.decode_only = False
    vae.parallel_size = 1
    vae.use_tiling = True
    vae.use_slicing = False
    vae.device_module = torch.get_device_module("cpu")
    vae._stager = vae._encoder_stager = vae._decoder_stager = None
    vae._tile_gather_workspace = None
    vae.encoder_component = _VideoVAEPartProxy(vae, "encoder")
    vae.decoder_component = _VideoVAEPartProxy(vae, "decoder")
    # Decode (not part of what prenoise changes): latents back to coarse pixels.
    vae.decode_latent = lambda latent: (
        latent[:, :3].repeat_interleave(VAE_RATIO, -1).repeat_interleave(VAE_RATIO, -2)
    )
    return vae


# -- audio VAE ----------------------------------------------------------------------------------


class _AudioVAE(torch.nn.Module):
    """40 latent frames per second, 32 features, stereo rows channel-major."""

    def __init__(self, hooks: StandInHooks) -> None:
        super().__init__()
        self.hooks = hooks

    def load_to_device(self) -> None:
        pass

    def offload_to_cpu(self) -> None:
        pass

    def encode_waveform(self, waveform: torch.Tensor, sample_rate: int) -> tuple[torch.Tensor, int]:
        if self.hooks.fail_media_encoder is not None:
            raise self.hooks.fail_media_encoder
        waveform = waveform.float()
        if waveform.ndim == 1:
            waveform = waveform[None]
        waveform = waveform.repeat(2, 1)[:2] if waveform.shape[0] < 2 else waveform[:2]
        audio_t = max(1, round(waveform.shape[-1] / sample_rate * 40))
        chunks = torch.tensor_split(waveform, audio_t, dim=-1)
        energy = torch.stack([c.abs().mean(dim=-1) for c in chunks], dim=-1)  # (2, audio_t)
        features = torch.linspace(0.5, 1.5, 32)
        rows = energy[:, :, None] * features[None, None, :]
        return rows.reshape(-1, 32).float(), audio_t

    def decode_latent(self, latent: torch.Tensor) -> torch.Tensor:
        return latent.float().reshape(1, 2, -1)


# -- transformer --------------------------------------------------------------------------------


class _Transformer(torch.nn.Module):
    """Returns a fixed fraction of its inputs as velocity (enough to run the real loop)."""

    def __init__(self, hooks: StandInHooks) -> None:
        super().__init__()
        self.hooks = hooks

    def forward(self, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        self.hooks.transformer_calls += 1
        if self.hooks.on_transformer_call is not None:
            self.hooks.on_transformer_call(self.hooks.transformer_calls)
        # (x[0, img_pos], audio_x[0, audio_pos]), as the real DiT returns its rows
        video = kwargs["x"][0, kwargs["img_pos_info"]["position_ids"]]
        audio = kwargs["audio_x"][0, kwargs["audio_pos_info"]["position_ids"]]
        return video * 0.5, audio * 0.5


# -- the pipeline -------------------------------------------------------------------------------


def build_pipeline(hooks: StandInHooks | None = None, task: str = "ref2va") -> Any:
    """A weightless upstream `MiniMaxH3Pipeline` wired to the stand-ins, on the CPU, serving
    `task` (its checkpoint partition: `ref2va`, or `t2va` for T2VA and FL2VA)."""
    from vllm_omni.diffusion.models.minimax_h3 import pipeline_minimax_h3 as upstream

    hooks = hooks or StandInHooks()
    pipe = object.__new__(upstream.MiniMaxH3Pipeline)
    torch.nn.Module.__init__(pipe)
    pipe.device = torch.device("cpu")
    pipe.od_config = SimpleNamespace(step_execution=False, cache_backend="none")
    pipe.partition = "ref2va" if task == "ref2va" else "t2va"
    pipe.supported_tasks = frozenset({"ref2va"} if task == "ref2va" else {"t2va", "fl2va"})
    pipe.load_text_encoder = True
    pipe.load_vae_encoder = True
    pipe.text_encoder_tp_size = 1
    pipe.text_encoder_group = upstream._SingleRankEncoderGroup(0)
    pipe.tokenizer = _Tokenizer()
    pipe.processor = SimpleNamespace(
        image_processor=_ImageProcessor(), video_processor=_VideoProcessor()
    )
    pipe.text_encoder = _TextEncoder(hooks)
    pipe.video_vae = _video_vae(hooks)
    pipe.audio_vae = _AudioVAE(hooks)
    pipe.transformer = _Transformer(hooks)
    pipe._turbo_lora_specs = {}
    pipe._native_lora_adapter_ids = set()
    pipe._lora_sigma_schedules = {}
    pipe._base_schedule_by_partition = {}
    pipe._fasth3 = None
    pipe._fasth3_checkpoint = None
    pipe.default_video_shift = 12.0
    pipe.default_audio_shift = 3.0
    pipe._quality_policy = upstream.MiniMaxH3QualityPolicy(pipe.od_config)
    pipe._cache_dit_runtime = upstream.RequestScopedCacheDiTRuntime(pipe)
    pipe._release_stage_cache = lambda: None
    pipe._component_on_device = lambda component: nullcontext()
    pipe.hooks = hooks
    return pipe


# -- synthetic references -------------------------------------------------------------------------


def synthetic_image(path: Path, width: int = 512, height: int = 384) -> Path:
    """A deterministic PNG reference (a fixed pixel pattern)."""
    pixels = (np.arange(height * width * 3, dtype=np.int64) * 7919 % 251).astype(np.uint8)
    Image.fromarray(pixels.reshape(height, width, 3)).save(path)
    return path


def synthetic_video(path: Path, width: int = 320, height: int = 256, seconds: float = 2.5) -> Path:
    """An H.264 MP4 with an AAC track (ffmpeg's test pattern and a 440 Hz tone), 24 fps."""
    subprocess.run(
        ["ffmpeg", "-loglevel", "error", "-y",
         "-f", "lavfi", "-i", f"testsrc=size={width}x{height}:rate=24:duration={seconds}",
         "-f", "lavfi", "-i", f"sine=frequency=440:duration={seconds}:sample_rate=16000",
         "-c:v", "libx264", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", str(path)],
        check=True,
    )  # fmt: skip
    return path


def synthetic_audio(
    path: Path, seconds: float = 2.5, sample_rate: int = 16000, frequency: float = 440.0
) -> Path:
    """A deterministic 16-bit PCM mono WAV reference (a sine tone); no ffmpeg needed to write it.

    Upstream still probes audio references with ffprobe, so using one needs ffmpeg installed.
    """
    count = round(seconds * sample_rate)
    tone = np.sin(2 * np.pi * frequency * np.arange(count) / sample_rate)
    samples = np.round(tone * 0.5 * np.iinfo(np.int16).max).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(sample_rate)
        out.writeframes(samples.tobytes())
    return path
