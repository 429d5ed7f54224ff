"""The bytes a recipe's models take, counted on the meta device: nothing is allocated.

Each component is constructed exactly as `Ref2VAModels.default` constructs it, but on the meta
device, and its parameters and buffers are summed (tied tensors once). So the count follows the
model code, and a `transformer.dim: 1048576` is refused by the request budget in milliseconds
instead of allocating terabytes.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from prenoise.ref2va.audio_vae import AudioVAE
from prenoise.ref2va.config import ModelConfig
from prenoise.ref2va.initialization import build_on_meta
from prenoise.ref2va.text_encoder import t5_config
from prenoise.ref2va.transformer import JointTransformer
from prenoise.ref2va.video_vae import VideoVAE

__all__ = ["model_nbytes"]


@functools.lru_cache(maxsize=16)
def model_nbytes(config: ModelConfig) -> int:
    """Bytes of every component's parameters and buffers for `config` (weights as built)."""
    from transformers import T5EncoderModel

    components: list[nn.Module] = [
        build_on_meta(lambda: T5EncoderModel(t5_config(config.text))),
        build_on_meta(lambda: VideoVAE(config.video_vae)),
        build_on_meta(lambda: AudioVAE(config.audio_vae)),
        build_on_meta(lambda: JointTransformer(config.transformer, config.text.d_model)),
    ]
    return sum(_module_nbytes(module) for module in components)


def _module_nbytes(module: nn.Module) -> int:
    tensors: dict[int, torch.Tensor] = {}
    for tensor in (*module.parameters(), *module.buffers()):
        tensors.setdefault(id(tensor), tensor)
    return sum(t.numel() * t.element_size() for t in tensors.values())
