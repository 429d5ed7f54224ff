"""The process group of one `torchrun` job: ranks, hosts, devices, timeouts and the store.

`init_distributed` reads the variables `torchrun` sets (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
`LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`) and joins the default group with an explicit
timeout: gloo on CPU, nccl when the recipe's device is CUDA (plus a gloo group for Python objects
and status, since nccl cannot carry them). Every collective of the job raises after `timeout_s`
instead of hanging.

The ranks of one host are those that see the same shared-memory directory (`shm_identity`), not
those with the same host name: two hosts that share a name (containers, network namespaces,
cloned images) each keep their own host-shared noise.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import torch
import torch.distributed as dist

from prenoise.distributed.shm import shm_identity
from prenoise.guards.torchrun_env import torchrun_env

__all__ = ["DistContext", "env_world_size", "init_distributed", "shutdown"]


def env_world_size() -> int:
    """`WORLD_SIZE` from the environment (1 when unset; checked by `torchrun_env`)."""
    return torchrun_env().world_size


@dataclass
class DistContext:
    """Where this process sits in the job.

    `host_ranks` are the global ranks on this host (those that see this rank's `/dev/shm`), in
    order; `host_index` is this rank's position among them (0 = the host leader). `cpu_group` is
    a gloo group for objects and CPU tensors.
    """

    rank: int
    world_size: int
    local_rank: int
    host_ranks: list[int]
    device: torch.device
    backend: str
    timeout_s: float
    cpu_group: dist.ProcessGroup | None

    @property
    def host_index(self) -> int:
        """Index of this rank among the ranks of its host."""
        return self.host_ranks.index(self.rank)

    @property
    def is_host_leader(self) -> bool:
        """True on the lowest rank of each host."""
        return self.host_index == 0

    @property
    def store(self) -> dist.Store:
        """The job's key-value store (the one the default group rendezvoused on)."""
        # No public accessor exists; this one has been stable since torch 1.x.
        return dist.distributed_c10d._get_default_store()

    def barrier(self) -> None:
        """A barrier on the CPU group (raises after `timeout_s` if a rank does not arrive)."""
        dist.barrier(group=self.cpu_group)


def init_distributed(timeout_s: float, device: str = "cpu") -> DistContext:
    """Join the default process group from `torchrun`'s environment; see the module docstring.

    `device` is the recipe's device: `cuda` selects nccl and `cuda:LOCAL_RANK`, anything else
    selects gloo and the CPU.
    """
    env = torchrun_env()  # every variable checked: one line naming a wrong one, before any work
    rank, world, local_rank = env.rank, env.world_size, env.local_rank
    timeout = datetime.timedelta(seconds=timeout_s)
    use_cuda = device.startswith("cuda") and torch.cuda.is_available()
    if device.startswith("cuda") and not use_cuda:
        raise RuntimeError(f"recipe device {device!r} but CUDA is not available on rank {rank}")
    backend = "nccl" if use_cuda else "gloo"
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=timeout, rank=rank, world_size=world)
    cpu_group = dist.new_group(backend="gloo", timeout=timeout) if use_cuda else None
    hosts: list[str | None] = [None] * world
    dist.all_gather_object(hosts, shm_identity(), group=cpu_group)
    mine = hosts[rank]
    return DistContext(
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        host_ranks=[r for r, h in enumerate(hosts) if h == mine],
        device=torch.device("cuda", local_rank) if use_cuda else torch.device("cpu"),
        backend=backend,
        timeout_s=timeout_s,
        cpu_group=cpu_group,
    )


def shutdown() -> None:
    """Leave the process group (a no-op when none is initialised)."""
    if dist.is_initialized():
        dist.destroy_process_group()
