"""The variables `torchrun` sets, read and checked in one place.

`generate`, `verify` and `bench` run distributed when `WORLD_SIZE` > 1, and then join a process
group from `RANK`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT`. Each of
them was read where it was used (`int(os.environ["RANK"])`), so a variable set by hand and set
wrongly (`WORLD_SIZE=abc`, `WORLD_SIZE=2` without `RANK` or `MASTER_ADDR`, a rank out of range)
surfaced as a `ValueError`/`KeyError` from deep inside, "internal error … please report it"
(exit 70), or as a rendezvous waiting for ranks that never come. `torchrun_env()` reads them all
at once and raises `TorchrunEnvError` (an `EnvVarError`: one line naming the variable, exit 2)
before any work; the CLI's torchrun decision and `distributed.group` both read it.

`WORLD_SIZE` unset (or empty) is one process, and the other variables are then not read: they
may belong to something else in the environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from prenoise.guards.env import EnvVarError

__all__ = ["MAX_WORLD_SIZE", "TorchrunEnv", "TorchrunEnvError", "torchrun_env"]

MAX_WORLD_SIZE = 1 << 20
"""More ranks than any job runs: a larger `WORLD_SIZE` is a typo, refused."""

_HINT = "torchrun sets it; unset WORLD_SIZE to run in one process"


class TorchrunEnvError(EnvVarError):
    """A variable `torchrun` sets is missing, not a number, or out of range."""


@dataclass(frozen=True)
class TorchrunEnv:
    """This process's place in a `torchrun` job (one process: world size 1, rank 0)."""

    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    local_world_size: int = 1
    master_addr: str | None = None
    master_port: int | None = None

    @property
    def distributed(self) -> bool:
        """More than one rank: the distributed commands run `prenoise.distributed`."""
        return self.world_size > 1


def _integer(
    environ: Mapping[str, str], name: str, low: int, high: int, default: int | None, of: str = ""
) -> int:
    """`name` as a decimal integer in [low, high]; `default` when unset (None: required); `of`
    says what bounds it ("for WORLD_SIZE=2")."""
    raw = environ.get(name)
    if raw is None or not raw.strip():
        if default is None:
            raise TorchrunEnvError(
                f"{name} is not set, but WORLD_SIZE={environ.get('WORLD_SIZE')!r} asks for a "
                f"distributed run ({_HINT})"
            )
        return default
    text = raw.strip()
    value = int(text) if text.isascii() and text.lstrip("+-").isdigit() else None
    if value is None or not low <= value <= high:
        accepted = f"an integer from {low} to {high}" if high != low else f"{low}"
        accepted += f" {of}" if of else ""
        raise TorchrunEnvError(f"{name}={raw!r} is not valid (accepted: {accepted}; {_HINT})")
    return value


def torchrun_env(environ: Mapping[str, str] = os.environ) -> TorchrunEnv:
    """The `torchrun` variables of `environ`, checked; see the module docstring.

    Raises :class:`TorchrunEnvError` naming the first variable that is missing or wrong."""
    raw_world = environ.get("WORLD_SIZE")
    if raw_world is None or not raw_world.strip():
        return TorchrunEnv()
    world = _integer(environ, "WORLD_SIZE", 1, MAX_WORLD_SIZE, None)
    of = f"for WORLD_SIZE={world}"
    if world == 1:  # torchrun --nproc-per-node 1: one process, the rank must still be 0
        _integer(environ, "RANK", 0, 0, 0, of)
        _integer(environ, "LOCAL_RANK", 0, 0, 0, of)
        return TorchrunEnv()
    rank = _integer(environ, "RANK", 0, world - 1, None, of)
    local_world = _integer(environ, "LOCAL_WORLD_SIZE", 1, world, world, of)
    local_rank = _integer(
        environ,
        "LOCAL_RANK",
        0,
        local_world - 1,
        rank % local_world,
        f"for LOCAL_WORLD_SIZE={local_world}",
    )
    addr = environ.get("MASTER_ADDR", "").strip()
    if not addr:
        raise TorchrunEnvError(
            f"MASTER_ADDR is not set, but WORLD_SIZE={raw_world!r} asks for a distributed run "
            f"(the address of rank 0's host; {_HINT})"
        )
    port = _integer(environ, "MASTER_PORT", 1, 65535, None)
    return TorchrunEnv(world, rank, local_rank, local_world, addr, port)
