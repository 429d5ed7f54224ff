"""Joint video + audio flow transformer over patchified rows.

Cheap at 100k+ rows on a CPU: rows never attend to each other. Each block has a
cross-attention from rows to the short text sequence, a per-row MLP, and adaptive modulation
from the timestep plus a *pooled summary* (row means of each stream and of the visual/audio
condition rows). Row means are the only op that mixes rows, so the model splits by rows for
sequence parallelism with one small all-reduce of sums per block.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn

from prenoise.ref2va import geometry
from prenoise.ref2va.initialization import build_on_meta, materialize_

VelocityFn = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]
]
"""``(video_rows, audio_rows, sigma_video, sigma_audio) -> (video_velocity, audio_velocity)``."""


class TransformerConfig(BaseModel):
    """Sizes of the joint transformer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dim: int = Field(default=64, ge=8)
    """Width of every token (even, divisible by num_heads)."""
    num_layers: int = Field(default=2, ge=1)
    """Transformer blocks."""
    num_heads: int = Field(default=4, ge=1)
    """Attention heads per block."""
    mlp_ratio: int = Field(default=4, ge=1)
    """The feed-forward layer's width, in multiples of dim."""

    @model_validator(mode="after")
    def _heads_divide_dim(self) -> TransformerConfig:
        # checked here, with the recipe, not when the model is built after the media work
        if self.dim % self.num_heads or self.dim % 2:
            raise ValueError(f"dim {self.dim} must be even and divisible by num_heads")
        return self


def _norm(x: torch.Tensor) -> torch.Tensor:
    """Layer norm without affine parameters."""
    return F.layer_norm(x, (x.shape[-1],), eps=1e-6)


def _row_mean(x: torch.Tensor) -> torch.Tensor:
    """Mean over rows (zeros for no rows): the only cross-row op, a sum divided by a count."""
    if x.shape[0] == 0:
        return x.new_zeros(x.shape[-1])
    return x.sum(dim=0) / x.shape[0]


RowMeans = Callable[[list[torch.Tensor]], tuple[list[torch.Tensor], list[int]]]
"""Row means and row counts of several `[N_i, d]` tensors: the model's only cross-row operation.

The default, `local_row_means`, sees all rows; a sequence-parallel runner passes one that
all-reduces shard sums and counts, and the rest of the model is unchanged."""


def local_row_means(parts: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[int]]:
    """`_row_mean` of each part and its row count (every row is local)."""
    return [_row_mean(p) for p in parts], [int(p.shape[0]) for p in parts]


