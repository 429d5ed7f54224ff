"""Audio VAE: stereo waveform at 16 kHz <-> latents at 40 Hz with 32 features per channel."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, field_validator
from torch import nn

from prenoise.ref2va import geometry
from prenoise.ref2va.initialization import build_on_meta, default_init, materialize_

MAX_SAMPLE_RATE = 192_000
"""The highest waveform rate a config may give (Hz): studio audio's; a larger one is a typo."""


OUTPUT_INIT_SCALE = 0.05
"""How much smaller than the default init (`N(0, 1/fan_in)`) the decoder's last layer starts.

Random weights (no checkpoint, as in `make demo`) make the decoded waveform noise. At the default
init it went through `tanh` near saturation: full-scale white noise (RMS −4.6 dBFS), which AAC
then decoded to peaks of +5.8 dBFS, a clipping blast for whoever pressed play. Scaled by 0.05 the
noise plays at about −25 dBFS RMS with peaks near −10 dBFS (tests/ref2va/test_demo_media_levels.py
measures the demo MP4). Only the random initialisation changes: a checkpoint loads its own
weights, and no prepared field or denoise input depends on the audio decoder."""


def _quiet_output(name: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor | None:
    """Init rule: the default, except the decoder's last weight, scaled by `OUTPUT_INIT_SCALE`."""
    if name == "dec_out.weight":
        return default_init(name, shape, gen) * OUTPUT_INIT_SCALE
    return None


class AudioVAEConfig(BaseModel):
    """Sizes of the audio VAE (hop = sample_rate / 40 samples per latent frame)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sample_rate: int = Field(default=16000, ge=400, le=MAX_SAMPLE_RATE)
    """Waveform samples per second, a multiple of 40 (the latent rate)."""
    hidden: int = Field(default=128, ge=4)
    """Width of the encoder's and decoder's hidden layers."""
    features: int = Field(default=geometry.AUDIO_FEATURES, ge=1)
    """Latent features per channel and frame."""

    @field_validator("sample_rate")
    @classmethod
    def _whole_latent_frames(cls, sample_rate: int) -> int:
        if sample_rate % geometry.AUDIO_RATE_HZ:
            raise ValueError(f"must be a multiple of {geometry.AUDIO_RATE_HZ} Hz (the latent rate)")
        return sample_rate

    @property
    def hop(self) -> int:
        """Samples per latent frame (400 at 16 kHz)."""
        if self.sample_rate % geometry.AUDIO_RATE_HZ:
            raise ValueError(f"sample_rate {self.sample_rate} is not a multiple of 40 Hz")
        return self.sample_rate // geometry.AUDIO_RATE_HZ


class AudioVAE(nn.Module):
    """Frames of ``hop`` samples per channel -> 32 latent features (deterministic mean)."""

    def __init__(self, config: AudioVAEConfig) -> None:
        """Create the layers (use :meth:`build` for initialised weights)."""
        super().__init__()
        self.config = config
        hop, hid, feat = config.hop, config.hidden, config.features
        self.enc_in = nn.Linear(hop, hid)
        self.enc_mix = nn.Linear(hid, hid)
        self.to_latent = nn.Linear(hid, feat)
        self.from_latent = nn.Linear(feat, hid)
        self.dec_mix = nn.Linear(hid, hid)
        self.dec_out = nn.Linear(hid, hop)

    @classmethod
    def build(
        cls, config: AudioVAEConfig, seed: int = 0, device: torch.device | str = "cpu"
    ) -> AudioVAE:
        """Build with deterministic weights from ``seed`` (the global RNG is untouched); the
        decoder's output starts quiet (`OUTPUT_INIT_SCALE`)."""
        return materialize_(build_on_meta(lambda: cls(config)), seed, device, _quiet_output)

    @property
    def device(self) -> torch.device:
        """Device of the weights."""
        return self.enc_in.weight.device

    @property
    def sample_rate(self) -> int:
        """Waveform sample rate in Hz."""
        return self.config.sample_rate

    def latent_len(self, num_samples: int) -> int:
        """Latent frames of ``num_samples`` samples (rounded to the nearest frame)."""
        return round(num_samples / self.config.hop)

    @torch.no_grad()
    def encode(self, waveform: torch.Tensor, audio_t: int | None = None) -> torch.Tensor:
        """Waveform ``[2, n]`` (or mono ``[n]`` / ``[1, n]``) -> latents ``[1, 2, audio_t, 32]``.

        The waveform is zero-padded or cut to ``audio_t * hop`` samples (default: nearest).
        """
        wav = waveform.to(self.device, torch.float32)
        if wav.dim() == 1:
            wav = wav.unsqueeze(0)
        if wav.dim() != 2 or wav.shape[0] not in (1, 2):
            raise ValueError(f"waveform must be [2, n] or [n], got {tuple(waveform.shape)}")
        if wav.shape[0] == 1:
            wav = wav.expand(2, -1)
        hop = self.config.hop
        frames = self.latent_len(wav.shape[1]) if audio_t is None else audio_t
        if frames < 1:
            raise ValueError(f"audio of {wav.shape[1]} samples is shorter than one latent frame")
        need = frames * hop
        wav = F.pad(wav, (0, need - wav.shape[1])) if wav.shape[1] < need else wav[:, :need]
        x = F.silu(self.enc_in(wav.reshape(2, frames, hop)))
        x = x + F.silu(self.enc_mix(x))
        return self.to_latent(x).unsqueeze(0)

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Latents ``[1, 2, t, 32]`` (or rows ``[2t, 32]``) -> waveform ``[2, t * hop]``."""
        lat = latents_from_rows(latents) if latents.dim() == 2 else latents
        if lat.dim() != 4 or lat.shape[:2] != (1, 2):
            raise ValueError(f"latents must be [1, 2, t, F], got {tuple(latents.shape)}")
        y = F.silu(self.from_latent(lat[0].to(self.device)))
        y = y + F.silu(self.dec_mix(y))
        wav = torch.tanh(self.dec_out(y))
        return wav.reshape(2, -1)


def latents_to_rows(latents: torch.Tensor) -> torch.Tensor:
    """Latents ``[1, 2, t, F]`` -> rows ``[2t, F]``, channel-major (left rows, then right)."""
    if latents.dim() != 4 or latents.shape[:2] != (1, 2):
        raise ValueError(f"latents must be [1, 2, t, F], got {tuple(latents.shape)}")
    return latents.reshape(2 * latents.shape[2], latents.shape[3])


def latents_from_rows(rows: torch.Tensor) -> torch.Tensor:
    """Rows ``[2t, F]`` (channel-major) -> latents ``[1, 2, t, F]``."""
    if rows.dim() != 2 or rows.shape[0] % 2:
        raise ValueError(f"audio rows must be [2t, F], got {tuple(rows.shape)}")
    return rows.reshape(1, 2, rows.shape[0] // 2, rows.shape[1])
