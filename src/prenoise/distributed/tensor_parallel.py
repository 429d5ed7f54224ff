"""Megatron-style tensor parallelism for the T5 text encoder (`parallel.text_encoder_tp = k`).

The ranks form groups of `k` consecutive ranks (`[0..k-1], [k..2k-1], …`). `shard_text_encoder`
shards the replicated `TextEncoder`'s T5 in place on every rank of its group (TP rank `t`):

- self-attention: rank `t` keeps heads `[t*h/k, (t+1)*h/k)`: the rows of `q`, `k`, `v` of those
  heads (column-parallel), the matching input columns of `o` (row-parallel, followed by an
  all_reduce over the group), and the same columns of the relative-attention-bias table (the first
  layer computes the bias for its local heads; the later layers reuse it, as in T5);
- feed-forward: the rows `[t*f/k, (t+1)*f/k)` of `wi` (or `wi_0`, `wi_1`; column-parallel) and the
  same input columns of `wo` (row-parallel, followed by an all_reduce).

Embeddings and layer norms stay replicated, so every rank of a group ends with the same hidden
states after each all_reduce, and `encode_with_mask` keeps its signature. Sums are split across
ranks, so the result equals the replicated encoder only up to float rounding
(`TP_TOLERANCE`); every rank (of any group) computes bitwise the same embeddings. The weights of a
sharded encoder are `1/k` of the replicated ones, except the embedding and the norms.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from transformers import T5EncoderModel

from prenoise.ref2va.initialization import build_on_meta
from prenoise.ref2va.text_encoder import TextEncoder, t5_config

__all__ = [
    "TP_TOLERANCE",
    "RowParallelLinear",
    "TensorParallelTextEncoder",
    "shard_text_encoder",
    "tp_groups",
    "validate_text_encoder_tp",
]

TP_TOLERANCE = 1e-5
"""Max |tensor-parallel − replicated| of the text embeddings (float32; measured 1.9e-6 for TP=2)."""

_COLUMN = ("SelfAttention.q", "SelfAttention.k", "SelfAttention.v")
_FF_COLUMN = ("DenseReluDense.wi", "DenseReluDense.wi_0", "DenseReluDense.wi_1")


def validate_text_encoder_tp(tp: int, world_size: int, num_heads: int, d_ff: int) -> None:
    """Raise `ValueError` unless `tp` divides the world size, the head count and `d_ff`."""
    if tp < 1:
        raise ValueError(f"parallel.text_encoder_tp must be >= 1, got {tp}")
    if world_size % tp:
        raise ValueError(
            f"parallel.text_encoder_tp={tp} must divide the world size {world_size} "
            "(tensor-parallel groups are tp consecutive ranks)"
        )
    if num_heads % tp:
        raise ValueError(
            f"parallel.text_encoder_tp={tp} must divide the text encoder's num_heads={num_heads}"
        )
    if d_ff % tp:
        raise ValueError(
            f"parallel.text_encoder_tp={tp} must divide the text encoder's d_ff={d_ff}"
        )


def tp_groups(world_size: int, tp: int) -> list[list[int]]:
    """The tensor-parallel groups: `tp` consecutive ranks each."""
    return [list(range(start, start + tp)) for start in range(0, world_size, tp)]


class RowParallelLinear(nn.Linear):
    """A bias-free linear layer on an input-column shard, summed over `group` (all_reduce)."""

    def __init__(self, weight: torch.Tensor, group: dist.ProcessGroup | None) -> None:
        out_features, in_features = weight.shape
        super().__init__(in_features, out_features, bias=False, device="meta")
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Partial product of this rank's columns, then the sum over the group."""
        out = F.linear(x, self.weight)
        dist.all_reduce(out, group=self.group)
        return out


def _rows(linear: nn.Linear, t: int, k: int) -> None:
    n = linear.weight.shape[0] // k
    linear.weight = nn.Parameter(
        linear.weight.detach()[t * n : (t + 1) * n].clone(), requires_grad=False
    )
    linear.out_features = n


