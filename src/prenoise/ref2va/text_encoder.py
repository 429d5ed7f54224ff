"""Text encoder: a small transformers ``T5EncoderModel`` plus an in-memory byte tokenizer.

transformers is imported when a model is built, so recipes (:class:`TextEncoderConfig`) load
without the ``ref2va`` extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from pydantic import BaseModel, ConfigDict, Field

from prenoise.ref2va.initialization import build_on_meta, materialize_

if TYPE_CHECKING:
    from transformers import T5Config, T5EncoderModel


class TextEncoderConfig(BaseModel):
    """Sizes of the T5 text encoder."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    d_model: int = Field(default=64, ge=8)
    """Width of the embeddings and of every layer's output."""
    num_layers: int = Field(default=2, ge=1)
    """Encoder layers."""
    num_heads: int = Field(default=4, ge=1)
    """Attention heads per layer."""
    d_kv: int = Field(default=16, ge=4)
    """Width of one head's keys and values."""
    d_ff: int = Field(default=128, ge=8)
    """Width of the feed-forward layer."""
    max_length: int = Field(default=64, ge=4)
    """Tokens (UTF-8 bytes + end) the prompt is padded or cut to."""


class ByteTokenizer:
    """UTF-8 byte tokenizer with T5 conventions: pad 0, eos 1, unk 2, byte b -> b + 3."""

    pad_id = 0
    eos_id = 1
    unk_id = 2
    offset = 3
    vocab_size = 256 + 3

    def __init__(self, max_length: int) -> None:
        """Tokenize to exactly ``max_length`` ids (truncate, then eos, then pad)."""
        if max_length < 2:
            raise ValueError(f"max_length must be at least 2, got {max_length}")
        self.max_length = max_length

    def encode(self, text: str) -> list[int]:
        """Ids of one text, without padding, ending in eos and at most ``max_length`` long."""
        ids = [b + self.offset for b in text.encode("utf-8")][: self.max_length - 1]
        return [*ids, self.eos_id]

    def __call__(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Batch of texts -> ``(input_ids [B, L], attention_mask [B, L])`` as int64."""
        ids = torch.full((len(texts), self.max_length), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(texts), self.max_length), dtype=torch.long)
        for i, text in enumerate(texts):
            row = self.encode(text)
            ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, : len(row)] = 1
        return ids, mask

    def decode(self, ids: list[int]) -> str:
        """Inverse of :meth:`encode` (specials dropped)."""
        data = bytes(i - self.offset for i in ids if i >= self.offset)
        return data.decode("utf-8", errors="replace")


def t5_config(cfg: TextEncoderConfig) -> T5Config:
    """The ``T5Config`` of a :class:`TextEncoderConfig` (no download, dropout off)."""
    from transformers import T5Config

    return T5Config(
        vocab_size=ByteTokenizer.vocab_size,
        d_model=cfg.d_model,
        d_kv=cfg.d_kv,
        d_ff=cfg.d_ff,
        num_layers=cfg.num_layers,
        num_heads=cfg.num_heads,
        feed_forward_proj="gated-gelu",
        dropout_rate=0.0,
        pad_token_id=ByteTokenizer.pad_id,
        eos_token_id=ByteTokenizer.eos_id,
    )


def _t5_rule(name: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor | None:
    """Embeddings ~ N(0, 1); relative attention bias ~ N(0, 0.1); others default."""
    if name.endswith("relative_attention_bias.weight"):
        return torch.randn(shape, generator=gen) * 0.1
    if name == "shared.weight":
        return torch.randn(shape, generator=gen)
    return None


class TextEncoder(torch.nn.Module):
    """Prompts -> padded embeddings ``[B, max_length, d_model]``."""

    def __init__(self, config: TextEncoderConfig, model: T5EncoderModel) -> None:
        """Wrap an already materialised T5 encoder; use :meth:`build` to create one."""
        super().__init__()
        self.config = config
        self.tokenizer = ByteTokenizer(config.max_length)
        self.t5 = model

    @classmethod
    def build(
        cls, config: TextEncoderConfig, seed: int = 0, device: torch.device | str = "cpu"
    ) -> TextEncoder:
        """Build with deterministic weights from ``seed`` (the global RNG is untouched)."""
        from transformers import T5EncoderModel

        model = build_on_meta(lambda: T5EncoderModel(t5_config(config)))
        materialize_(model, seed, device, rule=_t5_rule)
        if model.encoder.embed_tokens is not model.shared:
            model.encoder.embed_tokens = model.shared
        return cls(config, model).eval()

    @property
    def device(self) -> torch.device:
        """Device of the weights."""
        return self.t5.shared.weight.device

    @property
    def dim(self) -> int:
        """Embedding width ``d_model``."""
        return self.config.d_model

    @torch.inference_mode()
    def encode_with_mask(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(embeddings [B, L, d] float32, mask [B, L] bool)``; padded positions are zero."""
        ids, mask = self.tokenizer(prompts)
        ids, mask = ids.to(self.device), mask.to(self.device)
        out = self.t5(input_ids=ids, attention_mask=mask).last_hidden_state
        keep = mask.bool()
        return out * keep.unsqueeze(-1).to(out.dtype), keep

    def encode(self, prompts: list[str]) -> torch.Tensor:
        """Prompts -> embeddings ``[B, max_length, d_model]`` (padded positions zero)."""
        return self.encode_with_mask(prompts)[0]
