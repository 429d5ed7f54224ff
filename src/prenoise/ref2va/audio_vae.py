"""Audio VAE: stereo waveform at 16 kHz <-> latents at 40 Hz with 32 features per channel."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, field_validator
from torch import nn

from prenoise.ref2va import geometry
from prenoise.ref2va.initialization import build_on_meta, materialize_

MAX_SAMPLE_RATE = 192_000
"""The highest waveform rate a config may give (Hz): studio audio's; a larger one is a typo."""


class AudioVAEConfig(BaseModel):
    """Sizes of the audio VAE (hop = sample_rate / 40 samples per latent frame)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sample_rate: int = Field(default=16000, ge=400, le=MAX_SAMPLE_RATE)
    hidden: int = Field(default=128, ge=4)
    features: int = Field(default=geometry.AUDIO_FEATURES, ge=1)

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
        """Build with deterministic weights from ``seed`` (the global RNG is untouched)."""
        return materialize_(build_on_meta(lambda: cls(config)), seed, device)

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