def _cols(weight: torch.Tensor, t: int, k: int) -> torch.Tensor:
    n = weight.shape[1] // k
    return weight.detach()[:, t * n : (t + 1) * n].clone()


@dataclass
class TensorParallelTextEncoder:
    """A text encoder sharded over one tensor-parallel group (see the module docstring)."""

    encoder: TextEncoder
    tp: int
    tp_rank: int
    ranks: list[int]
    group: dist.ProcessGroup | None

    def encode_with_mask(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Same as `TextEncoder.encode_with_mask` (collective over the group)."""
        return self.encoder.encode_with_mask(prompts)

    @torch.no_grad()
    def gather_replicated(self) -> TextEncoder:
        """A new replicated `TextEncoder` with the full weights (collective over the group).

        For references only (verification): it holds the whole encoder again.
        """
        full: dict[str, torch.Tensor] = {}
        for name, param in self.encoder.t5.state_dict().items():
            dim = _shard_dim(name)
            if dim is None:
                full[name] = param.detach().clone()
                continue
            parts = [torch.empty_like(param) for _ in range(self.tp)]
            dist.all_gather(parts, param.detach().contiguous(), group=self.group)
            full[name] = torch.cat(parts, dim=dim)
        config = self.encoder.config
        model = build_on_meta(lambda: T5EncoderModel(t5_config(config)))
        model.load_state_dict(full, assign=True)
        model.encoder.embed_tokens = model.shared
        model.requires_grad_(False)
        return TextEncoder(config, model).eval()


def _shard_dim(name: str) -> int | None:
    """The dimension along which a state-dict entry of a sharded T5 is split (None: replicated)."""
    stem = name.rsplit(".weight", 1)[0]
    if stem.endswith(_COLUMN) or stem.endswith(_FF_COLUMN):
        return 0
    if stem.endswith(("SelfAttention.o", "DenseReluDense.wo")):
        return 1
    if stem.endswith("SelfAttention.relative_attention_bias"):
        return 1
    return None


@torch.no_grad()
def shard_text_encoder(
    encoder: TextEncoder, tp: int, rank: int, world_size: int, timeout_s: float
) -> TensorParallelTextEncoder:
    """Shard `encoder`'s T5 in place over this rank's group of `tp` consecutive ranks.

    Collective: every rank of the job must call it (it creates every group). Raises `ValueError`
    (before any communication) when `tp` does not divide the world size, the heads or `d_ff`.
    """
    cfg = encoder.config
    validate_text_encoder_tp(tp, world_size, cfg.num_heads, cfg.d_ff)
    backend = "nccl" if encoder.device.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=timeout_s)
    group = None
    for ranks in tp_groups(world_size, tp):  # every rank creates every group, in order
        made = dist.new_group(ranks, timeout=timeout, backend=backend)
        if rank in ranks:
            group = made
    mine = tp_groups(world_size, tp)[rank // tp]
    t = rank % tp
    blocks: Any = encoder.t5.encoder.block  # T5Block modules (untyped in transformers)
    for block in blocks:
        attn = block.layer[0].SelfAttention
        for lin in (attn.q, attn.k, attn.v):
            _rows(lin, t, tp)
        attn.o = RowParallelLinear(_cols(attn.o.weight, t, tp), group)
        if attn.has_relative_attention_bias:
            bias = attn.relative_attention_bias
            bias.weight = nn.Parameter(_cols(bias.weight, t, tp), requires_grad=False)
            bias.embedding_dim = bias.weight.shape[1]
        attn.n_heads //= tp
        attn.inner_dim = attn.n_heads * attn.key_value_proj_dim
        ff = block.layer[-1].DenseReluDense
        for name in ("wi", "wi_0", "wi_1"):
            if isinstance(getattr(ff, name, None), nn.Linear):
                _rows(getattr(ff, name), t, tp)
        ff.wo = RowParallelLinear(_cols(ff.wo.weight, t, tp), group)
    return TensorParallelTextEncoder(encoder, tp, t, mine, group)
