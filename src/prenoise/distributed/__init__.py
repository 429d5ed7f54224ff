"""The Ref2VA pipeline on `torch.distributed`, with noise preparation shared per host.

Run `torchrun --nproc-per-node N -m prenoise generate|verify|bench --recipe R`: rank 0 plans the
request and broadcasts its plan (`request`), the ranks of a host draw each noise stream once into
shared memory (`host_noise`, `shm`), every rank builds bitwise-identical denoise inputs, and the
transformer runs sequence-parallel over row shards (`sequence_parallel`, `runner`). Failures and
hangs fail every rank within `parallel.timeout_s` (`status`). `launch.spawn_ranks` starts local
ranks without torchrun (tests, benchmarks).
"""

from __future__ import annotations

from prenoise.distributed.group import DistContext, init_distributed, shutdown
from prenoise.distributed.host_noise import HostSharedNoise
from prenoise.distributed.launch import RankOutcome, spawn_ranks
from prenoise.distributed.request import ResolvedRequest, broadcast_request, resolve_request
from prenoise.distributed.runner import DistributedPrepared, DistributedRef2VA
from prenoise.distributed.sequence_parallel import SequenceParallelTransformer, shard_rows
from prenoise.distributed.status import (
    DistributedPreparationError,
    RankFailedError,
    RankTimeoutError,
)
from prenoise.distributed.verification import (
    DistributedVerifyResult,
    denoise_max_error,
    verify_distributed,
)

__all__ = [
    "DistContext",
    "DistributedPreparationError",
    "DistributedPrepared",
    "DistributedRef2VA",
    "DistributedVerifyResult",
    "HostSharedNoise",
    "RankFailedError",
    "RankOutcome",
    "RankTimeoutError",
    "ResolvedRequest",
    "SequenceParallelTransformer",
    "broadcast_request",
    "denoise_max_error",
    "init_distributed",
    "resolve_request",
    "shard_rows",
    "shutdown",
    "spawn_ranks",
    "verify_distributed",
]
