"""Sequence parallelism for `JointTransformer`: each rank owns a contiguous shard of the rows.

Rows never attend to each other; the only cross-row operation is the row mean (a sum divided by a
count). Here every row mean is the all-reduced sum of the shard sums divided by the all-reduced
row count — one all-reduce per block (video and audio packed together) plus one for the condition
summary. Everything else is per row or replicated (timestep, text, weights), so a rank's velocity
shard equals the matching rows of a single-process forward up to the summation order of the
means. With one rank (or `group=None` and full shards) it is the single-process forward, bitwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from prenoise.ref2va.transformer import JointTransformer, VelocityFn

__all__ = ["RowShard", "SequenceParallelTransformer", "gather_rows", "shard_rows"]


@dataclass(frozen=True)
class RowShard:
    """Rows `[start, stop)` of `total`, owned by one rank."""

    start: int
    stop: int
    total: int

    @property
    def rows(self) -> int:
        """Rows in this shard."""
        return self.stop - self.start


def shard_rows(total: int, rank: int, world_size: int) -> RowShard:
    """Balanced contiguous split: rank r owns `[total·r // W, total·(r+1) // W)`."""
    return RowShard(total * rank // world_size, total * (rank + 1) // world_size, total)


def gather_rows(
    shard: torch.Tensor, spec: RowShard, world_size: int, group: dist.ProcessGroup | None
) -> torch.Tensor:
    """All ranks' shards concatenated in rank order (`[total, features]`, on `shard`'s device)."""
    if world_size == 1:
        return shard
    sizes = [shard_rows(spec.total, r, world_size).rows for r in range(world_size)]
    width = max(sizes)
    padded = shard.new_zeros((width, *shard.shape[1:]))
    padded[: shard.shape[0]] = shard
    parts = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(parts, padded, group=group)
    return torch.cat([p[:n] for p, n in zip(parts, sizes, strict=True)])


class SequenceParallelTransformer:
    """Runs a `JointTransformer`'s forward on row shards (see the module docstring).

    `group=None` with `world_size=1` runs locally. Shard sizes come from `shard_rows`, so every
    rank knows every global row count without communication; counts are still all-reduced with
    the sums (one tensor) as a consistency check.
    """

    def __init__(
        self, model: JointTransformer, world_size: int = 1, group: dist.ProcessGroup | None = None
    ) -> None:
        self.model = model
        self.world_size = world_size
        self.group = group

    def _global_means(self, parts: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[int]]:
        """Row means and row counts of the union of every rank's rows, per `[N_i, d]` shard."""
        sums = [p.sum(dim=0) for p in parts]
        counts = [p.shape[0] for p in parts]
        if self.world_size > 1:
            local = torch.tensor([float(c) for c in counts], device=parts[0].device)
            packed = torch.cat([*sums, local])
            dist.all_reduce(packed, group=self.group)
            sizes = [s.numel() for s in sums]
            sums = list(packed[: sum(sizes)].split(sizes))
            counts = [int(c) for c in packed[sum(sizes) :].tolist()]
        means = [
            s / c if c > 0 else s.new_zeros(s.shape) for s, c in zip(sums, counts, strict=True)
        ]
        return means, counts

    def summarize_conditions(
        self, video_cond: torch.Tensor | None, audio_cond: torch.Tensor | None
    ) -> torch.Tensor:
        """`JointTransformer.summarize_conditions` over shards of the condition rows.

        A None input must be None on every rank (the field is absent from the request).
        """
        return self.model.summarize_conditions(video_cond, audio_cond, row_means=self._global_means)

    def forward(
        self,
        video_rows: torch.Tensor,
        audio_rows: torch.Tensor,
        text: torch.Tensor,
        sigma_video: torch.Tensor | float,
        sigma_audio: torch.Tensor | float,
        condition: torch.Tensor | None = None,
        text_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`JointTransformer.forward` on this rank's video and audio row shards."""
        return self.model(
            video_rows,
            audio_rows,
            text,
            sigma_video,
            sigma_audio,
            condition=condition,
            text_mask=text_mask,
            row_means=self._global_means,
        )

    def velocity_fn(
        self,
        text: torch.Tensor,
        condition: torch.Tensor | None = None,
        text_mask: torch.Tensor | None = None,
    ) -> VelocityFn:
        """Bind text and conditions: `(video shard, audio shard, sigma_v, sigma_a) -> shards`."""
        return self.model.velocity_fn(text, condition, text_mask, row_means=self._global_means)
