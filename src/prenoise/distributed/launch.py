"""Start N local ranks without `torchrun` (tests, notebooks): spawned processes on loopback.

Each child gets the environment `torchrun` would set (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
`LOCAL_WORLD_SIZE`, `MASTER_ADDR=127.0.0.1`, a free `MASTER_PORT`), runs `fn(*args)` and sends
back its return value or its error text. Children still running at `timeout_s` are killed and
reported as such; the call itself never hangs.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["RankOutcome", "free_port", "spawn_ranks"]


@dataclass
class RankOutcome:
    """What one rank returned, or the `Type: text` of what it raised (`finished=False`: killed)."""

    rank: int
    ok: bool
    value: Any = None
    error: str = ""
    finished: bool = True
    seconds: float = 0.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _child(
    fn: Callable[..., Any],
    args: Sequence[Any],
    env: dict[str, str],
    results: Any,
) -> None:
    os.environ.update(env)
    rank = int(env["RANK"])
    start = time.perf_counter()
    # Outcomes travel as plain pickles: the queue's own pickler would share tensors through file
    # descriptors that die with this process, which may exit before the parent reads them.
    try:
        value = fn(*args)
        outcome = RankOutcome(rank, True, value, seconds=time.perf_counter() - start)
    except BaseException as exc:
        text = f"{type(exc).__name__}: {exc}"
        outcome = RankOutcome(rank, False, error=text, seconds=time.perf_counter() - start)
    try:
        results.put(pickle.dumps(outcome))
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def spawn_ranks(
    fn: Callable[..., Any],
    world_size: int,
    args: Sequence[Any] = (),
    *,
    timeout_s: float = 120.0,
    extra_env: dict[str, str] | None = None,
) -> list[RankOutcome]:
    """Run `fn(*args)` on `world_size` spawned ranks; outcomes in rank order (see module doc)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = []
    for rank in range(world_size):
        env = {
            "RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world_size),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            **(extra_env or {}),
        }
        proc = ctx.Process(target=_child, args=(fn, tuple(args), env, results), daemon=True)
        proc.start()
        procs.append(proc)
    outcomes: dict[int, RankOutcome] = {}
    deadline = time.monotonic() + timeout_s
    while len(outcomes) < world_size and time.monotonic() < deadline:
        try:
            outcome = pickle.loads(results.get(timeout=0.1))
            outcomes[outcome.rank] = outcome
        except queue.Empty:
            if all(not p.is_alive() for p in procs) and results.empty():
                break
    for rank, proc in enumerate(procs):
        if rank in outcomes:
            proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
            proc.join()
        if rank not in outcomes:
            outcomes[rank] = RankOutcome(
                rank, False, error=f"no result (exit code {proc.exitcode})", finished=False
            )
    return [outcomes[r] for r in range(world_size)]
