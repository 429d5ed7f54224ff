"""A one-rank distributed job on a private in-process store (no process group needed to prepare)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from prenoise.distributed.group import DistContext


class OneRankContext(DistContext):
    """Rank 0 of 1 on the CPU, its status board on an in-process `HashStore`."""

    def __init__(self) -> None:
        super().__init__(0, 1, 0, [0], torch.device("cpu"), "gloo", 30.0, None)
        self._store = dist.HashStore()

    @property
    def store(self) -> dist.Store:
        return self._store
