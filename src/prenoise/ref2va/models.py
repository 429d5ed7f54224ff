"""The :class:`Ref2VAModels` bundle: text encoder, video VAE, audio VAE and transformer."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from pydantic import ValidationError
from torch import nn

from prenoise.ref2va.audio_vae import AudioVAE
from prenoise.ref2va.checkpoint import (
    CheckpointError,
    load_checkpoint,
    read_checkpoint_config,
    save_checkpoint,
)
from prenoise.ref2va.config import ModelConfig
from prenoise.ref2va.text_encoder import TextEncoder
from prenoise.ref2va.transformer import JointTransformer
from prenoise.ref2va.video_vae import VideoVAE

_SEED_OFFSETS = {"text_encoder": 0, "video_vae": 1, "audio_vae": 2, "transformer": 3}


@dataclass
class Ref2VAModels:
    """All Ref2VA components built from one :class:`ModelConfig`."""

    config: ModelConfig
    text_encoder: TextEncoder
    video_vae: VideoVAE
    audio_vae: AudioVAE
    transformer: JointTransformer

    @classmethod
    def default(
        cls,
        config: ModelConfig | None = None,
        seed: int | None = None,
        device: torch.device | str = "cpu",
    ) -> Ref2VAModels:
        """Build every component with deterministic weights (seed defaults to ``init_seed``).

        The global RNG is never used.
        """
        cfg = config if config is not None else ModelConfig()
        base = cfg.init_seed if seed is None else seed
        if seed is not None and seed != cfg.init_seed:
            cfg = cfg.model_copy(update={"init_seed": seed})

        def sub(name: str) -> int:
            return base * 16 + _SEED_OFFSETS[name]

        text = TextEncoder.build(cfg.text, sub("text_encoder"), device)
        return cls(
            config=cfg,
            text_encoder=text,
            video_vae=VideoVAE.build(cfg.video_vae, sub("video_vae"), device),
            audio_vae=AudioVAE.build(cfg.audio_vae, sub("audio_vae"), device),
            transformer=JointTransformer.build(
                cfg.transformer, text.dim, sub("transformer"), device
            ),
        )

    def modules(self) -> dict[str, nn.Module]:
        """Components by checkpoint name."""
        return {
            "text_encoder": self.text_encoder,
            "video_vae": self.video_vae,
            "audio_vae": self.audio_vae,
            "transformer": self.transformer,
        }

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Save to a checkpoint directory (safetensors per component + ``config.json``)."""
        return save_checkpoint(directory, self.modules(), self.config.model_dump(mode="json"))

    @classmethod
    def from_checkpoint(
        cls,
        directory: str | os.PathLike[str],
        config: ModelConfig | None = None,
        device: torch.device | str = "cpu",
    ) -> Ref2VAModels:
        """Load a checkpoint; when ``config`` is given it must match the stored one."""
        try:
            stored = ModelConfig.model_validate(read_checkpoint_config(directory))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise CheckpointError(f"{directory}: bad config at {where!r}: {first['msg']}") from None
        expected = config.model_dump(mode="json") if config is not None else None
        models = cls.default(config if config is not None else stored, device=device)
        load_checkpoint(directory, models.modules(), expected)
        return models

    @property
    def device(self) -> torch.device:
        """Device of the transformer weights."""
        return self.transformer.device