def timestep_features(sigma: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal features ``[dim]`` of ``1000 * sigma``."""
    half = dim // 2
    freqs = torch.exp(
        -math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=sigma.device) / half
    )
    angle = sigma.to(torch.float32).reshape(()) * 1000.0 * freqs
    return torch.cat([torch.cos(angle), torch.sin(angle)])


class JointBlock(nn.Module):
    """Cross-attention to text + per-row MLP, modulated by timestep and pooled summaries."""

    def __init__(self, config: TransformerConfig) -> None:
        """Create the block's layers."""
        super().__init__()
        d = config.dim
        self.heads = config.num_heads
        self.pool = nn.Linear(3 * d, d)
        self.mod = nn.Linear(d, 6 * d)
        self.q = nn.Linear(d, d)
        self.kv = nn.Linear(d, 2 * d)
        self.o = nn.Linear(d, d)
        self.mlp_in = nn.Linear(d, config.mlp_ratio * d)
        self.mlp_out = nn.Linear(config.mlp_ratio * d, d)

    def forward(
        self,
        streams: list[torch.Tensor],
        stream_cond: list[torch.Tensor],
        text: torch.Tensor,
        text_mask: torch.Tensor | None,
        condition: torch.Tensor,
        row_means: RowMeans = local_row_means,
    ) -> list[torch.Tensor]:
        """Update each stream ``[N_i, d]`` given its conditioning vector ``[d]``."""
        (mean_v, mean_a), _ = row_means([_norm(streams[0]), _norm(streams[1])])
        pooled = torch.cat([mean_v, mean_a, condition])
        summary = self.pool(F.silu(pooled))
        d = text.shape[-1]
        heads, head_dim = self.heads, d // self.heads
        k, v = self.kv(text).split(d, dim=-1)
        k = k.view(-1, heads, head_dim).transpose(0, 1)
        v = v.view(-1, heads, head_dim).transpose(0, 1)
        mask = None if text_mask is None else text_mask.view(1, 1, -1)
        out: list[torch.Tensor] = []
        for x, cond in zip(streams, stream_cond, strict=True):
            sh1, sc1, g1, sh2, sc2, g2 = self.mod(F.silu(cond + summary)).chunk(6)
            h = _norm(x) * (1 + sc1) + sh1
            q = self.q(h).view(-1, heads, head_dim).transpose(0, 1)
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = x + g1 * self.o(attn.transpose(0, 1).reshape(-1, d))
            h = _norm(x) * (1 + sc2) + sh2
            x = x + g2 * self.mlp_out(F.gelu(self.mlp_in(h), approximate="tanh"))
            out.append(x)
        return out


class JointTransformer(nn.Module):
    """Predicts flow velocities for video rows ``[N_v, 96]`` and audio rows ``[N_a, 32]``."""

    def __init__(self, config: TransformerConfig, text_dim: int) -> None:
        """Create the layers (use :meth:`build` for initialised weights)."""
        super().__init__()
        if config.dim % config.num_heads or config.dim % 2:
            raise ValueError(f"dim {config.dim} must be even and divisible by num_heads")
        self.config = config
        self.text_dim = text_dim
        d, vf, af = config.dim, geometry.VIDEO_ROW_FEATURES, geometry.AUDIO_FEATURES
        self.video_in = nn.Linear(vf, d)
        self.audio_in = nn.Linear(af, d)
        self.text_in = nn.Linear(text_dim, d)
        self.time_mlp_in = nn.Linear(d, d)
        self.time_mlp_out = nn.Linear(d, d)
        self.stream_embed = nn.Parameter(torch.empty(2, d))
        self.cond_video_in = nn.Linear(vf, d)
        self.cond_audio_in = nn.Linear(af, d)
        self.cond_mlp = nn.Linear(d, d)
        self.blocks = nn.ModuleList(JointBlock(config) for _ in range(config.num_layers))
        self.final_mod = nn.Linear(d, 2 * d)
        self.video_out = nn.Linear(d, vf)
        self.audio_out = nn.Linear(d, af)

    @classmethod
    def build(
        cls,
        config: TransformerConfig,
        text_dim: int,
        seed: int = 0,
        device: torch.device | str = "cpu",
    ) -> JointTransformer:
        """Build with deterministic weights from ``seed`` (the global RNG is untouched)."""
        return materialize_(build_on_meta(lambda: cls(config, text_dim)), seed, device)

    @property
    def device(self) -> torch.device:
        """Device of the weights."""
        return self.video_in.weight.device

    def _time(self, sigma: torch.Tensor | float) -> torch.Tensor:
        """Timestep embedding ``[d]`` of a sigma in [0, 1]."""
        s = torch.as_tensor(sigma, dtype=torch.float32, device=self.device)
        feats = timestep_features(s, self.config.dim)
        return self.time_mlp_out(F.silu(self.time_mlp_in(feats)))

    @torch.no_grad()
    def summarize_conditions(
        self,
        video_cond_rows: torch.Tensor | None = None,
        audio_cond_rows: torch.Tensor | None = None,
        row_means: RowMeans = local_row_means,
    ) -> torch.Tensor:
        """Pooled summary ``[d]`` of visual-condition rows ``[N_c, 96]`` and audio rows ``[M, 32]``.

        Compute it once per request and pass it to every :meth:`forward` call. Empty inputs
        (None, or no rows anywhere) add nothing.
        """
        summary = torch.zeros(self.config.dim, device=self.device)
        hidden = [
            F.silu(self.cond_mlp(F.silu(proj(rows.to(self.device, torch.float32)))))
            for rows, proj in (
                (video_cond_rows, self.cond_video_in),
                (audio_cond_rows, self.cond_audio_in),
            )
            if rows is not None
        ]
        if not hidden:
            return summary
        means, counts = row_means(hidden)
        for mean, count in zip(means, counts, strict=True):
            if count > 0:
                summary = summary + mean
        return summary

    def encode_text(self, text: torch.Tensor) -> torch.Tensor:
        """Project text embeddings ``[L, text_dim]`` (or ``[1, L, text_dim]``) to ``[L, d]``."""
        if text.dim() == 3:
            if text.shape[0] != 1:
                raise ValueError(f"one prompt at a time, got text of shape {tuple(text.shape)}")
            text = text[0]
        return self.text_in(text.to(self.device, torch.float32))

    @torch.no_grad()
    def forward(
        self,
        video_rows: torch.Tensor,
        audio_rows: torch.Tensor,
        text: torch.Tensor,
        sigma_video: torch.Tensor | float,
        sigma_audio: torch.Tensor | float,
        condition: torch.Tensor | None = None,
        text_mask: torch.Tensor | None = None,
        row_means: RowMeans = local_row_means,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Velocities ``(video [N_v, 96], audio [N_a, 32])`` at the given sigmas.

        ``text`` is ``[L, text_dim]`` or ``[1, L, text_dim]``; ``condition`` comes from
        :meth:`summarize_conditions`; ``text_mask`` is a bool ``[L]`` (True = keep).
        ``row_means`` computes the cross-row means (see `RowMeans`).
        """
        txt = self.encode_text(text)
        mask = None if text_mask is None else text_mask.to(self.device).reshape(-1).bool()
        cond = condition if condition is not None else torch.zeros_like(txt[0])
        t_v, t_a = self._time(sigma_video), self._time(sigma_audio)
        streams = [
            self.video_in(video_rows.to(self.device, torch.float32)),
            self.audio_in(audio_rows.to(self.device, torch.float32)),
        ]
        stream_cond = [t_v + self.stream_embed[0] + cond, t_a + self.stream_embed[1] + cond]
        for block in self.blocks:
            streams = block(streams, stream_cond, txt, mask, cond, row_means)
        outs: list[torch.Tensor] = []
        for x, c, head in zip(streams, stream_cond, (self.video_out, self.audio_out), strict=True):
            shift, scale = self.final_mod(F.silu(c)).chunk(2)
            outs.append(head(_norm(x) * (1 + scale) + shift))
        return outs[0], outs[1]

    def velocity_fn(
        self,
        text: torch.Tensor,
        condition: torch.Tensor | None = None,
        text_mask: torch.Tensor | None = None,
        row_means: RowMeans = local_row_means,
    ) -> VelocityFn:
        """Bind text and conditions: ``(video, audio, sigma_v, sigma_a) -> velocities``."""

        def fn(
            video: torch.Tensor, audio: torch.Tensor, s_v: torch.Tensor, s_a: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor]:
            return self(
                video,
                audio,
                text,
                s_v,
                s_a,
                condition=condition,
                text_mask=text_mask,
                row_means=row_means,
            )

        return fn
